"""The SQLite backend: :class:`SqliteSql` and the task store's hot-path statements.

Its raw SQL is in ``sql/sqlite.sql``. On SQLite (through aiosqlite) every statement is
several hops to the driver's thread and SQLAlchemy's per-call construction and
cache-key work is most of the claim's CPU. So the claim folds the lane's lease rescue
into one prebuilt ``WITH ... UPDATE ... FROM ... RETURNING`` (SQLite 3.35+) with the
same semantics as the portable rescue-then-claim pair (and as the PostgreSQL claim):
expired leases are rescued (attempt counted; cancelled or exhausted ones end), a
rescued task may be claimed right away when it ranks among the first ``limit`` due
tasks, and a paused lane is rescued but nothing in it is claimed. The CTEs are
``MATERIALIZED`` so the candidate sets are fixed before the rows change. "Now" and the
expiry are bound values (SQLite has no shared clock; the store's clock says).

The hot statements run as :class:`DriverStatement`: compiled by SQLAlchemy once, with
SQLAlchemy's own bind and result processors, then sent on the aiosqlite connection
in one hop each (SQLAlchemy's adapter takes three or four: cursor, execute, fetch,
close). Driver errors are wrapped as SQLAlchemy's ``DBAPIError`` exactly as SQLAlchemy
does, so they are retried and translated like every other statement. These
statements do not pass through SQLAlchemy's cursor events.
"""

from __future__ import annotations

import asyncio
import uuid
import weakref
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ..runtime._internal import NEVER_EXPIRES, Clock, saturating_expiry
from ..tasks._internal import (
    LEASE_EXPIRED_ERROR,
    BackgroundTaskRecord,
    TaskCompletion,
    TaskFailureReason,
    TaskStatus,
)
from ._driver_hold import HeldDriverConnection
from ._queries import SQLITE
from ._returning import ReturningSql
from ._tables import CORE_COLUMNS, record_from_values
from ._tasks_sql import _SATURATING_DELTA, BoundNow, HotPaths, TaskSql, Transaction
from ._time import DatabaseBackend, UtcDateTime

__all__ = [
    "ClaimsNotAllHeld",
    "DriverStatement",
    "SqliteSql",
    "SqliteTaskStatements",
    "driver_connection",
    "sqlite_write_lock",
]

_RESCUE_BATCH = 500

_CLAIM = SQLITE["claim"]
_CLUSTER_LIMIT = SQLITE["cluster_limit"]

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


class ClaimsNotAllHeld(Exception):
    """Raised inside a batched success when a fence failed (rolls it back)."""


class SqliteSql(ReturningSql, BoundNow):
    """The :class:`~aster_forge.db._tasks_sql.BackendSql` of SQLite.

    One writer: write transactions start with ``BEGIN IMMEDIATE`` after the engine's
    in-process writer lock (:func:`sqlite_write_lock`), so the writer is chosen up front
    (no lock-upgrade failures between read and write). No shared clock: "now" is the
    store's clock, written as a bound value.
    """

    backend = DatabaseBackend.SQLITE
    writes_autocommit = False
    one_writer = True
    notifies = False
    success_writes_in_flight = 1
    claims_with_success = True

    def __init__(self) -> None:
        super().__init__(sqlite.insert)

    def hot_paths(
        self,
        table: sa.Table,
        lanes: sa.Table,
        engine: AsyncEngine,
        sql: TaskSql,
        hold: HeldDriverConnection,
        *,
        channel: str | None,
    ) -> HotPaths:
        """The prebuilt rescue-and-claim statements."""
        return HotPaths(lite=SqliteTaskStatements(table, lanes, engine.dialect))

    def transaction_engine(self, engine: AsyncEngine) -> AsyncEngine:
        """``engine`` itself."""
        return engine

    def transaction(
        self, engine: AsyncEngine, autocommit: AsyncEngine, *, single_statement: bool
    ) -> Transaction:
        """``BEGIN IMMEDIATE`` under the writer lock, whatever the statements."""
        return partial(_immediate, engine)

    async def begin_held(self, engine: AsyncEngine, stack: AsyncExitStack) -> AsyncConnection:
        """A write transaction holding the write lock from the start, as :meth:`transaction`'s."""
        await stack.enter_async_context(sqlite_write_lock(engine))
        conn = await stack.enter_async_context(engine.connect())
        driver = await driver_connection(conn)
        await _on_driver(conn, "BEGIN IMMEDIATE", driver.execute("BEGIN IMMEDIATE"))
        # SQLAlchemy's begin() sends nothing on SQLite: it only records the transaction,
        # so an ORM session on this connection joins it instead of committing it.
        await conn.begin()
        return conn

    async def now_value(self, conn: AsyncConnection, clock: Clock) -> datetime:
        """``clock.now()``: SQLite has no trustworthy shared clock."""
        value = clock.now()
        if not isinstance(value, datetime) or value.utcoffset() is None:
            raise ValueError(f"clock.now() must return an aware datetime, got {value!r}")
        return value.astimezone(UTC)

    def insert_returning(self, insert: Any, columns: Sequence[Any]) -> Any:
        """``RETURNING`` in the order SQLite writes: see :meth:`inserted_rows`."""
        # SQLAlchemy's ordered RETURNING would fall back to one statement per row here.
        return insert.returning(*columns, sort_by_parameter_order=False)

    def inserted_rows(self, rows: Sequence[Any]) -> Sequence[Any]:
        """By id: the single writer inserts in VALUES order, so ids ascend with the input."""
        return sorted(rows, key=lambda row: int(row._mapping["id"]))

    def locked(self, query: Any, of: sa.Table) -> Any:
        """``query`` (the writer lock is the transaction's already)."""
        return query.with_for_update()

    def locking_read(self, query: Any) -> Any:
        """``query``: a write transaction here always reads the latest rows."""
        return query

    def locked_for_write(self, query: Any) -> Any:
        """``query``: a write transaction here always reads the latest rows."""
        return query

    async def stage_waiting(self, sql: TaskSql, table: sa.Table, limit: int) -> int:
        """Nothing to stage: the hint stays false."""
        return 0

    def minute(self, column: Any) -> Any:
        """The stored text's first 16 characters (``YYYY-MM-DD HH:MM:SS.ffffff``)."""
        return sa.func.substr(column, 1, 16)

    def code_point_order(self, column: Any) -> Any:
        """``column``: the BINARY collation is code-point order."""
        return column


