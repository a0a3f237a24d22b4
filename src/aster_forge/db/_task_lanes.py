"""The lane state table beside a task table, and the store's pause/resume half."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from ..tasks._internal import TaskLaneState, wire_value
from ._tasks_sql import TaskSql

__all__ = [
    "TaskLaneMixin",
    "rate_budget_left",
    "record_rate_starts",
]


def lane_open_predicate(lanes: sa.Table, lane: str) -> Any:
    """``NOT EXISTS`` a paused row for ``lane``: the condition a claim adds."""
    return sa.not_(
        sa.exists().where(lanes.c.lane == lane, lanes.c.paused == sa.true()).correlate_except(lanes)
    )


def rate_budget_left(
    counted: tuple[datetime | None, int | None], window: datetime, count: int
) -> int:
    """Starts left in ``window``, from the (locked) lane row's ``counted`` window and
    the starts in it.

    None once a later window was counted: this claim's "now" was taken before another
    claimer's that committed first, and a start now would land in a window whose count
    is no longer kept.
    """
    stored, started = counted
    if stored is None or stored < window:
        return count
    if stored > window:
        return 0
    return max(count - (started or 0), 0)


async def record_rate_starts(
    conn: AsyncConnection, lanes: sa.Table, lane: str, window: datetime, started: int
) -> None:
    """Count ``started`` more starts of ``lane`` in ``window`` (its row is locked)."""
    same = lanes.c.rate_window_start == window
    started_total = sa.case((same, sa.func.coalesce(lanes.c.rate_started, 0)), else_=0) + started
    # rate_started first: MariaDB evaluates the assignments left to right.
    await conn.execute(
        sa.update(lanes)
        .where(lanes.c.lane == lane)
        .ordered_values((lanes.c.rate_started, started_total), (lanes.c.rate_window_start, window))
    )


def _state(row: Any) -> TaskLaneState:
    m = row._mapping
    return TaskLaneState(
        lane=m["lane"],
        paused=bool(m["paused"]),
        paused_at=m["paused_at"],
        updated_at=m["updated_at"],
        rate_window_start=m["rate_window_start"],
        rate_started=int(m["rate_started"] or 0),
    )


class TaskLaneMixin:
    """The lane pause/resume half of :class:`~aster_forge.db.BackgroundTaskDbStore`."""

    _lanes: sa.Table
    _sql: TaskSql

    async def _set_paused(self, lane: str, paused: bool) -> TaskLaneState:
        lane_value = wire_value(lane, "lane")
        lanes = self._lanes

        async def body(conn: AsyncConnection) -> TaskLaneState:
            now_expr, _ = await self._sql.now(conn)
            await conn.execute(self._upsert(lane_value, paused, now_expr))
            stored = (await conn.execute(sa.select(lanes).where(lanes.c.lane == lane_value))).one()
            return _state(stored)

        return await self._sql.run("pause lane" if paused else "resume lane", body)

    def _upsert(self, lane: str, paused: bool, now_expr: Any) -> Any:
        lanes = self._lanes
        # Pausing a paused lane keeps its first paused_at; resuming clears it.
        paused_at: Any = (
            sa.case((lanes.c.paused == sa.true(), lanes.c.paused_at), else_=now_expr)
            if paused
            else sa.null()
        )
        values = {
            "lane": lane,
            "paused": paused,
            "paused_at": now_expr if paused else None,
            "updated_at": now_expr,
        }
        # paused_at first: MariaDB evaluates the assignments left to right.
        changes = [("paused_at", paused_at), ("paused", paused), ("updated_at", now_expr)]
        return self._sql.backend_sql.upsert(lanes, values, changes)

    async def pause_lane(self, lane: str) -> TaskLaneState:
        """Pause ``lane`` for every instance: claims skip it, running tasks finish."""
        return await self._set_paused(lane, True)

    async def resume_lane(self, lane: str) -> TaskLaneState:
        """Resume ``lane``: claims take its due tasks again."""
        return await self._set_paused(lane, False)

    async def lane_states(self, lanes: Sequence[str] | None = None) -> list[TaskLaneState]:
        """Stored lane states sorted by lane (exactly ``lanes`` when given)."""
        wanted = None if lanes is None else sorted({wire_value(lane, "lane") for lane in lanes})
        table = self._lanes
        query = sa.select(table).order_by(table.c.lane)
        if wanted is not None:
            query = query.where(table.c.lane.in_(wanted))

        async def body(conn: AsyncConnection) -> list[TaskLaneState]:
            return [_state(row) for row in await conn.execute(query)]

        stored = {s.lane: s for s in await self._sql.run("list lanes", body, single_statement=True)}
        if wanted is None:
            return list(stored.values())
        return [stored.get(lane, TaskLaneState(lane)) for lane in wanted]
