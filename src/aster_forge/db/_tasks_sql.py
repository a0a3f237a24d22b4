"""Transactions, server-clock time expressions and fenced predicates for the task store."""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple, TypeVar

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.pool import Pool, PoolProxiedConnection
from sqlalchemy.util import greenlet_spawn

from .._errors import AsterForgeError
from ..runtime._internal import NEVER_EXPIRES, Clock, saturating_expiry
from ..tasks import TaskLease
from ..tasks._internal import TaskStatus
from ._time import DatabaseBackend, UtcDateTime, database_now
from ._translate import retry_conflicts, run_transaction, translate_db_error

__all__ = ["DbNow", "TaskSql", "driver_connection", "sqlite_write_lock"]

logger = logging.getLogger("aster_forge.db")

T = TypeVar("T")

_CONFLICT_ATTEMPTS = 6
# A delay this long from any "now" before 2200 lands past NEVER_EXPIRES: saturate it
# in Python so the server never computes an out-of-range timestamp.
_SATURATING_DELTA = NEVER_EXPIRES - datetime(2200, 1, 1, tzinfo=UTC)

# One in-process writer lock per SQLite engine (shared by every store on it): SQLite has
# a single writer anyway, and queueing on an asyncio.Lock is far cheaper than letting
# BEGIN IMMEDIATE collide and spin in the busy handler.
_SQLITE_WRITE_LOCKS: weakref.WeakKeyDictionary[Any, asyncio.Lock] = weakref.WeakKeyDictionary()


def sqlite_write_lock(engine: AsyncEngine) -> asyncio.Lock:
    """The in-process writer lock of a SQLite ``engine`` (created on first use)."""
    key = engine.sync_engine
    lock = _SQLITE_WRITE_LOCKS.get(key)
    if lock is None:
        lock = _SQLITE_WRITE_LOCKS[key] = asyncio.Lock()
    return lock


async def driver_connection(conn: AsyncConnection) -> Any:
    """The driver's own connection under ``conn`` (aiosqlite's, on SQLite)."""
    driver = (await conn.get_raw_connection()).driver_connection
    if driver is None:  # pragma: no cover - only after the connection was closed
        raise sa.exc.ResourceClosedError("the connection is closed")
    return driver


class DbNow(NamedTuple):
    """ "Now" as one statement sees it: the SQL expression and, off PostgreSQL, its value."""

    expr: Any
    """The SQL expression to write (``now()`` on PostgreSQL, a bound literal elsewhere)."""
    value: datetime | None
    """The Python value of ``expr`` (``None`` on PostgreSQL: the server computes it)."""