@asynccontextmanager
async def _immediate(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    # One in-process writer at a time, then SQLite's own write lock up front.
    async with sqlite_write_lock(engine), engine.connect() as conn:
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


async def _on_driver(conn: AsyncConnection, sql: str, call: Awaitable[Any]) -> None:
    """Await a call on ``conn``'s driver connection; its errors wrapped as SQLAlchemy does."""
    try:
        await call
    except conn.dialect.loaded_dbapi.Error as exc:
        raise sa.exc.DBAPIError.instance(
            sql, (), exc, conn.dialect.loaded_dbapi.Error, dialect=conn.dialect
        ) from exc


class DriverStatement:
    """A statement compiled once, run on the aiosqlite connection in one hop.

    Args:
        statement: The SQLAlchemy statement (named bind parameters).
        dialect: The engine's SQLite dialect.
        columns: The columns it returns, in order (their types process the values).
    """

    def __init__(self, statement: Any, dialect: Any, columns: Sequence[sa.Column[Any]] = ()):
        compiled = statement.compile(dialect=dialect)
        self.sql = compiled.string
        binds = compiled.binds
        self._defaults = {name: bind.value for name, bind in binds.items()}
        # Each named parameter is processed once, then placed at its positions.
        self._positions = list(compiled.positiontup or ())
        self._processors = {
            name: binds[name].type.dialect_impl(dialect).bind_processor(dialect)
            for name in dict.fromkeys(self._positions)
        }
        processors = [
            column.type.dialect_impl(dialect).result_processor(dialect, None) for column in columns
        ]
        # Only the columns that need it are processed: (index, processor, is a timestamp).
        self._processed = [
            (index, process, isinstance(columns[index].type, UtcDateTime))
            for index, process in enumerate(processors)
            if process is not None
        ]
        self._dialect = dialect

    def _params_processed(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """``values`` (named parameters of this statement) through their bind processors."""
        processed = {}
        for name, value in values.items():
            process = self._processors[name]
            processed[name] = value if process is None or value is None else process(value)
        return processed

    def _params(
        self, values: Mapping[str, Any], shared: Mapping[str, Any] | None = None
    ) -> tuple[Any, ...]:
        # ``shared``: processed already (the values every row of an executemany has).
        processed = dict(shared) if shared else {}
        for name, process in self._processors.items():
            if name not in processed:
                value = values[name] if name in values else self._defaults[name]
                processed[name] = value if process is None or value is None else process(value)
        return tuple([processed[name] for name in self._positions])

    def _error(self, exc: Exception, params: Any) -> sa.exc.StatementError:
        dbapi_error = self._dialect.loaded_dbapi.Error
        return sa.exc.DBAPIError.instance(self.sql, params, exc, dbapi_error, dialect=self._dialect)

    async def records(
        self, conn: AsyncConnection, values: Mapping[str, Any]
    ) -> list[BackgroundTaskRecord]:
        """Run once with ``values``; a record per row (the statement returns ``CORE_COLUMNS``).

        Each value goes through its column's result processor, as SQLAlchemy would; a
        timestamp repeated within the result (one claim's ``now`` is every row's
        ``started_at`` and ``updated_at``) is processed once.
        """
        params = self._params(values)
        driver = await driver_connection(conn)
        try:
            rows = await driver.execute_fetchall(self.sql, params)
        except self._dialect.loaded_dbapi.Error as exc:
            raise self._error(exc, params) from exc
        processed = self._processed
        seen: dict[Any, Any] = {}
        records = []
        for row in rows:
            out = list(row)
            for index, process, stamp in processed:
                value = out[index]
                if value is None:
                    continue
                if stamp:
                    done = seen.get(value)
                    if done is None:
                        done = seen[value] = process(value)
                    out[index] = done
                else:
                    out[index] = process(value)
            records.append(record_from_values(out))
        return records

    async def executemany(
        self,
        conn: AsyncConnection,
        rows: Sequence[Mapping[str, Any]],
        shared: Mapping[str, Any] | None = None,
    ) -> int:
        """Run once per entry of ``rows``; the number of rows changed in all.

        ``shared`` holds the values every entry has (processed once, not per entry).
        """
        same = self._params_processed(shared or {})
        params = [self._params(values, same) for values in rows]
        driver = await driver_connection(conn)
        try:
            cursor = await driver.executemany(self.sql, params)
        except self._dialect.loaded_dbapi.Error as exc:
            raise self._error(exc, params) from exc
        return int(cursor.rowcount)


class SqliteTaskStatements:
    """The prebuilt rescue-and-claim statement for one table on SQLite.

    Args:
        table: The task table.
        lanes: Its lane state table.
        dialect: The engine's SQLite dialect (for quoting).
    """

    def __init__(self, table: sa.Table, lanes: sa.Table, dialect: Any) -> None:
        self.dialect = dialect
        self.claim = self._claim(table, lanes, capped=False)
        #: The claim under a cluster-wide limit (the ``cap`` parameter).
        self.claim_capped = self._claim(table, lanes, capped=True)

    def _claim(self, table: sa.Table, lanes: sa.Table, *, capped: bool) -> DriverStatement:
        dialect = self.dialect
        quote = dialect.identifier_preparer.format_table
        cols = [table.c[name] for name in CORE_COLUMNS]
        running = TaskStatus.RUNNING.value
        cand_limit = _CLUSTER_LIMIT.format(t=quote(table), running=running) if capped else ":lim"
        sql = _CLAIM.format(
            cand_limit=cand_limit,
            t=quote(table),
            lanes=quote(lanes),
            rescue=_RESCUE_BATCH,
            running=running,
            pending=TaskStatus.PENDING.value,
            cancelled=TaskStatus.CANCELLED.value,
            failed=TaskStatus.FAILED.value,
            reason_cancelled=TaskFailureReason.CANCELLED.value,
            reason_expired=TaskFailureReason.LEASE_EXPIRED.value,
            # RETURNING names only the updated table's columns (SQLite refuses the alias).
            returning=", ".join(dialect.identifier_preparer.quote(n) for n in CORE_COLUMNS),
        )
        claim = (
            sa.text(sql)
            .bindparams(
                sa.bindparam("lane", type_=sa.Text()),
                sa.bindparam("now", type_=UtcDateTime()),
                sa.bindparam("lim", type_=sa.Integer()),
                sa.bindparam("lease_error", value=LEASE_EXPIRED_ERROR, type_=sa.Text()),
                sa.bindparam("prefix", type_=sa.Text()),
                sa.bindparam("expires", type_=UtcDateTime()),
                sa.bindparam("owner", type_=sa.Text()),
                *([sa.bindparam("cap", type_=sa.Integer())] if capped else []),
            )
            .columns(*cols)
        )
        return DriverStatement(claim, dialect, cols)

    async def claim_records(
        self,
        conn: AsyncConnection,
        now: datetime,
        lane: str,
        limit: int,
        owner: str,
        lease_ttl: timedelta,
        cluster_limit: int | None,
    ) -> list[BackgroundTaskRecord]:
        """The rescue-and-claim statement, inside the caller's transaction.

        Returns the claimed rows (``RUNNING``) and the rows it rescued without claiming.
        """
        params: dict[str, Any] = {
            "lane": lane,
            "now": now,
            "lim": limit,
            # One random prefix per claim plus the row id: fresh and unique per row.
            "prefix": uuid.uuid4().hex + "-",
            # Exactly what TaskSql.plus writes on the other paths.
            "expires": NEVER_EXPIRES
            if lease_ttl >= _SATURATING_DELTA
            else saturating_expiry(now, lease_ttl),
            "owner": owner,
        }
        if cluster_limit is None:
            return await self.claim.records(conn, params)
        return await self.claim_capped.records(conn, {**params, "cap": cluster_limit})

    async def succeed_all(
        self,
        conn: AsyncConnection,
        now: datetime,
        completions: Sequence[TaskCompletion],
        succeed: DriverStatement,
    ) -> list[bool]:
        """The fenced success (``succeed``) of every entry, or :class:`ClaimsNotAllHeld`."""
        params = [
            {
                "b_id": c.lease.task_id,
                "b_token": c.lease.processing_token,
                "b_result": c.result_json,
                "b_steps": c.steps_json,
            }
            for c in completions
        ]
        if await succeed.executemany(conn, params, {"b_now": now}) != len(params):
            raise ClaimsNotAllHeld
        return [True] * len(params)
