"""Operator reads of the task table: filtered search, counts, lane overview, throughput."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from ..tasks._internal import (
    BackgroundTaskRecord,
    TaskFailureReason,
    TaskLaneStatusCounts,
    TaskQuery,
    TaskSearchPage,
    TaskStatus,
    TaskThroughput,
    check_search_page_args,
    check_throughput_minutes,
)
from ._tables import record_from_row
from ._tasks_sql import TaskSql
from ._time import UtcDateTime

__all__ = ["TaskAdminQueryMixin", "query_conditions"]

_MINUTE_FORMAT = "%Y-%m-%d %H:%M"
_RETRY_REASONS = (TaskFailureReason.PRODUCT_ERROR.value, TaskFailureReason.LEASE_EXPIRED.value)


def query_conditions(t: sa.Table, query: TaskQuery) -> list[Any]:
    """The ``WHERE`` conditions selecting the rows ``query`` describes."""
    conditions: list[Any] = []
    if query.status is not None:
        conditions.append(t.c.status == query.status.value)
    if query.kind is not None:
        conditions.append(t.c.kind == query.kind)
    if query.lane is not None:
        conditions.append(t.c.lane == query.lane)
    if query.task_id is not None:
        conditions.append(t.c.id == query.task_id)
    if query.dedupe_key is not None:
        conditions.append(t.c.dedupe_key == query.dedupe_key)
    if query.error_contains is not None:
        # LIKE with the operator's text escaped (so "%" and "_" match themselves).
        conditions.append(t.c.last_error.icontains(query.error_contains, autoescape=True))
    if query.created_from is not None:
        conditions.append(t.c.created_at >= sa.literal(query.created_from, UtcDateTime()))
    if query.created_until is not None:
        conditions.append(t.c.created_at < sa.literal(query.created_until, UtcDateTime()))
    return conditions


def _minute_value(text: str) -> datetime:
    return datetime.strptime(text, _MINUTE_FORMAT).replace(tzinfo=UTC)


class TaskAdminQueryMixin:
    """Operator reads of :class:`~aster_forge.db.BackgroundTaskDbStore`."""

    _table: sa.Table
    _sql: TaskSql
    _cols: list[sa.Column[Any]]

    async def _rows(self, conn: AsyncConnection, statement: Any) -> list[BackgroundTaskRecord]:
        return [record_from_row(row) for row in await conn.execute(statement)]

    async def _exists(self, conn: AsyncConnection, conditions: list[Any]) -> bool:
        t = self._table
        found = await conn.execute(sa.select(t.c.id).where(*conditions).limit(1))
        return found.first() is not None

    async def search_tasks(
        self,
        query: TaskQuery,
        *,
        limit: int = 50,
        before_id: int | None = None,
        after_id: int | None = None,
    ) -> TaskSearchPage:
        """One page matching ``query``, newest first, keyset-paged both ways."""
        check_search_page_args(limit, before_id, after_id)
        t = self._table
        where = query_conditions(t, query)

        async def body(conn: AsyncConnection) -> TaskSearchPage:
            cursor = [] if before_id is None else [t.c.id < before_id]
            if after_id is None:
                statement = sa.select(*self._cols).where(*where, *cursor)
                rows = await self._rows(conn, statement.order_by(t.c.id.desc()).limit(limit + 1))
                items = rows[:limit]
                older = len(rows) > limit
                newer = bool(items) and before_id is not None
            else:
                statement = sa.select(*self._cols).where(*where, *cursor, t.c.id > after_id)
                rows = await self._rows(conn, statement.order_by(t.c.id.asc()).limit(limit + 1))
                items = rows[:limit][::-1]
                newer = len(rows) > limit
                older = bool(items)
            # The side we came from may have changed meanwhile: ask instead of assuming.
            if items and before_id is not None:
                newer = await self._exists(conn, [*where, t.c.id > items[0].id])
            if items and after_id is not None:
                older = await self._exists(conn, [*where, t.c.id < items[-1].id])
            return TaskSearchPage(
                tuple(items),
                items[-1].id if items and older else None,
                items[0].id if items and newer else None,
            )

        return await self._sql.run("search tasks", body)

    async def count_tasks(self, query: TaskQuery) -> Mapping[TaskStatus, int]:
        """Rows matching ``query`` (its status ignored) per status, zeros included."""
        t = self._table
        where = query_conditions(t, query.without_status())
        statement = sa.select(t.c.status, sa.func.count()).where(*where).group_by(t.c.status)

        async def body(conn: AsyncConnection) -> dict[TaskStatus, int]:
            counts = dict.fromkeys(TaskStatus, 0)
            for status, count in await conn.execute(statement):
                counts[TaskStatus(status)] = int(count)
            return counts

        return await self._sql.run("count tasks", body, single_statement=True)

    async def lane_status_counts(self) -> Sequence[TaskLaneStatusCounts]:
        """Every lane with rows: counts by status and the oldest pending row, by lane."""
        t = self._table
        oldest = sa.func.min(
            sa.case((t.c.status == TaskStatus.PENDING.value, t.c.created_at), else_=sa.null()),
            type_=UtcDateTime(),
        )
        statement = sa.select(t.c.lane, t.c.status, sa.func.count(), oldest).group_by(
            t.c.lane, t.c.status
        )

        async def body(conn: AsyncConnection) -> list[TaskLaneStatusCounts]:
            now = await self._now_value(conn)
            counts: dict[str, dict[TaskStatus, int]] = {}
            pending: dict[str, datetime] = {}
            for lane, status, count, first in await conn.execute(statement):
                counts.setdefault(lane, dict.fromkeys(TaskStatus, 0))[TaskStatus(status)] = int(
                    count
                )
                if first is not None:
                    pending[lane] = first
            return [
                TaskLaneStatusCounts(lane, counts[lane], pending.get(lane), now)
                for lane in sorted(counts)
            ]

        return await self._sql.run("count tasks by lane and status", body)

    async def _now_value(self, conn: AsyncConnection) -> datetime:
        now_expr, now_value = await self._sql.now(conn)
        if now_value is None:
            now_value = (await conn.execute(sa.select(now_expr))).scalar_one()
        return now_value

    async def task_throughput(self, *, minutes: int = 60) -> Sequence[TaskThroughput]:
        """Outcomes per lane per minute over the last ``minutes`` (store clock)."""
        check_throughput_minutes(minutes)
        t = self._table
        minute_of = self._sql.backend_sql.minute

        async def body(conn: AsyncConnection) -> list[TaskThroughput]:
            now = await self._now_value(conn)
            start = now.replace(second=0, microsecond=0) - timedelta(minutes=minutes - 1)
            since = sa.literal(start, UtcDateTime())
            finished_minute = minute_of(t.c.finished_at)
            finished = (
                sa.select(t.c.lane, t.c.status, finished_minute, sa.func.count())
                .where(
                    t.c.status.in_((TaskStatus.SUCCEEDED.value, TaskStatus.FAILED.value)),
                    t.c.finished_at >= since,
                )
                .group_by(t.c.lane, t.c.status, finished_minute)
            )
            retry_minute = minute_of(t.c.updated_at)
            retried = (
                sa.select(
                    t.c.lane, sa.literal(TaskStatus.PENDING.value), retry_minute, sa.func.count()
                )
                .where(
                    t.c.status == TaskStatus.PENDING.value,
                    t.c.attempt > 0,
                    t.c.failure_reason.in_(_RETRY_REASONS),
                    t.c.updated_at >= since,
                )
                .group_by(t.c.lane, retry_minute)
            )
            buckets: dict[tuple[datetime, str], list[int]] = {}
            column = {TaskStatus.SUCCEEDED.value: 0, TaskStatus.FAILED.value: 1}
            for statement in (finished, retried):
                for lane, status, minute, count in await conn.execute(statement):
                    entry = buckets.setdefault((_minute_value(minute), lane), [0, 0, 0])
                    entry[column.get(status, 2)] += int(count)
            return [
                TaskThroughput(lane, minute, *counts)
                for (minute, lane), counts in sorted(buckets.items())
            ]

        return await self._sql.run("task throughput", body)