class TaskSql:
    """Per-store helpers: how to run a transaction and how to say "now" on a backend.

    PostgreSQL computes times inline with ``now()`` (no extra round trip); MariaDB reads
    ``UTC_TIMESTAMP(6)`` once per transaction; SQLite uses the injected clock. SQLite
    write transactions start with ``BEGIN IMMEDIATE`` so the single writer is chosen
    up front (no lock-upgrade failures between read and write), after taking the
    engine's in-process writer lock (:func:`sqlite_write_lock`).
    """

    def __init__(self, engine: AsyncEngine, table: sa.Table, clock: Clock) -> None:
        self.backend = DatabaseBackend.of(engine)
        self.table = table
        self.clock = clock
        self._engine = engine
        if self.backend is DatabaseBackend.MYSQL:
            # Locking reads without gap locks: SKIP LOCKED claims must not block inserts.
            self._engine = engine.execution_options(isolation_level="READ COMMITTED")
        self._autocommit = engine.execution_options(isolation_level="AUTOCOMMIT")

    @property
    def is_postgres(self) -> bool:
        """Whether the backend is PostgreSQL."""
        return self.backend is DatabaseBackend.POSTGRESQL

    @property
    def is_sqlite(self) -> bool:
        """Whether the backend is SQLite."""
        return self.backend is DatabaseBackend.SQLITE

    async def begin_held(self, stack: AsyncExitStack) -> AsyncConnection:
        """A connection in a transaction of its own, returned to the pool when ``stack``
        closes (the caller commits or rolls back first). On SQLite the transaction holds
        the write lock from the start, as :meth:`run`'s do."""
        if self.is_sqlite:
            await stack.enter_async_context(sqlite_write_lock(self._engine))
            conn = await stack.enter_async_context(self._engine.connect())
            driver = await driver_connection(conn)
            await _on_driver(conn, "BEGIN IMMEDIATE", driver.execute("BEGIN IMMEDIATE"))
            # SQLAlchemy's begin() sends nothing on SQLite: it only records the transaction,
            # so an ORM session on this connection joins it instead of committing it.
            await conn.begin()
            return conn
        conn = await stack.enter_async_context(self._engine.connect())
        await conn.begin()
        return conn

    async def run(
        self,
        operation: str,
        body: Callable[[AsyncConnection], Awaitable[T]],
        *,
        single_statement: bool = False,
    ) -> T:
        """Run ``body`` in one transaction; retry lost conflicts; translate driver errors.

        ``single_statement`` bodies run in autocommit on PostgreSQL/MariaDB (one round
        trip instead of three); one statement is atomic on its own.
        """
        transaction: Callable[[], AbstractAsyncContextManager[AsyncConnection]]
        if self.backend is DatabaseBackend.SQLITE:
            transaction = self._sqlite_immediate
        elif single_statement:
            transaction = self._autocommit.connect
        else:
            transaction = self._engine.begin
        return await run_transaction(
            self._engine, operation, body, transaction=transaction, attempts=_CONFLICT_ATTEMPTS
        )

    async def retry(self, operation: str, once: Callable[[], Awaitable[T]]) -> T:
        """Call ``once`` (one atomic driver-level statement) with :meth:`run`'s retries.

        Raises:
            DatabaseOperationError: (or a subclass) for any driver/SQLAlchemy failure.
        """
        return await retry_conflicts(operation, once, attempts=_CONFLICT_ATTEMPTS)

    @property
    def pool(self) -> Pool:
        """The engine's current pool (a new one after ``dispose()``)."""
        return self._engine.sync_engine.pool

    async def checkout(self, operation: str) -> PoolProxiedConnection:
        """A connection from the engine's pool, for driver-level work (see :meth:`checkin`).

        Raises:
            DatabaseOperationError: (or a subclass) when no connection can be had.
        """
        try:
            return await self._engine.raw_connection()
        except AsterForgeError:
            raise
        except (sa.exc.SQLAlchemyError, OSError, TimeoutError) as exc:
            raise translate_db_error(exc, operation) from exc

    @staticmethod
    async def checkin(connection: PoolProxiedConnection, *, invalidate: bool) -> None:
        """Return ``connection`` to the pool, or discard it when its state is unknown."""
        # In a greenlet: the pool's reset and any checkin listener may do I/O.
        await greenlet_spawn(connection.invalidate if invalidate else connection.close)

    @asynccontextmanager
    async def _sqlite_immediate(self) -> AsyncIterator[AsyncConnection]:
        # One in-process writer at a time, then SQLite's own write lock up front.
        async with sqlite_write_lock(self._engine), self._engine.connect() as conn:
            # BEGIN through the driver connection: one hop to aiosqlite's thread instead
            # of three (cursor, execute, close); SQLAlchemy's begin() issues no SQL here.
            driver = await driver_connection(conn)
            await _on_driver(conn, "BEGIN IMMEDIATE", driver.execute("BEGIN IMMEDIATE"))
            yield conn
            if conn.in_transaction():
                await conn.commit()  # the body ran SQLAlchemy statements: its transaction
            else:
                # Driver-level statements only: SQLAlchemy began nothing, so the commit
                # goes to the driver as well (one hop, no greenlet), and the connection
                # goes back with no transaction open (create_database_engine's reset
                # then sends nothing).
                await _on_driver(conn, "COMMIT", driver.commit())

    async def now(self, conn: AsyncConnection) -> DbNow:
        """ "Now" for this statement (``value`` is ``None`` on PostgreSQL, which says ``now()``)."""
        if self.is_postgres:
            return DbNow(sa.func.now(type_=UtcDateTime()), None)
        value = await database_now(conn, self.clock)
        return DbNow(sa.literal(value, UtcDateTime()), value)

    def plus(self, now: DbNow, delta: timedelta) -> Any:
        """``now + delta`` as SQL, saturated to ``NEVER_EXPIRES``."""
        if delta >= _SATURATING_DELTA:
            return sa.literal(NEVER_EXPIRES, UtcDateTime())
        if now.value is None:
            return now.expr + sa.literal(delta, sa.Interval())
        return sa.literal(saturating_expiry(now.value, delta), UtcDateTime())

    def fence(self, lease: TaskLease) -> Any:
        """The predicate every write after a claim carries: id, token and RUNNING."""
        t = self.table
        return sa.and_(
            t.c.id == lease.task_id,
            t.c.processing_token == lease.processing_token,
            t.c.status == TaskStatus.RUNNING.value,
        )


async def _on_driver(conn: AsyncConnection, sql: str, call: Awaitable[Any]) -> None:
    """Await a call on ``conn``'s driver connection; its errors wrapped as SQLAlchemy does."""
    try:
        await call
    except conn.dialect.loaded_dbapi.Error as exc:
        raise sa.exc.DBAPIError.instance(
            sql, (), exc, conn.dialect.loaded_dbapi.Error, dialect=conn.dialect
        ) from exc
