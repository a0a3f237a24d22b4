"""Running the task store's hot PostgreSQL statements: on asyncpg itself, or via SQLAlchemy.

A busy worker sends the lane claim, the success-and-claim, the batched success and
the heartbeat's batched renewal for every batch. With the asyncpg driver each runs
as a :class:`~aster_forge.db._pg_driver.PgDriverStatement` on a pooled connection
held across a burst of calls (:class:`~aster_forge.db._driver_hold.HeldDriverConnection`,
as the enqueue does), in autocommit (each is one atomic statement), its ``Record``
rows decoded straight into :class:`~aster_forge.tasks.BackgroundTaskRecord`. Lost
conflicts are retried and errors translated exactly as on the SQLAlchemy path, which
other PostgreSQL drivers keep.
"""

from __future__ import annotations

import asyncio
import uuid
import weakref
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ..runtime._internal import Clock
from ..tasks import TaskLease
from ..tasks._internal import (
    MAX_TASK_CLAIM_LIMIT,
    BackgroundTaskRecord,
    TaskCompletion,
    TaskStatus,
)
from ._driver_hold import HeldDriverConnection
from ._pg_driver import PgDriverStatement, unless_all_null, utc_decoder
from ._pg_records import PgRecordBuilder
from ._postgres import PgTaskStatements, limit_key
from ._returning import ReturningSql
from ._tables import CORE_COLUMNS
from ._tasks_enqueue_pg import PgEnqueueStatement
from ._tasks_sql import DbNow, HotPaths, TaskSql, Transaction, begin_plain, plain_transaction
from ._time import DatabaseBackend, UtcDateTime

__all__ = ["PgTaskRunner", "PostgresSql"]

_RUNNING = TaskStatus.RUNNING.value
_STATUS = CORE_COLUMNS.index("status")
# How many times a capped claim runs whose snapshot missed another claim (each time
# after that claim committed, so the cluster moved on meanwhile).
_FRESH_ATTEMPTS = 8

# A statement as SQLAlchemy runs it, and compiled for the driver.
_Statement = tuple[Any, PgDriverStatement]


