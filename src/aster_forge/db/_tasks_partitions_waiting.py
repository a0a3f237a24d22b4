"""The partitions of a lane with the most due tasks, for the lanes view and metrics."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from ..tasks._internal import TOP_PARTITIONS_WAITING, TaskStatus

__all__ = ["top_partitions_waiting"]


async def top_partitions_waiting(
    conn: AsyncConnection, table: sa.Table, lanes: Sequence[str], now_expr: Any
) -> dict[str, list[tuple[str, int]]]:
    """Per lane of ``lanes``, its up to ``TOP_PARTITIONS_WAITING`` partitions with the
    most due pending tasks, as ``(partition, due tasks)`` by count descending, then
    partition (one grouped read; the ranking is done in SQL, so a lane with many
    partitions returns only its first few)."""
    t = table
    per_partition = (
        sa.select(t.c.lane, t.c.partition_key, sa.func.count().label("n"))
        .where(
            t.c.lane.in_(lanes),
            t.c.status == TaskStatus.PENDING.value,
            t.c.run_at <= now_expr,
            t.c.partition_key.isnot(None),
        )
        .group_by(t.c.lane, t.c.partition_key)
        .subquery("per_partition")
    )
    place = sa.func.row_number().over(
        partition_by=per_partition.c.lane,
        order_by=(per_partition.c.n.desc(), per_partition.c.partition_key),
    )
    ranked = sa.select(
        per_partition.c.lane, per_partition.c.partition_key, per_partition.c.n, place.label("place")
    ).subquery("ranked")
    query = (
        sa.select(ranked.c.lane, ranked.c.partition_key, ranked.c.n)
        .where(ranked.c.place <= TOP_PARTITIONS_WAITING)
        .order_by(ranked.c.lane, ranked.c.place)
    )
    top: dict[str, list[tuple[str, int]]] = {}
    for lane, partition, count in await conn.execute(query):
        top.setdefault(lane, []).append((partition, int(count)))
    return top
