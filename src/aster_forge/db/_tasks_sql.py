"""Transactions, server-clock time expressions and fenced predicates for the task store,
and :class:`BackendSql`: what the store modules ask of the database they run on."""

from __future__ import annotations

import abc
import logging
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypeVar

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.pool import Pool, PoolProxiedConnection
from sqlalchemy.util import greenlet_spawn

from .._errors import AsterForgeError
from ..runtime import RuntimeLease
from ..runtime._internal import NEVER_EXPIRES, Clock, saturating_expiry
from ..tasks import TaskLease
from ..tasks._internal import TaskStatus
from ._time import DatabaseBackend, UtcDateTime
from ._translate import retry_conflicts, run_transaction, translate_db_error

if TYPE_CHECKING:
    from ._driver_hold import HeldDriverConnection
    from ._postgres import PgEnqueueStatement, PgTaskRunner, PgTaskStatements
    from ._sqlite import SqliteTaskStatements

__all__ = [
    "BackendSql",
    "BoundNow",
    "DbNow",
    "HotPaths",
    "TaskSql",
    "Transaction",
    "begin_plain",
    "plain_transaction",
]

logger = logging.getLogger("aster_forge.db")

T = TypeVar("T")

_CONFLICT_ATTEMPTS = 6
# A delay this long from any "now" before 2200 lands past NEVER_EXPIRES: saturate it
# in Python so the server never computes an out-of-range timestamp.
_SATURATING_DELTA = NEVER_EXPIRES - datetime(2200, 1, 1, tzinfo=UTC)


class DbNow(NamedTuple):
    """ "Now" as one statement sees it: the SQL expression and, off PostgreSQL, its value."""

    expr: Any
    """The SQL expression to write (``now()`` on PostgreSQL, a bound literal elsewhere)."""
    value: datetime | None
    """The Python value of ``expr`` (``None`` on PostgreSQL: the server computes it)."""


Transaction = Callable[[], AbstractAsyncContextManager[AsyncConnection]]


@dataclass(frozen=True, slots=True)
class HotPaths:
    """A backend's statements built once per store for its hot paths (``None``: the
    store's portable path serves)."""

    pg: PgTaskStatements | None = None
    """PostgreSQL's prebuilt claim, success and renewal statements."""
    pg_run: PgTaskRunner | None = None
    """PostgreSQL's claim, batched success (alone or with a claim) and batched renewal."""
    pg_enqueue: PgEnqueueStatement | None = None
    """PostgreSQL's one-statement enqueue."""
    lite: SqliteTaskStatements | None = None
    """SQLite's rescue-and-claim statements."""


