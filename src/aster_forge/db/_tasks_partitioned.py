"""The fair pick of a partitioned lane's claim, in SQL (MariaDB and SQLite).

PostgreSQL folds the same pick into its one-statement capped claim (``fair_pick`` in
``sql/postgresql.sql``). Elsewhere a lane with a ``partition_limit`` claims on the portable
path under the lane's row lock (see ``BackgroundTaskDbStore._lock_lane``): every
claim of the lane then sees every earlier one committed, so the running count per
partition it reads is the cluster's. The pick ranks the lane's due tasks within each partition
(``row_number() OVER (PARTITION BY partition_key ORDER BY priority DESC, run_at,
id)``), leaves out the ranks a partition has no room for, and takes by rank first:
each partition's first task, then each one's second (as
:func:`~aster_forge.tasks._internal.fair_pick` does in memory). Window functions
cannot lock rows (``FOR UPDATE``), so the claim's UPDATE checks the picked rows are
still pending instead.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from ..tasks._internal import TaskStatus
from ._task_lanes import lane_open_predicate

__all__ = ["fair_due"]


def fair_due(
    table: sa.Table, lanes: sa.Table, lane: str, now_expr: Any, partition_limit: int, room: int
) -> sa.Select[Any]:
    """The ids of up to ``room`` due tasks of ``lane`` a partitioned claim takes."""
    t = table
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
    taken = sa.func.coalesce(running.c.n, 0)
    return (
        sa.select(ranked.c.id)
        .select_from(ranked.outerjoin(running, ranked.c.partition_key == running.c.partition_key))
        .where(sa.or_(ranked.c.partition_key.is_(None), ranked.c.turn + taken <= partition_limit))
        .order_by(ranked.c.turn, ranked.c.priority.desc(), ranked.c.run_at, ranked.c.id)
        .limit(room)
    )
