"""Awaited results on PostgreSQL: a waiter flags the row, and the write that ends a
flagged row sends a ``NOTIFY`` in the same statement.

Only flagged rows notify: a task nobody awaits ends with the statement it always had
(the flag rides on its ``RETURNING``; no notification is sent). The notification is a
hint carrying the task id: a waiter reads the row again when woken, and polls slowly in
case a notification was lost (a listener reconnecting). A lease rescue that ends a
flagged row notifies too, in the claim that rescues it (``rescue_told`` in
``sql/postgresql.sql``) or in the portable rescue's statement (:func:`notifying`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from ..tasks._internal import MAX_TASK_ID, BackgroundTaskRecord, TaskStatus
from ._tasks_sql import TaskSql

__all__ = [
    "RESULTS_CHANNEL",
    "TaskResultMixin",
    "execute_ending",
]

RESULTS_CHANNEL = "aster_forge_results"
"""The PostgreSQL channel an awaited task's ending notifies; the payload is the task id."""

_TERMINAL = tuple(status.value for status in TaskStatus if status.is_terminal)
_OPEN = (TaskStatus.PENDING.value, TaskStatus.RUNNING.value)


def notifying(update: sa.Update, table: sa.Table, *, statuses: bool = False) -> sa.Select[Any]:
    """``update`` as one PostgreSQL statement that also notifies each awaited row it
    ended; it selects how many rows ``update`` wrote (``statuses``: the status each
    row it wrote has now, one row per row).

    The notifying ``SELECT`` is a filter of the outer query: a CTE no query reads is
    never run (only data-modifying ones are).
    """
    t = table
    written = update.returning(t.c.id, t.c.status, t.c.result_awaited).cte("written")
    told = (
        sa.select(sa.func.pg_notify(RESULTS_CHANNEL, sa.cast(written.c.id, sa.Text())))
        .where(written.c.result_awaited, written.c.status.in_(_TERMINAL))
        .subquery("told")
    )
    sent = sa.select(sa.func.count()).select_from(told).scalar_subquery()
    if statuses:
        return sa.select(written.c.status).where(sent >= 0)
    return sa.select(sa.func.count()).select_from(written).where(sent >= 0)


async def execute_ending(conn: AsyncConnection, sql: TaskSql, update: sa.Update) -> int:
    """Run ``update`` (a write that may end tasks) in ``conn``; how many rows it wrote.

    On PostgreSQL the awaited rows it ends notify :data:`RESULTS_CHANNEL` in the same
    statement.
    """
    if not sql.backend_sql.notifies:
        return int((await conn.execute(update)).rowcount)
    return int((await conn.execute(notifying(update, sql.table))).scalar_one())


class TaskResultMixin:
    """The awaited-result half of :class:`~aster_forge.db.BackgroundTaskDbStore`."""

    _sql: TaskSql
    _table: sa.Table

    if TYPE_CHECKING:

        async def _get(self, conn: AsyncConnection, task_id: int) -> BackgroundTaskRecord | None:
            """The row (defined by the admin half)."""

    async def mark_result_awaited(self, task_id: int) -> BackgroundTaskRecord | None:
        """Flag the task's result as awaited and return its row, read after the flag.

        On PostgreSQL the write that ends a flagged task notifies
        :data:`RESULTS_CHANNEL` with its id; a task that ended before the flag is
        returned ended (nothing is lost between the two). Elsewhere nothing is written:
        the row is read.

        Returns:
            The row, or ``None`` when no task has that id.
        """
        if not isinstance(task_id, int) or not 1 <= task_id <= MAX_TASK_ID:
            return None  # no BIGINT row can have it; never hand it to the driver
        t = self._table
        flag = (
            sa.update(t)
            .where(t.c.id == task_id, t.c.status.in_(_OPEN), sa.not_(t.c.result_awaited))
            .values(result_awaited=True)
        )
        notifies = self._sql.backend_sql.notifies

        async def body(conn: AsyncConnection) -> BackgroundTaskRecord | None:
            if notifies:
                await conn.execute(flag)
            return await self._get(conn, task_id)

        # Two statements in autocommit: the read's snapshot is taken after the flag
        # committed, so an ending that missed the flag is already in it.
        return await self._sql.run("await task result", body, single_statement=True)