class BackendSql(Protocol):
    """What the store modules ask of the database they run on.

    One class per backend implements it (``_sqlite``, ``_mysql``, ``_postgres``); a
    store picks it once, when it is built (``_backends.backend_sql_for``), and the
    shared modules call it instead of asking which database they run on. Only the
    statements that differ are here: everything SQLAlchemy Core writes the same on
    every backend stays in the shared modules.
    """

    @property
    def backend(self) -> DatabaseBackend:
        """The database."""
        ...

    @property
    def writes_autocommit(self) -> bool:
        """Whether a write of one statement runs in autocommit (PostgreSQL)."""
        ...

    @property
    def one_writer(self) -> bool:
        """Whether a held write transaction is the database's only writer (SQLite): a
        task's step updates then join it instead of waiting for it."""
        ...

    @property
    def notifies(self) -> bool:
        """Whether a write can ``NOTIFY`` listeners (PostgreSQL): an enqueue wakes
        workers, the ending of an awaited task its waiters."""
        ...

    @property
    def success_writes_in_flight(self) -> int:
        """How many batched success writes a worker may have in flight at once."""
        ...

    @property
    def claims_with_success(self) -> bool:
        """Whether a batched success and the claim after it commit at once."""
        ...

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
        """The task store's prebuilt statements (``channel``: where an enqueue NOTIFYs)."""
        ...

    def transaction_engine(self, engine: AsyncEngine) -> AsyncEngine:
        """The engine (with its execution options) the store's transactions run on."""
        ...

    def transaction(
        self, engine: AsyncEngine, autocommit: AsyncEngine, *, single_statement: bool
    ) -> Transaction:
        """How :meth:`TaskSql.run` opens a transaction on ``engine``."""
        ...

    async def begin_held(self, engine: AsyncEngine, stack: AsyncExitStack) -> AsyncConnection:
        """A connection in a write transaction of its own (see :meth:`TaskSql.begin_held`)."""
        ...

    async def now_value(self, conn: AsyncConnection, clock: Clock) -> datetime:
        """ "Now" as a value: the server's clock, or ``clock`` where there is none."""
        ...

    async def now(self, conn: AsyncConnection, clock: Clock) -> DbNow:
        """ "Now" for one statement (see :class:`DbNow`)."""
        ...

    def waiting(self, value: Any) -> dict[str, Any]:
        """The ``waiting`` hint to write beside a new ``run_at`` (PostgreSQL's due index)."""
        ...

    def enqueue_run_at(
        self, now: DbNow, params: list[dict[str, Any]]
    ) -> tuple[Any, dict[str, Any]]:
        """An insert's ``run_at`` expression and hint columns, from each row's ``p_run_at``
        and ``p_delay`` (``params`` adjusted to what the expression binds)."""
        ...

    def insert_returning(self, insert: Any, columns: Sequence[Any]) -> Any:
        """``insert`` returning ``columns`` (see :meth:`inserted_rows` for their order)."""
        ...

    def inserted_rows(self, rows: Sequence[Any]) -> Sequence[Any]:
        """The rows of :meth:`insert_returning` in the order of its parameters."""
        ...

    def locked(self, query: Any, of: sa.Table) -> Any:
        """``query`` locking the rows of ``of`` it reads until the transaction ends."""
        ...

    def locking_read(self, query: Any) -> Any:
        """``query`` reading the latest committed rows whatever the snapshot (MariaDB)."""
        ...

    def locked_for_write(self, query: Any) -> Any:
        """``query`` locking the rows it reads for a write that follows (MariaDB: no
        ``UPDATE ... RETURNING``, so a read comes first)."""
        ...

    def upsert(
        self, table: sa.Table, values: dict[str, Any], changes: Sequence[tuple[str, Any]]
    ) -> Any:
        """Insert ``values`` or apply ``changes`` (in order) to the row holding its key."""
        ...

    async def rescue(
        self,
        conn: AsyncConnection,
        table: sa.Table,
        expired: Any,
        values: Sequence[tuple[Any, Any]],
        outcome: Any,
    ) -> list[TaskStatus]:
        """Write ``values`` (in order) to the rows ``expired`` selects and locks; the
        status each ends in (``outcome`` computes it from the row before the write). On
        PostgreSQL the awaited rows it ends notify, in the same statement."""
        ...

    async def claim_rows(
        self,
        conn: AsyncConnection,
        table: sa.Table,
        due: Any,
        values: dict[str, Any],
        columns: Sequence[Any],
        *,
        still: Any = None,
        prefix: str | None = None,
    ) -> Sequence[Any]:
        """Write ``values`` to the rows ``due`` picks (those still matching ``still``);
        the ``columns`` of the rows written (``prefix``: the claim's token prefix)."""
        ...

    async def update_one(
        self, conn: AsyncConnection, update: Any, columns: Sequence[Any], row: Any
    ) -> Any:
        """Run ``update`` (of at most the one row ``row`` selects); its ``columns`` after
        the write, or ``None`` when it wrote nothing."""
        ...

    async def take_flags(
        self, conn: AsyncConnection, table: sa.Table, flagged: Any, clear: Any
    ) -> dict[int, TaskStatus]:
        """Run ``clear`` on the rows matching ``flagged``; their ids and statuses."""
        ...

    async def delete_picked(
        self, conn: AsyncConnection, table: sa.Table, picked: Any, still: Any
    ) -> int:
        """Delete the rows ``picked`` selects and locks (those still matching ``still``)."""
        ...

    async def stage_waiting(self, sql: TaskSql, table: sa.Table, limit: int) -> int:
        """Clear the ``waiting`` hint of up to ``limit`` due tasks; how many."""
        ...

    def minute(self, column: Any) -> Any:
        """``column`` truncated to its minute as ``YYYY-MM-DD HH:MM`` text (UTC)."""
        ...

    def code_point_order(self, column: Any) -> Any:
        """``column`` to order by in code-point order."""
        ...

    async def acquire_runtime_lease(
        self,
        conn: AsyncConnection,
        table: sa.Table,
        lease: RuntimeLease,
        now: datetime,
    ) -> RuntimeLease | None:
        """Take ``lease`` (its id, owner, new expiry) if free, expired or already its owner's."""
        ...

    def schedule_upsert(
        self,
        table: sa.Table,
        values: dict[str, Any],
        stored: dict[str, Any],
        pending: Any,
        changed: Any,
        now: datetime,
    ) -> Any:
        """Insert a scheduled task's row, or store a ``changed`` schedule in it (see
        :meth:`~aster_forge.db.ScheduledTaskDbStore.ensure_scheduled_task`)."""
        ...


