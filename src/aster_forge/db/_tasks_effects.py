"""A task body's transaction on the store's database, settled with the task's success.

PostgreSQL and MariaDB: a pooled connection in a transaction; the body's writes and the
fenced success commit together. Nothing locks the task row until the success, so the
worker's heartbeat (another connection) keeps renewing the lease meanwhile, and step
updates go through the store as usual. SQLite: the transaction takes the database's
write lock up front (``BEGIN IMMEDIATE``, after the store's in-process writer lock), so
the store's other writes in this process wait for its commit; step updates then join
the transaction, which already holds the lock.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from ..tasks import TaskLease
from ._tasks_results import execute_ending
from ._tasks_sql import DbNow, TaskSql
from ._translate import translate_db_error

__all__ = ["DbTaskTransaction"]

#: ``(now) -> column values`` of a success (the store's own, so both paths write the same).
SuccessValues = Callable[[str | None, str | None], dict[str, Any]]


class DbTaskTransaction:
    """One execution's transaction (see the module docstring); open it with :meth:`begin`."""

    def __init__(
        self,
        sql: TaskSql,
        conn: AsyncConnection,
        stack: AsyncExitStack,
        *,
        success_values: SuccessValues,
        update_steps: Callable[[TaskLease, str], Awaitable[bool]],
    ) -> None:
        self._sql = sql
        self._conn = conn
        self._stack = stack
        self._success_values = success_values
        self._update_steps = update_steps
        self._closed = False

    @classmethod
    async def begin(
        cls,
        sql: TaskSql,
        *,
        success_values: SuccessValues,
        update_steps: Callable[[TaskLease, str], Awaitable[bool]],
    ) -> DbTaskTransaction:
        """Check a connection out and begin (on SQLite, with the write lock taken).

        Raises:
            DatabaseOperationError: (or a subclass) when the transaction cannot begin.
        """
        stack = AsyncExitStack()
        try:
            conn = await sql.begin_held(stack)
        except BaseException as exc:
            await stack.aclose()
            if isinstance(exc, sa.exc.SQLAlchemyError):
                raise translate_db_error(exc, "begin a task's transaction") from exc
            raise
        transaction = cls(
            sql, conn, stack, success_values=success_values, update_steps=update_steps
        )
        if sql.backend_sql.one_writer:
            # Step updates must not wait for the write lock this transaction holds.
            transaction._update_steps = transaction._steps_in_transaction
        return transaction

    @property
    def connection(self) -> AsyncConnection:
        """The connection the body writes through."""
        return self._conn

    async def update_task_steps(self, lease: TaskLease, steps_json: str) -> bool:
        """Step progress, fenced (joins this transaction on SQLite)."""
        return await self._update_steps(lease, steps_json)

    async def _steps_in_transaction(self, lease: TaskLease, steps_json: str) -> bool:
        now = await self._sql.now(self._conn)
        return await self._fenced(lease, now, {"steps_json": steps_json})

    async def _fenced(self, lease: TaskLease, now: DbNow, values: dict[str, Any]) -> bool:
        resolved = {k: (v(now) if callable(v) else v) for k, v in values.items()}
        resolved.setdefault("updated_at", now.expr)
        statement = sa.update(self._sql.table).where(self._sql.fence(lease)).values(**resolved)
        return await execute_ending(self._conn, self._sql, statement) == 1

    async def succeed(
        self, lease: TaskLease, result_json: str | None, steps_json: str | None
    ) -> bool:
        """Write the success fenced by ``lease`` and commit (``False``: rolled back).

        Raises:
            DatabaseOperationError: (or a subclass) when the write or commit fails;
                nothing was committed.
        """
        try:
            now = await self._sql.now(self._conn)
            written = await self._fenced(lease, now, self._success_values(result_json, steps_json))
            if written:
                await self._conn.commit()
        except sa.exc.SQLAlchemyError as exc:
            await self.rollback()
            raise translate_db_error(exc, "commit a task's transaction") from exc
        except BaseException:
            await self.rollback()
            raise
        if not written:
            await self.rollback()
            return False
        await self._close()
        return True

    async def rollback(self) -> None:
        """Roll back and return the connection (idempotent; a failure is not raised: the
        pool discards a connection whose rollback failed)."""
        if self._closed:
            return
        try:
            await self._conn.rollback()
        except sa.exc.SQLAlchemyError:
            await self._conn.invalidate()
        finally:
            await self._close()

    async def _close(self) -> None:
        if not self._closed:
            self._closed = True
            await self._stack.aclose()
