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
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ..tasks import TaskLease
from ..tasks._internal import (
    MAX_TASK_CLAIM_LIMIT,
    BackgroundTaskRecord,
    TaskCompletion,
    TaskRateLimit,
    TaskStatus,
)
from ._driver_hold import HeldDriverConnection
from ._pg_driver import PgDriverStatement, unless_all_null, utc_decoder
from ._pg_records import PgRecordBuilder
from ._tasks_pg import PgTaskStatements, limit_key
from ._tasks_sql import TaskSql
from ._tasks_table import CORE_COLUMNS

__all__ = ["PgTaskRunner"]

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
        self._rated_claims: dict[int | None, _Statement] = {}
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
        rate: TaskRateLimit | None = None,
    ) -> tuple[list[BackgroundTaskRecord], list[TaskStatus]]:
        """The lane's rescue-and-claim (under ``cluster_limit`` or ``partition_limit``:
        locked, see :meth:`PgTaskStatements.claim`; under ``rate`` alone: counted, see
        :meth:`PgTaskStatements.rated_claim`).

        Returns:
            The claimed records in claim order, and the status of each row the
            rescue left unclaimed (pending again, failed or cancelled).
        """
        if rate is not None:
            async with self._turn(lane):
                return await self._claim_rated(lane, limit, owner, lease_ttl, rate)
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

    async def _claim_rated(
        self, lane: str, limit: int, owner: str, lease_ttl: timedelta, rate: TaskRateLimit
    ) -> tuple[list[BackgroundTaskRecord], list[TaskStatus]]:
        """The rate-limited claim, run again when it created the lane's row (``fresh``
        false: it claimed nothing)."""
        key = limit_key(limit)
        statement = self._rated_claims.get(key)
        if statement is None:
            built = self._statements.rated_claim(limit)
            statement = self._rated_claims[key] = self._both(built)
        count, period = rate
        params = {
            **claim_params(lane, limit, owner, lease_ttl),
            "rate_count": count,
            "rate_us": period // timedelta(microseconds=1),
        }
        claimed: list[BackgroundTaskRecord] = []
        ended: list[TaskStatus] = []
        for _ in range(_FRESH_ATTEMPTS):
            rows = await self._rows("claim tasks", statement, params)
            claimed += self._claimed(rows, 1)
            ended += _unclaimed(rows, 1)
            if rows[0][0]:
                break
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
