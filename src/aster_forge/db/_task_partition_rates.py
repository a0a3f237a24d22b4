"""The partition rate table beside a task table: each partition's starts per window.

A lane with a ``partition_rate_limit`` counts each partition's starts in the window
``<tasks table>_partition_rates`` holds for it: one row per (lane, partition) that
started a task, with the window it counted last. Claims of such a lane hold the lane's
row in the lane table (see ``BackgroundTaskDbStore._claim_rated``; on PostgreSQL one
statement, ``partition_rate_gate`` in ``sql/postgresql.sql``, which claims again when
its snapshot missed a claim that committed while it waited), so each reads the counts
every earlier claim committed. A row of a window that ended counts no starts:
a claim that records starts first deletes the lane's rows of ended windows, so the
table keeps about one row per partition that started a task in a current window.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from ._tasks_sql import BackendSql

__all__ = [
    "PartitionBudget",
    "partition_budget",
    "record_partition_starts",
]


@dataclass(frozen=True, slots=True)
class PartitionBudget:
    """What a claim under a partition rate limit may start per partition.

    Attributes:
        spent: A subquery of ``(partition_key, spent)``: the starts each partition
            counted in the window (partitions without a row spent none).
        count: The starts a partition may make per window.
        current: True when no claim counted a later window yet.
    """

    spent: Any
    count: int
    current: Any


def partition_budget(rates: sa.Table, lane: str, window: datetime, count: int) -> PartitionBudget:
    """The budget of ``lane``'s partitions in ``window`` under ``count`` starts each.

    Once any partition of the lane counted a later window, no partition has budget:
    another claimer whose "now" was later committed first, and the count of this
    window may be gone (pruned, or overwritten by the later window's), as
    ``rate_budget_left`` says for the lane.
    """
    spent = sa.select(rates.c.partition_key, rates.c.started.label("spent")).where(
        rates.c.lane == lane, rates.c.window_start == window
    )
    later = sa.exists().where(rates.c.lane == lane, rates.c.window_start > window)
    return PartitionBudget(spent=spent.subquery("spent_in"), count=count, current=sa.not_(later))


async def record_partition_starts(
    conn: AsyncConnection,
    rates: sa.Table,
    backend_sql: BackendSql,
    lane: str,
    window: datetime,
    started: Mapping[str, int],
) -> None:
    """Count ``started`` more starts per partition of ``lane`` in ``window``, after
    deleting the lane's rows of ended windows (the lane's row is locked)."""
    if not started:
        return
    await conn.execute(sa.delete(rates).where(rates.c.lane == lane, rates.c.window_start < window))
    rows = [
        {"lane": lane, "partition_key": key, "window_start": window, "started": n}
        for key, n in sorted(started.items())
    ]
    same = rates.c.window_start == window
    # One upsert per partition (a claim starts tasks of a few): ``started`` first,
    # as MariaDB applies the changes in order.
    for row in rows:
        added = row["started"]
        changes = [
            ("started", sa.case((same, rates.c.started + added), else_=added)),
            ("window_start", window),
        ]
        await conn.execute(backend_sql.upsert(rates, row, changes))
