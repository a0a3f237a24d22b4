"""The fair pick of a partitioned lane's claim, in SQL (MariaDB and SQLite).

PostgreSQL folds the same pick into its one-statement capped and partition-rate-limited
claims (``fair_pick`` in ``sql/postgresql.sql``). Elsewhere a lane with a
``partition_limit`` claims on the portable path under the lane's row lock (see
``BackgroundTaskDbStore._lock_lane``): every claim of the lane then sees every earlier
one committed, so the running count per partition it reads is the cluster's. The pick
ranks the lane's due tasks within each partition (``row_number() OVER (PARTITION BY
partition_key ORDER BY priority DESC, run_at, id)``), leaves out the ranks a partition
has no room for, and takes by rank first: each partition's first task, then each one's
second (as :func:`~aster_forge.tasks._internal.fair_pick` does in memory). Window
functions cannot lock rows (``FOR UPDATE``), so the claim's UPDATE checks the picked
rows are still pending instead. Under a partition rate limit (see
``_task_partition_rates``) a partition also takes no more ranks than the starts it has
left in the window.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from ..tasks._internal import TaskStatus
from ._task_lanes import lane_open_predicate
from ._task_partition_rates import PartitionBudget

__all__ = ["fair_due"]


def fair_due(
    table: sa.Table,
    lanes: sa.Table,
    lane: str,
    now_expr: Any,
    partition_limit: int | None,
    room: int,
    budget: PartitionBudget | None = None,
) -> sa.Select[Any]:
    """The ids of up to ``room`` due tasks of ``lane`` a partitioned claim takes
    (``budget``: under a partition rate limit, no partition past its starts left)."""
    t = table
    turn = sa.func.row_number().over(
        partition_by=t.c.partition_key, order_by=(t.c.priority.desc(), t.c.run_at, t.c.id)
    )
    ranked = (
        sa.select(t.c.id, t.c.partition_key, t.c.priority, t.c.run_at, turn.label("turn"))
        .where(
            t.c.lane == lane,
            t.c.status == TaskStatus.PENDING.value,
            t.c.run_at <= now_expr,
            lane_open_predicate(lanes, lane),
        )
        .subquery("ranked")
    )
    source: Any = ranked
    caps = []
    if partition_limit is not None:
        running = (
            sa.select(t.c.partition_key, sa.func.count().label("n"))
            .where(
                t.c.lane == lane,
                t.c.status == TaskStatus.RUNNING.value,
                t.c.partition_key.isnot(None),
            )
            .group_by(t.c.partition_key)
            .subquery("running_in")
        )
        source = source.outerjoin(running, ranked.c.partition_key == running.c.partition_key)
        taken = sa.func.coalesce(running.c.n, 0)
        caps.append(ranked.c.turn + taken <= partition_limit)
    if budget is not None:
        spent = budget.spent
        source = source.outerjoin(spent, ranked.c.partition_key == spent.c.partition_key)
        caps.append(ranked.c.turn + sa.func.coalesce(spent.c.spent, 0) <= budget.count)
        caps.append(budget.current)
    return (
        sa.select(ranked.c.id)
        .select_from(source)
        .where(sa.or_(ranked.c.partition_key.is_(None), sa.and_(*caps)))
        .order_by(ranked.c.turn, ranked.c.priority.desc(), ranked.c.run_at, ranked.c.id)
        .limit(room)
    )