class PgTaskRunner:
    """The claim, success-and-claim, batched success and batched renewal on PostgreSQL.

    Args:
        statements: The store's prebuilt statements.
        engine: The store's engine (asyncpg: the statements run on the driver).
        sql: The store's :class:`TaskSql` (retry policy, SQLAlchemy transactions).
        hold: The store's held driver connection (shared with its enqueue).
        driver: Run on the asyncpg connection; ``None``: when the engine uses asyncpg.

    Attributes:
        driver: Whether the statements run on the asyncpg connection (else SQLAlchemy).
    """

    def __init__(
        self,
        statements: PgTaskStatements,
        engine: AsyncEngine,
        sql: TaskSql,
        hold: HeldDriverConnection,
        *,
        driver: bool | None = None,
    ) -> None:
        dialect = engine.dialect
        self._sql = sql
        self._hold = hold
        self.driver = dialect.driver == "asyncpg" if driver is None else driver
        self._dialect = dialect
        self._hide = engine.sync_engine.hide_parameters
        self._statements = statements
        # One compiled statement per limit the store was asked for (see LITERAL_LIMITS),
        # per whether it claims under a cluster-wide limit, and whether by partitions.
        self._claims: dict[tuple[int | None, bool, bool], _Statement] = {}
        self._succeed_and_claims: dict[tuple[int | None, bool, bool], _Statement] = {}
        self._succeed_many = self._both(statements.succeed_many)
        self._renew_many = self._both(statements.renew_many)
        self._utc = utc_decoder(dialect)
        self._builder = PgRecordBuilder(sql.table)
        # Capped claims of one lane from this store take turns in the process: in the
        # database they would wait on the lane's row anyway, holding a connection, and
        # the one behind would then often find its snapshot stale and run again.
        self._turns: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, dict[str, asyncio.Lock]
        ] = weakref.WeakKeyDictionary()

    def _both(self, statement: Any) -> _Statement:
        driver = PgDriverStatement(statement, self._dialect, hide_parameters=self._hide)
        return statement, driver

    def _for_limit(
        self,
        cache: dict[tuple[int | None, bool, bool], _Statement],
        build: Callable[..., Any],
        limit: int,
        capped: bool,
        fair: bool = False,
    ) -> _Statement:
        key = limit_key(limit), capped, fair  # larger limits share one statement
        statement = cache.get(key)
        if statement is None:
            statement = cache[key] = self._both(build(limit, capped=capped, fair=fair))
        return statement

    async def claim(
        self,
        lane: str,
        limit: int,
        owner: str,
        lease_ttl: timedelta,
        cluster_limit: int | None = None,
        partition_limit: int | None = None,
    ) -> tuple[list[BackgroundTaskRecord], list[TaskStatus]]:
        """The lane's rescue-and-claim (under ``cluster_limit`` or ``partition_limit``:
        locked, see :meth:`PgTaskStatements.claim`).

        Returns:
            The claimed records in claim order, and the status of each row the
            rescue left unclaimed (pending again, failed or cancelled).
        """
        if cluster_limit is not None or partition_limit is not None:
            async with self._turn(lane):
                return await self._claim_fresh(
                    lane, limit, owner, lease_ttl, cluster_limit, partition_limit
                )
        statement = self._for_limit(self._claims, self._statements.claim, limit, False)
        params = claim_params(lane, limit, owner, lease_ttl)
        rows = await self._rows("claim tasks", statement, params)
        return self._claimed(rows), _unclaimed(rows)

    async def _claim_fresh(
        self,
        lane: str,
        limit: int,
        owner: str,
        lease_ttl: timedelta,
        cap: int | None,
        plim: int | None,
        rows: Sequence[Any] | None = None,
        offset: int = 1,
    ) -> tuple[list[BackgroundTaskRecord], list[TaskStatus]]:
        """The capped claim, run again while its snapshot was not fresh (see ``_GATE``).

        ``rows``: those of a capped statement already run (``fresh`` at ``offset - 1``).
        """
        claimed: list[BackgroundTaskRecord] = []
        ended: list[TaskStatus] = []
        fair = plim is not None
        statement = self._for_limit(self._claims, self._statements.claim, limit, True, fair)
        for _ in range(_FRESH_ATTEMPTS):
            if rows is None:
                params = {
                    **claim_params(lane, limit, owner, lease_ttl),
                    **gate_params(cap, plim),
                }
                rows, offset = await self._rows("claim tasks", statement, params), 1
            claimed += self._claimed(rows, offset)
            ended += _unclaimed(rows, offset)
            if rows[0][offset - 1]:
                break
            rows = None
        claimed.sort(key=lambda r: (-r.priority, r.run_at, r.id))
        return claimed, ended

    async def succeed_and_claim(
        self,
        completions: Sequence[TaskCompletion],
        lane: str,
        limit: int,
        owner: str,
        lease_ttl: timedelta,
        cluster_limit: int | None = None,
        partition_limit: int | None = None,
    ) -> tuple[set[tuple[int, str]], list[BackgroundTaskRecord], list[TaskStatus]]:
        """The fenced successes and the claim in one statement (``cluster_limit``,
        ``partition_limit``: as for :meth:`claim`).

        Returns:
            The ``(id, token)`` pairs written, the claimed records in claim order, and
            the status of each row the rescue left unclaimed.
        """
        params = {**success_params(completions), **claim_params(lane, limit, owner, lease_ttl)}
        operation = "mark tasks succeeded and claim"
        if cluster_limit is None and partition_limit is None:
            statement = self._for_limit(
                self._succeed_and_claims, self._statements.succeed_and_claim, limit, False
            )
            rows = await self._rows(operation, statement, params, queue=True)
            return _written(rows), self._claimed(rows, offset=2), _unclaimed(rows, offset=2)
        params.update(gate_params(cluster_limit, partition_limit))
        statement = self._for_limit(
            self._succeed_and_claims,
            self._statements.succeed_and_claim,
            limit,
            True,
            partition_limit is not None,
        )
        async with self._turn(lane):
            rows = await self._rows(operation, statement, params, queue=True)
            # The successes are written; a claim run again claims only.
            claimed, ended = await self._claim_fresh(
                lane, limit, owner, lease_ttl, cluster_limit, partition_limit, rows, offset=3
            )
        return _written(rows), claimed, ended

    def _turn(self, lane: str) -> asyncio.Lock:
        """The lock capped claims of ``lane`` take turns on (per event loop)."""
        turns = self._turns.setdefault(asyncio.get_running_loop(), {})
        turn = turns.get(lane)
        if turn is None:
            turn = turns[lane] = asyncio.Lock()
        return turn

    async def succeed_many(self, completions: Sequence[TaskCompletion]) -> set[tuple[int, str]]:
        """The fenced successes in one statement; the ``(id, token)`` pairs written."""
        rows = await self._rows(
            "mark tasks succeeded", self._succeed_many, success_params(completions), queue=True
        )
        return {(int(row[0]), str(row[1])) for row in rows}

    async def renew_many(
        self, leases: Sequence[TaskLease], lease_ttl: timedelta
    ) -> dict[tuple[int, str], tuple[datetime, bool]]:
        """The fenced renewals in one statement: new expiry and cancel flag per claim."""
        params = {
            "ids": [lease.task_id for lease in leases],
            "tokens": [lease.processing_token for lease in leases],
            "ttl": lease_ttl,
        }
        rows = await self._rows("renew task leases", self._renew_many, params)
        utc = self._utc if self.driver else _same
        return {(int(row[0]), str(row[1])): (utc(row[2]), bool(row[3])) for row in rows}

    def _claimed(self, rows: Sequence[Any], offset: int = 0) -> list[BackgroundTaskRecord]:
        # The claim also returns the rows it rescued without claiming them.
        status = offset + _STATUS
        running = (row for row in rows if row[status] == _RUNNING)
        records = self._builder.records(running, offset)
        records.sort(key=lambda r: (-r.priority, r.run_at, r.id))
        return records

    async def _rows(
        self,
        operation: str,
        statement: _Statement,
        params: dict[str, Any],
        *,
        queue: bool = False,
    ) -> Sequence[Any]:
        """Run ``statement`` (``queue``: see :meth:`HeldDriverConnection.acquire`)."""
        stmt, driver = statement
        if not self.driver:

            async def body(conn: AsyncConnection) -> Sequence[Any]:
                return (await conn.execute(stmt, params)).all()

            return await self._sql.run(operation, body, single_statement=True)

        async def once() -> list[Any]:
            arguments = driver.arguments(params)
            connection, held = await self._hold.acquire(operation, queue=queue)
            try:
                records = await driver.fetch(connection, arguments)
            except BaseException as exc:
                await self._hold.release_after(connection, held, exc)
                raise
            await self._hold.release(connection, held, broken=False)
            return records

        return await self._sql.retry(operation, once)


