"""Admin reads and writes of the task store: get, list, retry, cancel (one or many), lane counts."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from ..tasks._internal import (
    MAX_TASK_ID,
    BackgroundTaskRecord,
    TaskBulkResult,
    TaskCancelOutcome,
    TaskFailureReason,
    TaskLaneCounts,
    TaskPage,
    TaskQuery,
    TaskStatus,
    cancel_active_step,
    check_bulk_limit,
    check_list_tasks_args,
    check_run_at,
    parse_task_steps_json,
    serialize_task_steps_json,
    wire_value,
)
from ..tasks.errors import TaskNotFoundError, TaskStateError
from ._tables import record_from_row
from ._task_deps import TaskDependencySql
from ._tasks_admin_query import TaskAdminQueryMixin, query_conditions
from ._tasks_partitions_waiting import top_partitions_waiting
from ._tasks_results import execute_ending
from ._tasks_sql import TaskSql
from ._time import UtcDateTime

__all__ = ["TaskAdminMixin"]

_TERMINAL_RETRYABLE = (TaskStatus.FAILED.value, TaskStatus.CANCELLED.value)


class TaskAdminMixin(TaskAdminQueryMixin):
    """The admin half of :class:`~aster_forge.db.BackgroundTaskDbStore`."""

    _table: sa.Table
    _sql: TaskSql
    _deps: TaskDependencySql
    _cols: list[sa.Column[Any]]

    async def _get(self, conn: AsyncConnection, task_id: int) -> BackgroundTaskRecord | None:
        row = (
            await conn.execute(sa.select(*self._cols).where(self._table.c.id == task_id))
        ).first()
        return None if row is None else record_from_row(row)

    async def get_task(self, task_id: int) -> BackgroundTaskRecord | None:
        """Return the row, or ``None`` when it does not exist."""
        if not _valid_id(task_id):
            return None  # no BIGINT row can have it; never hand it to the driver

        async def body(conn: AsyncConnection) -> BackgroundTaskRecord | None:
            return await self._get(conn, task_id)

        return await self._sql.run("get task", body, single_statement=True)

    async def list_tasks(
        self,
        *,
        status: TaskStatus | None = None,
        kind: str | None = None,
        lane: str | None = None,
        limit: int = 50,
        before_id: int | None = None,
    ) -> TaskPage:
        """One page of rows, newest first, filtered by status/kind/lane."""
        status_v, kind_v, lane_v = check_list_tasks_args(status, kind, lane, limit, before_id)
        t = self._table
        query = sa.select(*self._cols).order_by(t.c.id.desc()).limit(limit + 1)
        if status_v is not None:
            query = query.where(t.c.status == status_v.value)
        if kind_v is not None:
            query = query.where(t.c.kind == kind_v)
        if lane_v is not None:
            query = query.where(t.c.lane == lane_v)
        if before_id is not None:
            query = query.where(t.c.id < before_id)

        async def body(conn: AsyncConnection) -> list[BackgroundTaskRecord]:
            return [record_from_row(row) for row in await conn.execute(query)]

        rows = await self._sql.run("list tasks", body, single_statement=True)
        items = rows[:limit]
        return TaskPage(items, items[-1].id if len(rows) > limit else None)

    async def retry_task(
        self, task_id: int, *, run_at: datetime | None = None, force: bool = False
    ) -> BackgroundTaskRecord:
        """Operator retry of a failed/cancelled task (see the protocol)."""
        check_run_at(run_at)
        if not _valid_id(task_id):
            raise TaskNotFoundError(task_id)
        t = self._table

        async def body(conn: AsyncConnection) -> BackgroundTaskRecord:
            now = await self._sql.now(conn)
            stmt = (
                sa.update(t)
                .where(t.c.id == task_id, t.c.status.in_(_TERMINAL_RETRYABLE))
                .values(**self._retry_values(now.expr, run_at))
            )
            if not force:
                stmt = stmt.where(self._retry_allowed())
            if (await conn.execute(stmt)).rowcount == 1:
                await self._deps.restore(conn, now, [task_id])
                record = await self._get(conn, task_id)
                assert record is not None  # written in this transaction
                return record
            current = await self._get(conn, task_id)
            if current is None:
                raise TaskNotFoundError(task_id)
            if current.status.value not in _TERMINAL_RETRYABLE:
                raise TaskStateError(
                    task_id, current.status.value, "only failed or cancelled tasks retry"
                )
            raise TaskStateError(task_id, current.status.value, "manual retry is not allowed")

        return await self._sql.run("retry task", body)

    def _retry_allowed(self) -> Any:
        """The operator-retry rule without ``force`` (``task_actions`` in the web layer)."""
        t = self._table
        return sa.and_(
            t.c.status.in_(_TERMINAL_RETRYABLE),
            sa.or_(t.c.status == TaskStatus.CANCELLED.value, t.c.manual_retry_allowed.is_(True)),
        )

    def _retry_values(self, now: Any, run_at: datetime | None) -> dict[str, Any]:
        due = now if run_at is None else sa.literal(run_at, UtcDateTime())
        # Not yet due: kept out of the claims' index (see background_tasks_table).
        waiting = self._sql.backend_sql.waiting(due > now)
        return {
            **waiting,
            "status": TaskStatus.PENDING.value,
            "attempt": 0,
            "run_at": due,
            "result_json": None,
            "failure_reason": None,
            "manual_retry_allowed": True,
            "cancel_requested": False,
            "rescued": False,
            "processing_token": None,
            "lease_expires_at": None,
            "updated_at": now,
            "finished_at": None,
        }

    def _cancel_values(self, now: Any) -> dict[str, Any]:
        return {
            "status": TaskStatus.CANCELLED.value,
            "failure_reason": TaskFailureReason.CANCELLED.value,
            "rescued": False,
            "updated_at": now,
            "finished_at": now,
        }

    async def _bulk(
        self,
        operation: str,
        query: TaskQuery,
        limit: int,
        dry_run: bool,
        apply: dict[str, tuple[Any, Any]],
        after: dict[str, Callable[[AsyncConnection, list[int]], Awaitable[None]]] | None = None,
    ) -> TaskBulkResult:
        """Select up to ``limit`` matching rows, lock the eligible ones, write each group.

        ``apply`` maps a group name to ``(condition, values(now))``; a row is eligible
        when it meets one group's condition. ``after`` maps a group name to what runs on
        its changed rows in the same transaction. The eligible rows are read ``FOR UPDATE``
        (SQLite: the transaction holds the write lock), so the conditional writes change
        exactly them.
        """
        check_bulk_limit(limit)
        t = self._table
        where = query_conditions(t, query)
        after = after or {}

        async def body(conn: AsyncConnection) -> TaskBulkResult:
            now = await self._sql.now(conn)
            selected = await conn.execute(
                sa.select(t.c.id).where(*where).order_by(t.c.id.desc()).limit(limit)
            )
            ids = [int(row[0]) for row in selected]
            if not ids:
                return TaskBulkResult(0, 0, ())
            changed: list[int] = []
            eligible = 0
            for name, (condition, values) in apply.items():
                locked = await conn.execute(
                    sa.select(t.c.id)
                    .where(t.c.id.in_(ids), condition)
                    .order_by(t.c.id)
                    .with_for_update()
                )
                group = [int(row[0]) for row in locked]
                eligible += len(group)
                if group and not dry_run:
                    write = sa.update(t).where(t.c.id.in_(group), condition)
                    await execute_ending(conn, self._sql, write.values(**values(now.expr)))
                    if name in after:
                        await after[name](conn, group)
                    changed += group
            return TaskBulkResult(len(ids), eligible, tuple(sorted(changed, reverse=True)))

        return await self._sql.run(operation, body)

    async def retry_tasks(
        self, query: TaskQuery, *, limit: int, dry_run: bool = False
    ) -> TaskBulkResult:
        """Operator retry of up to ``limit`` matching rows (the single retry's rule)."""
        return await self._bulk(
            "retry tasks",
            query,
            limit,
            dry_run,
            {"retry": (self._retry_allowed(), lambda now: self._retry_values(now, None))},
            after={"retry": self._restore_dependents},
        )

    async def _restore_dependents(self, conn: AsyncConnection, ids: list[int]) -> None:
        """Bring back the workflow dependents the endings of retried ``ids`` cancelled."""
        await self._deps.restore(conn, await self._sql.now(conn), ids)

    async def cancel_tasks(
        self, query: TaskQuery, *, limit: int, dry_run: bool = False
    ) -> TaskBulkResult:
        """Operator cancel of up to ``limit`` matching rows (pending ends; running is flagged)."""
        t = self._table
        running = sa.and_(t.c.status == TaskStatus.RUNNING.value, t.c.cancel_requested.is_(False))
        return await self._bulk(
            "cancel tasks",
            query,
            limit,
            dry_run,
            {
                "pending": (self._pending, self._cancel_values),
                "running": (
                    running,
                    lambda now: {"cancel_requested": True, "updated_at": now},
                ),
            },
            after={"pending": self._cancel_waiting_steps},
        )

    @property
    def _pending(self) -> Any:
        return self._table.c.status == TaskStatus.PENDING.value

    async def _cancel_waiting_steps(self, conn: AsyncConnection, ids: list[int]) -> None:
        """End the active step ("Waiting for worker") of tasks cancelled while pending, and
        settle the dependents of any a workflow waits for."""
        t = self._table
        await self._deps.settle(conn, await self._sql.now(conn), ids)
        rows = await conn.execute(
            sa.select(t.c.id, t.c.steps_json).where(t.c.id.in_(ids), t.c.steps_json.is_not(None))
        )
        for task_id, steps_json in rows.all():
            steps = parse_task_steps_json(steps_json)
            ended = cancel_active_step(steps)
            if ended != tuple(steps):
                await conn.execute(
                    sa.update(t)
                    .where(t.c.id == task_id)
                    .values(steps_json=serialize_task_steps_json(ended))
                )

    async def cancel_task(self, task_id: int) -> TaskCancelOutcome:
        """Cancel a pending task, or flag a running one (its fence is untouched)."""
        if not _valid_id(task_id):
            return TaskCancelOutcome.NOT_FOUND
        t = self._table

        async def body(conn: AsyncConnection) -> TaskCancelOutcome:
            now = await self._sql.now(conn)
            cancel = (
                sa.update(t)
                .where(t.c.id == task_id, t.c.status == TaskStatus.PENDING.value)
                .values(**self._cancel_values(now.expr))
            )
            if await execute_ending(conn, self._sql, cancel) == 1:
                await self._cancel_waiting_steps(conn, [task_id])
                return TaskCancelOutcome.CANCELLED
            flagged = await conn.execute(
                sa.update(t)
                .where(t.c.id == task_id, t.c.status == TaskStatus.RUNNING.value)
                .values(cancel_requested=True, updated_at=now.expr)
            )
            if flagged.rowcount == 1:
                return TaskCancelOutcome.CANCEL_REQUESTED
            exists = (await conn.execute(sa.select(t.c.id).where(t.c.id == task_id))).first()
            return (
                TaskCancelOutcome.NOT_FOUND
                if exists is None
                else TaskCancelOutcome.ALREADY_FINISHED
            )

        return await self._sql.run("cancel task", body)

    async def lane_counts(self, lanes: Sequence[str] | None = None) -> list[TaskLaneCounts]:
        """Per-lane pending/due/running/expired counts, the oldest due ``run_at``, and the
        partitions with due tasks (the most waiting ones read only for lanes with some)."""
        wanted = None if lanes is None else sorted({wire_value(lane, "lane") for lane in lanes})
        t = self._table

        async def body(conn: AsyncConnection) -> list[TaskLaneCounts]:
            now_expr, now_value = await self._sql.now(conn)
            if now_value is None:
                now_value = (await conn.execute(sa.select(now_expr))).scalar_one()
            pending = t.c.status == TaskStatus.PENDING.value
            running = t.c.status == TaskStatus.RUNNING.value
            due = sa.and_(pending, t.c.run_at <= now_expr)
            expired = sa.and_(running, t.c.lease_expires_at <= now_expr)

            def count(cond: Any) -> Any:
                return sa.func.coalesce(sa.func.sum(sa.case((cond, 1), else_=0)), 0)

            query = (
                sa.select(
                    t.c.lane,
                    count(pending),
                    count(due),
                    count(running),
                    count(expired),
                    sa.func.min(sa.case((due, t.c.run_at), else_=sa.null()), type_=UtcDateTime()),
                    sa.func.count(sa.distinct(sa.case((due, t.c.partition_key), else_=sa.null()))),
                )
                .where(t.c.status.in_((TaskStatus.PENDING.value, TaskStatus.RUNNING.value)))
                .group_by(t.c.lane)
            )
            if wanted is not None:
                query = query.where(t.c.lane.in_(wanted))
            figures: dict[str, TaskLaneCounts] = {}
            waiting: dict[str, int] = {}
            for row in await conn.execute(query):
                figures[row[0]] = TaskLaneCounts(
                    row[0], int(row[1]), int(row[2]), int(row[3]), int(row[4]), row[5], now_value
                )
                if row[6]:
                    waiting[row[0]] = int(row[6])
            if waiting:
                top = await top_partitions_waiting(conn, t, sorted(waiting), now_expr)
                for lane, count_of in waiting.items():
                    figures[lane] = replace(
                        figures[lane],
                        partitions_waiting=count_of,
                        top_partitions_waiting=tuple(top.get(lane, ())),
                    )
            for lane in wanted or ():
                figures.setdefault(lane, TaskLaneCounts(lane, 0, 0, 0, 0, None, now_value))
            return [figures[lane] for lane in sorted(figures)]

        return await self._sql.run("count tasks by lane", body)


def _valid_id(task_id: int) -> bool:
    return isinstance(task_id, int) and 1 <= task_id <= MAX_TASK_ID
