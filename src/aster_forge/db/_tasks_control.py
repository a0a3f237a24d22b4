"""Fenced cancel and snooze writes, and the bounded retention delete, of the task store."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from ..tasks import TaskLease
from ..tasks._internal import (
    TaskFailureReason,
    TaskStatus,
    check_delete_finished_tasks_args,
    check_snooze_delay,
)
from ._task_deps import TaskDependencySql
from ._tasks_sql import TaskSql

__all__ = ["TaskControlMixin"]

_CANCELLED = TaskStatus.CANCELLED.value
_ANCIENT = timedelta(days=365 * 1000)

#: How many waiting tasks one :meth:`TaskControlMixin.stage_waiting_tasks` call clears.
DEFAULT_STAGE_LIMIT = 1000


class TaskControlMixin:
    """The operator-control half of :class:`~aster_forge.db.BackgroundTaskDbStore`."""

    _table: sa.Table
    _sql: TaskSql
    _deps: TaskDependencySql

    if TYPE_CHECKING:

        async def _fenced(self, operation: str, lease: TaskLease, values: dict[str, Any]) -> bool:
            """The store's one fenced ``UPDATE`` (defined on the store)."""

    async def mark_task_cancelled(self, lease: TaskLease, *, steps_json: str | None) -> bool:
        """Fenced: end the task ``cancelled``; attempt and stored error unchanged."""
        t = self._table
        values: dict[str, Any] = {
            "status": _CANCELLED,
            "failure_reason": TaskFailureReason.CANCELLED.value,
            "steps_json": t.c.steps_json if steps_json is None else steps_json,
            "processing_token": None,
            "lease_expires_at": None,
            "finished_at": lambda now: now.expr,
        }
        return await self._fenced("mark task cancelled", lease, values)

    async def mark_task_snoozed(
        self, lease: TaskLease, *, delay: timedelta, steps_json: str | None
    ) -> bool:
        """Fenced: pending again after ``delay``, ``snooze_count + 1``, attempt unchanged."""
        check_snooze_delay(delay)
        t = self._table
        cancel = t.c.cancel_requested
        values: dict[str, Any] = {
            "status": sa.case((cancel, _CANCELLED), else_=TaskStatus.PENDING.value),
            "run_at": lambda now: sa.case((cancel, t.c.run_at), else_=self._sql.plus(now, delay)),
            "finished_at": lambda now: sa.case((cancel, now.expr), else_=sa.null()),
            "failure_reason": sa.case(
                (cancel, TaskFailureReason.CANCELLED.value), else_=t.c.failure_reason
            ),
            "steps_json": t.c.steps_json if steps_json is None else steps_json,
            "processing_token": None,
            "lease_expires_at": None,
            "rescued": False,
            "snooze_count": t.c.snooze_count + 1,
        }
        return await self._fenced("mark task snoozed", lease, values)

    async def delete_finished_tasks(
        self, status: TaskStatus, older_than: timedelta, *, limit: int
    ) -> int:
        """Delete up to ``limit`` rows of ``status`` finished ``older_than`` ago, oldest first.

        PostgreSQL: one ``DELETE ... WHERE id IN (SELECT ... LIMIT n FOR UPDATE SKIP
        LOCKED)``; MariaDB selects the ids ``FOR UPDATE SKIP LOCKED`` then deletes them;
        SQLite runs the same statement in its single-writer transaction.
        """
        status_value = check_delete_finished_tasks_args(status, older_than, limit).value
        if older_than >= _ANCIENT:
            return 0  # nothing finished that long ago (and the server must not overflow)
        t = self._table

        async def body(conn: AsyncConnection) -> int:
            now_expr, now_value = await self._sql.now(conn)
            if now_value is None:
                cutoff: Any = now_expr - sa.literal(older_than, sa.Interval())
            else:
                try:
                    cutoff = sa.literal(now_value - older_than, t.c.finished_at.type)
                except OverflowError:
                    return 0
            old = (
                sa.select(t.c.id)
                .where(t.c.status == status_value, t.c.finished_at <= cutoff)
                .order_by(t.c.finished_at)
                .limit(limit)
                .with_for_update(skip_locked=True)
            )
            still = t.c.status == status_value
            return await self._sql.backend_sql.delete_picked(conn, t, old, still)

        return await self._sql.run(
            "delete finished tasks", body, single_statement=self._sql.backend_sql.writes_autocommit
        )

    async def stage_waiting_tasks(self, *, limit: int = DEFAULT_STAGE_LIMIT) -> int:
        """Settle workflow endings no lease wrote, then clear the ``waiting`` hint of up to
        ``limit`` tasks that came due; how many tasks were settled or moved.

        First, on every backend, :meth:`settle_dependencies`: the dependents of tasks
        that ended by a lease rescue or an operator's cancel are told (one indexed read
        when there are none). Then, on PostgreSQL only (elsewhere the hint stays false):
        tasks written with a later ``run_at`` sit in the waiting index, which lane
        claims also read, so this step is never needed for correctness. It moves due
        ones, oldest ``run_at`` first, into the due index, where every claim takes them
        (the success statement's refill reads only that index). A
        :class:`~aster_forge.tasks.TaskWorker` calls it about once a second.

        Raises:
            ValueError: When ``limit`` is below 1.
        """
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        # Workflow dependents whose dependency ended without a lease's write (a rescue,
        # an operator's cancel) come due here too.
        settled = await self._deps.sweep()
        return settled + await self._sql.backend_sql.stage_waiting(self._sql, self._table, limit)