def plain_transaction(
    engine: AsyncEngine, autocommit: AsyncEngine, *, single_statement: bool
) -> Transaction:
    """A transaction with a server of many writers: autocommit for one statement."""
    return autocommit.connect if single_statement else engine.begin


class BoundNow(abc.ABC):
    """What SQLite and MariaDB share of :class:`BackendSql`: "now" read once per
    transaction and written as a bound value, run times computed in Python, and no
    ``waiting`` hint."""

    @abc.abstractmethod
    async def now_value(self, conn: AsyncConnection, clock: Clock) -> datetime:
        """The transaction's "now" (aware UTC)."""

    async def now(self, conn: AsyncConnection, clock: Clock) -> DbNow:
        """:meth:`now_value` as a bound value."""
        value = await self.now_value(conn, clock)
        return DbNow(sa.literal(value, UtcDateTime()), value)

    def waiting(self, value: Any) -> dict[str, Any]:
        """Nothing: the hint stays false (one index serves the claims)."""
        return {}

    def enqueue_run_at(
        self, now: DbNow, params: list[dict[str, Any]]
    ) -> tuple[Any, dict[str, Any]]:
        """The bound ``p_run_at`` (computed in Python from the transaction's "now")."""
        for row in params:
            del row["p_delay"]
        return sa.bindparam("p_run_at", type_=UtcDateTime()), {}


async def begin_plain(engine: AsyncEngine, stack: AsyncExitStack) -> AsyncConnection:
    """A connection of ``engine`` in a transaction of its own, returned when ``stack`` closes."""
    conn = await stack.enter_async_context(engine.connect())
    await conn.begin()
    return conn


class TaskSql:
    """Per-store helpers: how to run a transaction and how to say "now" on a backend.

    What differs between databases is the store's :class:`BackendSql` (chosen once, when
    the store is built): PostgreSQL computes times inline with ``now()`` (no extra round
    trip); MariaDB reads ``UTC_TIMESTAMP(6)`` once per transaction; SQLite uses the
    injected clock, and its write transactions start with ``BEGIN IMMEDIATE`` after
    taking the engine's in-process writer lock (:func:`sqlite_write_lock`).
    """

    def __init__(
        self, engine: AsyncEngine, table: sa.Table, clock: Clock, backend_sql: BackendSql
    ) -> None:
        self.backend_sql = backend_sql
        self.backend = backend_sql.backend
        self.table = table
        self.clock = clock
        self._engine = backend_sql.transaction_engine(engine)
        self._autocommit = engine.execution_options(isolation_level="AUTOCOMMIT")

    async def begin_held(self, stack: AsyncExitStack) -> AsyncConnection:
        """A connection in a transaction of its own, returned to the pool when ``stack``
        closes (the caller commits or rolls back first). On SQLite the transaction holds
        the write lock from the start, as :meth:`run`'s do."""
        return await self.backend_sql.begin_held(self._engine, stack)

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
        transaction = self.backend_sql.transaction(
            self._engine, self._autocommit, single_statement=single_statement
        )
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

    async def now(self, conn: AsyncConnection) -> DbNow:
        """ "Now" for this statement (``value`` is ``None`` on PostgreSQL, which says ``now()``)."""
        return await self.backend_sql.now(conn, self.clock)

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