def _written(rows: Sequence[Any]) -> set[tuple[int, str]]:
    """The ``(id, token)`` pairs a success-and-claim wrote (they ride on its first row)."""
    return {
        (int(i), str(token)) for i, token in zip(rows[0][0] or (), rows[0][1] or (), strict=True)
    }


def _same(value: Any) -> Any:
    return value


def _unclaimed(rows: Sequence[Any], offset: int = 0) -> list[TaskStatus]:
    """The status of each row a claim returned without claiming it (rescued rows)."""
    status = offset + _STATUS
    # The success-and-claim's LEFT JOIN answers one all-null row when it claims nothing.
    return [TaskStatus(row[status]) for row in rows if row[status] not in (None, _RUNNING)]


def claim_params(lane: str, limit: int, owner: str, lease_ttl: timedelta) -> dict[str, Any]:
    """The PostgreSQL claim's parameters; one random token prefix per claim."""
    # The prefix plus the row id makes every claimed row's token fresh and unique.
    return {
        "lane": lane,
        "lim": limit,
        "prefix": uuid.uuid4().hex + "-",
        "ttl": lease_ttl,
        "owner": owner,
    }


def gate_params(cap: int | None, plim: int | None) -> dict[str, int]:
    """The gated claim's limits: a partitioned lane without a cluster limit caps at
    the largest claim (never binding)."""
    params = {"cap": MAX_TASK_CLAIM_LIMIT if cap is None else cap}
    if plim is not None:
        params["plim"] = plim
    return params


def success_params(completions: Sequence[TaskCompletion]) -> dict[str, list[Any]]:
    """The batched success's array parameters (input order)."""
    return {
        "ids": [c.lease.task_id for c in completions],
        "tokens": [c.lease.processing_token for c in completions],
        "results": unless_all_null([c.result_json for c in completions]),
        "steps": unless_all_null([c.steps_json for c in completions]),
    }


