"""The partition rate table beside a task table: each partition's starts per window.

A lane with a ``partition_rate_limit`` counts each partition's starts in the window
``<tasks table>_partition_rates`` holds for it: one row per (lane, partition) that
started a task, with the window it counted last. Claims of such a lane hold the lane's
row in the lane table (see ``BackgroundTaskDbStore._claim_rated``), so each reads the
counts every earlier claim committed. A row of a window that ended counts no starts:
a claim that records starts first deletes the lane's rows of ended windows, so the
table keeps about one row per partition that started a task in a current window.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from ..tasks._internal import MAX_TASK_KIND_LENGTH, MAX_TASK_PARTITION_LENGTH
from ._time import DatabaseBackend, UtcDateTime

__all__ = [
    "PartitionBudget",
    "define_partition_rates_table",
    "partition_budget",
    "partition_rates_table_name",
    "record_partition_starts",
]


def partition_rates_table_name(tasks_table_name: str) -> str:
    """The partition rate table of a task table: ``<tasks table>_partition_rates``."""
    return f"{tasks_table_name}_partition_rates"


def define_partition_rates_table(metadata: sa.MetaData, name: str) -> sa.Table:
    """Define (or return) the partition rate table.

    Columns: ``lane`` and ``partition_key`` (the primary key), ``window_start`` (the
    window the partition's starts were counted in last, aware UTC) and ``started``
    (the starts counted in it).
    """
    existing = metadata.tables.get(name)
    if existing is not None:
        return existing
    return sa.Table(
        name,
        metadata,
        sa.Column("lane", sa.String(MAX_TASK_KIND_LENGTH), primary_key=True),
        sa.Column("partition_key", sa.String(MAX_TASK_PARTITION_LENGTH), primary_key=True),
        sa.Column("window_start", UtcDateTime(), nullable=False),
        sa.Column("started", sa.Integer(), nullable=False),
        mysql_engine="InnoDB",
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
    )


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
    backend: DatabaseBackend,
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
    if backend is DatabaseBackend.MYSQL:
        my = mysql.insert(rates).values(rows)
        added = my.inserted.started
        # started first: MariaDB evaluates the assignments left to right.
        changes: list[tuple[str, Any]] = [
            ("started", sa.case((same, rates.c.started + added), else_=added)),
            ("window_start", my.inserted.window_start),
        ]
        await conn.execute(my.on_duplicate_key_update(changes))
        return
    upsert: Any = (
        postgresql.insert(rates) if backend is DatabaseBackend.POSTGRESQL else sqlite.insert(rates)
    ).values(rows)
    added = upsert.excluded.started
    await conn.execute(
        upsert.on_conflict_do_update(
            index_elements=[rates.c.lane, rates.c.partition_key],
            set_={
                "started": sa.case((same, rates.c.started + added), else_=added),
                "window_start": upsert.excluded.window_start,
            },
        )
    )