class PostgresSql(ReturningSql):
    """The :class:`~aster_forge.db._tasks_sql.BackendSql` of PostgreSQL.

    Times are computed inline with ``now()`` (no extra round trip); one-statement
    writes run in autocommit; rows written with a later ``run_at`` carry the
    ``waiting`` hint that keeps them out of the due index.
    """

    backend = DatabaseBackend.POSTGRESQL
    writes_autocommit = True
    one_writer = False
    notifies = True
    claims_with_success = True
    # With asyncpg the second waits on the worker's connection and goes out the moment
    # the first returns, so the worker runs the tasks one statement brought while the
    # database writes the other's.
    success_writes_in_flight = 2

    def __init__(self) -> None:
        super().__init__(postgresql.insert)

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
        """The prebuilt claim, success, renewal and enqueue statements."""
        statements = PgTaskStatements(table, lanes, engine.dialect)
        return HotPaths(
            pg=statements,
            pg_run=PgTaskRunner(statements, engine, sql, hold),
            pg_enqueue=PgEnqueueStatement(table, engine.dialect, channel=channel),
        )

    def transaction_engine(self, engine: AsyncEngine) -> AsyncEngine:
        """``engine`` itself."""
        return engine

    def transaction(
        self, engine: AsyncEngine, autocommit: AsyncEngine, *, single_statement: bool
    ) -> Transaction:
        """Autocommit for one statement, else a transaction."""
        return plain_transaction(engine, autocommit, single_statement=single_statement)

    async def begin_held(self, engine: AsyncEngine, stack: AsyncExitStack) -> AsyncConnection:
        """A connection in a transaction of its own."""
        return await begin_plain(engine, stack)

    async def now_value(self, conn: AsyncConnection, clock: Clock) -> datetime:
        """``now()``: the transaction's start on the server's clock."""
        value = (await conn.execute(sa.select(sa.func.now()))).scalar_one()
        if not isinstance(value, datetime):  # pragma: no cover - driver contract
            raise TypeError(f"database returned {value!r} for now()")
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value.astimezone(UTC)

    async def now(self, conn: AsyncConnection, clock: Clock) -> DbNow:
        """``now()`` in the statement itself (no value: the server computes it)."""
        return DbNow(sa.func.now(type_=UtcDateTime()), None)

    def waiting(self, value: Any) -> dict[str, Any]:
        """``waiting``: not yet due, kept out of the claims' index (see background_tasks_table)."""
        return {"waiting": value}

    def enqueue_run_at(
        self, now: DbNow, params: list[dict[str, Any]]
    ) -> tuple[Any, dict[str, Any]]:
        """``coalesce(p_run_at, now() + p_delay)`` and the ``waiting`` hint from the same."""
        run_at = sa.func.coalesce(
            sa.bindparam("p_run_at", type_=UtcDateTime()),
            now.expr + sa.bindparam("p_delay", type_=sa.Interval()),
        )
        # Its own parameters: a parameter named twice in VALUES breaks SQLAlchemy's
        # multi-row insert.
        waiting = (
            sa.func.coalesce(
                sa.bindparam("w_run_at", type_=UtcDateTime()),
                now.expr + sa.bindparam("w_delay", type_=sa.Interval()),
            )
            > now.expr
        )
        for row in params:
            row["w_run_at"], row["w_delay"] = row["p_run_at"], row["p_delay"]
        return run_at, {"waiting": waiting}

    def insert_returning(self, insert: Any, columns: Sequence[Any]) -> Any:
        """``INSERT ... RETURNING``, in parameter order."""
        return insert.returning(*columns, sort_by_parameter_order=True)

    def inserted_rows(self, rows: Sequence[Any]) -> Sequence[Any]:
        """``rows`` (already in parameter order)."""
        return rows

    def locked(self, query: Any, of: sa.Table) -> Any:
        """``query ... FOR UPDATE OF of``: the other tables it joins stay unlocked."""
        return query.with_for_update(of=of)

    def locking_read(self, query: Any) -> Any:
        """``query``: a read in the product's transaction needs no lock here."""
        return query

    def locked_for_write(self, query: Any) -> Any:
        """``query``: the fenced write that follows checks the row itself."""
        return query

    async def stage_waiting(self, sql: TaskSql, table: sa.Table, limit: int) -> int:
        """Clear the hint of up to ``limit`` due tasks, oldest ``run_at`` first."""
        t = table

        async def body(conn: AsyncConnection) -> int:
            came_due = sa.and_(
                t.c.status == TaskStatus.PENDING.value, t.c.waiting, t.c.run_at <= sa.func.now()
            )
            ids = (
                sa.select(t.c.id)
                .where(came_due)
                .order_by(t.c.run_at, t.c.id)
                .limit(limit)
                .with_for_update(skip_locked=True)
            )
            # ``= ANY(ARRAY(...))``: the locking subquery runs once. As ``IN (...)`` the
            # planner may run it again per row, each run locking (and clearing) others.
            chosen = sa.func.any(sa.func.array(ids.scalar_subquery()))
            stmt = sa.update(t).where(t.c.id == chosen, came_due).values(waiting=False)
            return int((await conn.execute(stmt)).rowcount)

        return await sql.run("stage waiting tasks", body, single_statement=True)

    def minute(self, column: Any) -> Any:
        """``to_char`` of the UTC timestamp."""
        return sa.func.to_char(sa.func.timezone("UTC", column), "YYYY-MM-DD HH24:MI")

    def code_point_order(self, column: Any) -> Any:
        """``column COLLATE "C"``: the default collation is locale-aware; "C" gives the
        same code-point order as SQLite's BINARY and MariaDB's utf8mb4_bin."""
        return column.collate("C")
