""":class:`BackgroundTaskDbStore`: the reference SQL task store (enqueue, claim, fenced writes)."""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ..runtime._internal import Clock, SystemClock
from ..tasks import TaskInvalidValueError, TaskLease, TaskRegistry
from ..tasks._internal import (
    LEASE_EXPIRED_ERROR,
    BackgroundTaskRecord,
    TaskCompletion,
    TaskFailureReason,
    TaskRateLimit,
    TaskStatus,
    check_claim_args,
    check_claim_rate_limit,
    check_retry_delay,
    check_ttl,
    rate_window,
)
from ..tasks.errors import TaskRegistryError
from ._backends import backend_sql_for
from ._driver_hold import HeldDriverConnection
from ._enqueue_coalescer import EnqueueCoalescer
from ._notify_limiter import DEFAULT_NOTIFY_WINDOW, NotifyLimiter
from ._sqlite import ClaimsNotAllHeld, DriverStatement, SqliteTaskStatements
from ._tables import (
    CORE_COLUMNS,
    background_tasks_table,
    partition_rates_table,
    record_from_row,
    task_deps_table,
    task_lanes_table,
)
from ._task_deps import TaskDependencySql
from ._task_lanes import (
    TaskLaneMixin,
    lane_open_predicate,
    rate_budget_left,
    record_rate_starts,
)
from ._task_partition_rates import PartitionBudget, partition_budget, record_partition_starts
from ._tasks_admin import TaskAdminMixin
from ._tasks_control import TaskControlMixin
from ._tasks_effects import DbTaskTransaction
from ._tasks_enqueue import DEFAULT_TASK_NOTIFY_CHANNEL, TaskEnqueueMixin
from ._tasks_partitioned import fair_due
from ._tasks_results import TaskResultMixin, execute_ending
from ._tasks_sql import _SATURATING_DELTA, DbNow, TaskSql
from ._tasks_workflow import TaskWorkflowMixin, claim_of, merged, without
from ._time import UtcDateTime
from .errors import DatabaseOperationError

__all__ = ["DEFAULT_TASK_NOTIFY_CHANNEL", "BackgroundTaskDbStore"]

logger = logging.getLogger("aster_forge.db")

_RESCUE_BATCH = 500
_PENDING = TaskStatus.PENDING.value
_RUNNING = TaskStatus.RUNNING.value
# What a rescue ends a task in when it does not run it again.
_LEASE_ENDINGS = (TaskStatus.FAILED, TaskStatus.CANCELLED)


class BackgroundTaskDbStore(
    TaskEnqueueMixin,
    TaskAdminMixin,
    TaskControlMixin,
    TaskLaneMixin,
    TaskWorkflowMixin,
    TaskResultMixin,
):
    """A :class:`~aster_forge.tasks.BackgroundTaskStore` on SQLite, PostgreSQL or MariaDB.

    Claims: PostgreSQL runs ``UPDATE ... WHERE id IN (SELECT ... ORDER BY priority DESC,
    run_at, id LIMIT n FOR UPDATE SKIP LOCKED) RETURNING ...``; MariaDB selects the ids
    ``FOR UPDATE SKIP LOCKED`` then updates them (READ COMMITTED); SQLite runs one
    rescue-and-claim ``UPDATE ... FROM ... RETURNING`` in a ``BEGIN IMMEDIATE``
    single-writer transaction (the PostgreSQL claim folds the rescue in too). Each
    claimed row gets a fresh processing token. Before claiming, expired leases of the
    lane are rescued (see :class:`~aster_forge.tasks.BackgroundTaskStore`). Every fenced
    write is one ``UPDATE ... WHERE id = ? AND processing_token = ? AND status = 'running'``.
    Claims skip a lane paused in the lane table (``<table>_lanes``); renewals return
    each row's ``cancel_requested`` in the same statement. With asyncpg, the claim, the
    batched success (alone or with a claim) and the batched renewal run on the asyncpg
    connection itself, as the enqueue does: they bypass SQLAlchemy's cursor events.

    Args:
        engine: The async engine (create the table with
            :func:`create_background_tasks_table` or your migrations).
        table: The table (default: ``background_tasks`` from
            :func:`background_tasks_table`); pass yours when you added columns.
        clock: The time source on SQLite (PostgreSQL/MariaDB use the server clock).
        notify: On PostgreSQL, ``NOTIFY`` the channel in the enqueue transaction.
        notify_channel: The channel name.
        notify_window: One-task enqueues of a lane NOTIFY at most once per window:
            the first carries the NOTIFY, later ones within the window insert
            quietly and are announced after their commits, by the first enqueue
            after the window or, when none follows within one more window, by a
            NOTIFY of the store's own (see :meth:`flush_notifications`). A listening
            worker then wakes once per window instead of once per task.
            ``timedelta(0)`` notifies on every enqueue.
            Batches and enqueues in the product's transaction always notify.
        registry: A validated :class:`~aster_forge.tasks.TaskRegistry`: every enqueued
            task is checked against it (kind registered, lane the kind's own; the
            spec's steps filled in when ``steps_json`` is absent) and a bad batch is
            refused whole, before any I/O. Without one, any kind and lane are stored
            as given (a kind no worker runs stays pending).
        coalesce_enqueues: Concurrent :meth:`enqueue` calls (outside a product's
            transaction) share statements: a call that finds none in flight is sent at
            once; calls arriving meanwhile go out together in one statement and one
            commit when it returns, each with its own result. A batch the database
            refuses whole is sent again one task per statement, so a refused row fails
            only its own caller; an unknown outcome is never sent again.
        connection_linger: With asyncpg, how long the pooled connection of the last
            call stays checked out for the next one while the pool has others to lend
            (an enqueue per web request then skips the checkout); ``timedelta(0)``
            returns it as soon as the event loop runs with no call using it; the
            engine's ``dispose()`` closes it (or :meth:`release_connection` returns it).
    """

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        table: sa.Table | None = None,
        clock: Clock | None = None,
        notify: bool = True,
        notify_channel: str = DEFAULT_TASK_NOTIFY_CHANNEL,
        notify_window: timedelta = DEFAULT_NOTIFY_WINDOW,
        registry: TaskRegistry[Any, Any, Any] | None = None,
        coalesce_enqueues: bool = True,
        connection_linger: timedelta = timedelta(0),
    ) -> None:
        if registry is not None and not registry.validated:
            raise TaskRegistryError("task registry is not validated; call validate() first")
        if notify_window < timedelta(0):
            raise TaskInvalidValueError(f"notify_window must not be negative: {notify_window}")
        if connection_linger < timedelta(0):
            raise TaskInvalidValueError(
                f"connection_linger must not be negative: {connection_linger}"
            )
        self._registry = registry
        self._table = table if table is not None else background_tasks_table(sa.MetaData())
        self._lanes = task_lanes_table(self._table)
        self._partition_rates = partition_rates_table(self._table)
        # The database's own statements: chosen once, here.
        backend_sql = self._backend_sql = backend_sql_for(engine)
        clock = clock if clock is not None else SystemClock()
        self._sql = TaskSql(engine, self._table, clock, backend_sql)
        self._deps = TaskDependencySql(self._sql, self._table, task_deps_table(self._table))
        self._awaited: dict[int, str] = {}
        self._notify = notify and backend_sql.notifies
        self._channel = notify_channel
        self._cols = [self._table.c[name] for name in CORE_COLUMNS]
        self._column_names = frozenset(self._table.c.keys())
        self._driver_hold = HeldDriverConnection(
            self._sql, linger=connection_linger.total_seconds()
        )
        hot = backend_sql.hot_paths(
            self._table,
            self._lanes,
            engine,
            self._sql,
            self._driver_hold,
            channel=self._channel if self._notify else None,
        )
        self._pg = hot.pg
        self._lite = hot.lite
        self._pg_enqueue = hot.pg_enqueue
        self._pg_run = hot.pg_run
        if connection_linger > timedelta(0):
            # A dispose closes only the pooled connections: the lingering one goes too.
            hold = self._driver_hold
            sa.event.listen(engine.sync_engine, "engine_disposed", lambda _: hold.release_idle())
        # Real time, not the store's clock: it paces wake-ups, not task due times.
        window = notify_window.total_seconds()
        self._notify_limiter = (
            NotifyLimiter(window, self._notify_lane, SystemClock())
            if self._pg_enqueue is not None and self._notify and window > 0
            else None
        )
        self._coalescer = (
            EnqueueCoalescer(self._enqueue_one, self._enqueue_checked)
            if coalesce_enqueues
            else None
        )
        self._succeed_many_cached: Any = None
        self._succeed_many_driver: DriverStatement | None = None
        self._lease_expiries: dict[str, dict[TaskStatus, int]] = {}

    @property
    def table(self) -> sa.Table:
        """The task table this store writes."""
        return self._table

    @property
    def notify_channel(self) -> str:
        """The PostgreSQL ``NOTIFY`` channel."""
        return self._channel

    def lease_expiry_counts(self) -> dict[str, dict[TaskStatus, int]]:
        """Tasks this store's claims ended because their lease had expired, per lane.

        A claim rescues its lane's expired leases first; a task with no attempt left
        ends ``FAILED``, one with a cancel pending ends ``CANCELLED`` (both with
        ``failure_reason`` set). The counts are of those endings, by status, since
        the store was created; a rescued task that runs again is counted by the worker
        that claims it (``rescued`` on its record), not here.
        """
        return {lane: dict(counts) for lane, counts in self._lease_expiries.items()}

    def _count_ended(self, lane: str, statuses: Sequence[TaskStatus]) -> None:
        for status in statuses:
            if status in _LEASE_ENDINGS:
                counts = self._lease_expiries.setdefault(lane, dict.fromkeys(_LEASE_ENDINGS, 0))
                counts[status] += 1

    # -- claim ------------------------------------------------------------------------

    async def claim_due_for_lane(
        self,
        lane: str,
        limit: int,
        owner: str,
        lease_ttl: timedelta,
        *,
        cluster_limit: int | None = None,
        partition_limit: int | None = None,
        rate_limit: TaskRateLimit | None = None,
        partition_rate_limit: TaskRateLimit | None = None,
    ) -> list[BackgroundTaskRecord]:
        """Rescue expired leases of ``lane``, then claim up to ``limit`` due tasks.

        With ``cluster_limit``, claims of the lane serialise on the lane's row in the
        lane table and claim no more than the room left under the limit. On PostgreSQL
        that is one statement, run again when its snapshot missed a claim that
        committed meanwhile (see ``_postgres``); on MariaDB the row is locked first in
        the claim's transaction; SQLite has one writer.

        With ``partition_limit`` the claim ranks the lane's due tasks per partition
        and takes them by rank: on PostgreSQL in the capped claim's one statement
        (``sql/postgresql.sql``'s ``fair_pick``); elsewhere on the portable path, the lane's
        row locked first (MariaDB runs the later statements of the transaction with
        fresh snapshots, under READ COMMITTED), then the rescue, the running counts and
        the fair pick (see ``_tasks_partitioned``).

        With ``rate_limit`` alone, PostgreSQL claims in one statement that locks the
        lane row and counts the window's starts in it (``PgTaskStatements.rated_claim``).
        With ``partition_rate_limit``, which counts each partition's starts in the
        partition rate table (see ``_task_partition_rates``) and leaves spent
        partitions out of the fair pick, PostgreSQL claims in one statement too, with
        or without the other limits (``PgTaskStatements.partition_rated_claim``).
        Otherwise a rate-limited claim takes the portable path, which reads and counts
        the window's starts in the locked lane row (see ``_claim_rated``); lanes
        without a rate limit never read those columns.
        """
        lane_value = check_claim_args(lane, owner, lease_ttl, limit, cluster_limit, partition_limit)
        rate = check_claim_rate_limit(rate_limit)
        partition_rate = check_claim_rate_limit(partition_rate_limit, "partition_rate_limit")
        if limit <= 0:
            return []
        # A rate limit alone, or a partition rate limit with any others, claims in one
        # statement on PostgreSQL (see PgTaskStatements.rated_claim and
        # partition_rated_claim); a rate limit with other limits, on the portable path.
        alone = cluster_limit is None and partition_limit is None
        pg = self._pg_run if lease_ttl < _SATURATING_DELTA else None
        if pg is not None and (partition_rate is not None or (rate is not None and alone)):
            claimed, ended = await pg.claim(
                lane_value,
                limit,
                owner,
                lease_ttl,
                cluster_limit,
                partition_limit,
                rate=rate,
                partition_rate=partition_rate,
            )
            self._count_ended(lane_value, ended)
            self._note_claims(claimed)
            return claimed
        if rate is not None or partition_rate is not None:
            return await self._claim_rated(
                lane_value,
                limit,
                owner,
                lease_ttl,
                cluster_limit,
                partition_limit,
                rate,
                partition_rate,
            )
        if self._pg_run is not None and lease_ttl < _SATURATING_DELTA:
            claimed, ended = await self._pg_run.claim(
                lane_value, limit, owner, lease_ttl, cluster_limit, partition_limit
            )
            self._count_ended(lane_value, ended)
            self._note_claims(claimed)
            return claimed
        if partition_limit is not None:
            return await self._claim_partitioned(
                lane_value, limit, owner, lease_ttl, cluster_limit, partition_limit
            )
        if self._lite is not None:
            return await self._claim_sqlite(
                self._lite, lane_value, limit, owner, lease_ttl, cluster_limit
            )

        async def body(
            conn: AsyncConnection,
        ) -> tuple[list[BackgroundTaskRecord], list[TaskStatus]]:
            if cluster_limit is not None:
                await self._lock_lane(conn, lane_value)
            now = await self._sql.now(conn)
            ended = await self._rescue(conn, lane_value, now)
            room = limit
            if cluster_limit is not None:
                room = min(limit, cluster_limit - await self._running_in(conn, lane_value))
                if room <= 0:
                    return [], ended
            return await self._claim(conn, lane_value, room, owner, lease_ttl, now), ended

        # PostgreSQL: the rescue and the claim are each one atomic statement and need
        # not share a transaction, so both run in autocommit (2 round trips, not 4);
        # under a cluster limit they share the lane row lock's transaction.
        records, ended = await self._sql.run(
            "claim tasks",
            body,
            single_statement=self._backend_sql.writes_autocommit and cluster_limit is None,
        )
        self._count_ended(lane_value, ended)
        self._note_claims(records)
        return sorted(records, key=lambda r: (-r.priority, r.run_at, r.id))

    async def _claim_partitioned(
        self,
        lane: str,
        limit: int,
        owner: str,
        lease_ttl: timedelta,
        cluster_limit: int | None,
        partition_limit: int,
    ) -> list[BackgroundTaskRecord]:
        async def body(
            conn: AsyncConnection,
        ) -> tuple[list[BackgroundTaskRecord], list[TaskStatus]]:
            if self._lite is None:
                await self._lock_lane(conn, lane)
            now = await self._sql.now(conn)
            ended = await self._rescue(conn, lane, now)
            room = limit
            if cluster_limit is not None:
                room = min(limit, cluster_limit - await self._running_in(conn, lane))
                if room <= 0:
                    return [], ended
            claimed = await self._claim(conn, lane, room, owner, lease_ttl, now, partition_limit)
            return claimed, ended

        records, ended = await self._sql.run("claim tasks", body)
        self._count_ended(lane, ended)
        self._note_claims(records)
        return records

    async def _claim_rated(
        self,
        lane: str,
        limit: int,
        owner: str,
        lease_ttl: timedelta,
        cluster_limit: int | None,
        partition_limit: int | None,
        rate: TaskRateLimit | None,
        partition_rate: TaskRateLimit | None,
    ) -> list[BackgroundTaskRecord]:
        """A rate-limited claim: under the lane row's lock, at most the window's budget
        of the lane (``rate``) and of each partition (``partition_rate``).

        The window comes from the same "now" the claim writes as ``started_at`` (on
        PostgreSQL the transaction's ``now()``, read once), so every start is counted
        in the window its ``started_at`` falls in.
        """

        async def body(
            conn: AsyncConnection,
        ) -> tuple[list[BackgroundTaskRecord], list[TaskStatus]]:
            now, at, counted = await self._lock_rated_lane(conn, lane)
            ended = await self._rescue(conn, lane, now)
            room = limit
            if rate is not None:
                window = rate_window(at, rate[1])
                room = min(limit, rate_budget_left(counted, window, rate[0]))
            if cluster_limit is not None and room > 0:
                room = min(room, cluster_limit - await self._running_in(conn, lane))
            if room <= 0:
                return [], ended
            budget = None
            if partition_rate is not None:
                part_window = rate_window(at, partition_rate[1])
                rates = self._partition_rates
                budget = partition_budget(rates, lane, part_window, partition_rate[0])
            claimed = await self._claim(
                conn, lane, room, owner, lease_ttl, now, partition_limit, budget
            )
            if claimed and rate is not None:
                await record_rate_starts(conn, self._lanes, lane, window, len(claimed))
            if claimed and partition_rate is not None:
                started = Counter(r.partition_key for r in claimed if r.partition_key is not None)
                await record_partition_starts(
                    conn, rates, self._backend_sql, lane, part_window, started
                )
            return claimed, ended

        records, ended = await self._sql.run("claim tasks", body)
        self._count_ended(lane, ended)
        self._note_claims(records)
        return sorted(records, key=lambda r: (-r.priority, r.run_at, r.id))

    async def _claim_sqlite(
        self,
        lite: SqliteTaskStatements,
        lane: str,
        limit: int,
        owner: str,
        lease_ttl: timedelta,
        cluster_limit: int | None,
    ) -> list[BackgroundTaskRecord]:
        async def body(conn: AsyncConnection) -> list[BackgroundTaskRecord]:
            now = await self._backend_sql.now_value(conn, self._sql.clock)
            return await lite.claim_records(conn, now, lane, limit, owner, lease_ttl, cluster_limit)

        records = await self._sql.run("claim tasks", body)
        return self._claimed_sqlite(lane, records)

    def _claimed_sqlite(
        self, lane: str, records: list[BackgroundTaskRecord]
    ) -> list[BackgroundTaskRecord]:
        # The statement also returns the rows it rescued without claiming them.
        self._count_ended(lane, [r.status for r in records if r.status is not TaskStatus.RUNNING])
        claimed = [r for r in records if r.status is TaskStatus.RUNNING]
        self._note_claims(claimed)
        return sorted(claimed, key=lambda r: (-r.priority, r.run_at, r.id))

    async def _lock_rated_lane(
        self, conn: AsyncConnection, lane: str
    ) -> tuple[DbNow, datetime, tuple[datetime | None, int | None]]:
        """Lock the lane's row (see :meth:`_lock_lane`); the claim's "now" (read after
        the lock off PostgreSQL), its value, and the window the row counted last with
        the starts in it. PostgreSQL returns them from the upsert (one round trip)."""
        lanes = self._lanes
        counted = (lanes.c.rate_window_start, lanes.c.rate_started)
        now = await self._sql.now(conn)
        if now.value is None:
            # now() in the statement (PostgreSQL): the upsert returns its value too.
            upsert = self._lane_upsert(lane, now).returning(*counted, now.expr)
            row = (await conn.execute(upsert)).one()
            return now, row[2], (row[0], row[1])
        await conn.execute(self._lane_upsert(lane, now))
        row = (await conn.execute(sa.select(*counted).where(lanes.c.lane == lane))).one()
        now = await self._sql.now(conn)
        if now.value is None:  # pragma: no cover - a backend's now is one or the other
            raise TypeError("a claim's now changed from a bound value to now()")
        return now, now.value, (row[0], row[1])

    async def _lock_lane(self, conn: AsyncConnection, lane: str) -> None:
        """Hold the lane's row in the lane table until the transaction ends (cluster-
        limited lanes): an upsert that changes nothing still rewrites and locks it (and
        creates it the first time). On PostgreSQL the new row version is also what a
        one-statement capped claim checks its snapshot against (see ``_postgres``)."""
        await conn.execute(self._lane_upsert(lane, await self._sql.now(conn)))

    def _lane_upsert(self, lane: str, now: DbNow) -> Any:
        lanes = self._lanes
        values = {"lane": lane, "paused": False, "paused_at": None, "updated_at": now.expr}
        return self._backend_sql.upsert(lanes, values, [("paused", lanes.c.paused)])

    async def _running_in(self, conn: AsyncConnection, lane: str) -> int:
        t = self._table
        query = sa.select(sa.func.count()).where(t.c.lane == lane, t.c.status == _RUNNING)
        return int((await conn.execute(query)).scalar_one())

    async def _rescue(self, conn: AsyncConnection, lane: str, now: DbNow) -> list[TaskStatus]:
        """Rescue the lane's expired leases; the status each rescued row ends in."""
        t = self._table
        now_expr = now.expr
        expired = (
            sa.select(t.c.id)
            .where(t.c.lane == lane, t.c.status == _RUNNING, t.c.lease_expires_at <= now_expr)
            .order_by(t.c.lease_expires_at)
            .limit(_RESCUE_BATCH)
            .with_for_update(skip_locked=True)
        )
        exhausted = t.c.attempt + 1 >= t.c.max_attempts
        terminal = sa.or_(t.c.cancel_requested, exhausted)
        outcome = sa.case(
            (t.c.cancel_requested, TaskStatus.CANCELLED.value),
            (exhausted, TaskStatus.FAILED.value),
            else_=_PENDING,
        )
        # Ordered: MariaDB evaluates SET left to right, so attempt changes last.
        values = [
            (t.c.status, outcome),
            (
                t.c.failure_reason,
                sa.case(
                    (t.c.cancel_requested, TaskFailureReason.CANCELLED.value),
                    else_=TaskFailureReason.LEASE_EXPIRED.value,
                ),
            ),
            (t.c.rescued, sa.not_(terminal)),
            (t.c.finished_at, sa.case((terminal, now_expr), else_=sa.null())),
            (t.c.last_error, LEASE_EXPIRED_ERROR),
            (t.c.last_traceback, sa.null()),
            (t.c.processing_token, sa.null()),
            (t.c.lease_expires_at, sa.null()),
            (t.c.updated_at, now_expr),
            (t.c.attempt, t.c.attempt + 1),
        ]
        return await self._backend_sql.rescue(conn, t, expired, values, outcome)

    async def _claim(
        self,
        conn: AsyncConnection,
        lane: str,
        limit: int,
        owner: str,
        lease_ttl: timedelta,
        now: DbNow,
        partition_limit: int | None = None,
        budget: PartitionBudget | None = None,
    ) -> list[BackgroundTaskRecord]:
        t = self._table
        now_expr = now.expr
        if partition_limit is not None or budget is not None:
            return await self._claim_fair(
                conn, lane, limit, owner, lease_ttl, now, partition_limit, budget
            )
        due = (
            sa.select(t.c.id)
            .where(t.c.lane == lane, t.c.status == _PENDING, t.c.run_at <= now_expr)
            .where(lane_open_predicate(self._lanes, lane))
            .order_by(t.c.priority.desc(), t.c.run_at, t.c.id)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        # One random prefix per claim plus the row id: fresh and unique per claimed row.
        token = sa.literal(uuid.uuid4().hex + "-", sa.String()) + sa.cast(t.c.id, sa.String())
        values = {
            "status": _RUNNING,
            "processing_token": token,
            "lease_expires_at": self._sql.plus(now, lease_ttl),
            "claimed_by": owner,
            "started_at": now_expr,
            "updated_at": now_expr,
        }
        rows = await self._backend_sql.claim_rows(conn, t, due, values, self._cols)
        return [record_from_row(row) for row in rows]

    async def _claim_fair(
        self,
        conn: AsyncConnection,
        lane: str,
        limit: int,
        owner: str,
        lease_ttl: timedelta,
        now: DbNow,
        partition_limit: int | None,
        budget: PartitionBudget | None = None,
    ) -> list[BackgroundTaskRecord]:
        """The partitioned claim (see ``_tasks_partitioned``), under the lane's row lock."""
        t = self._table
        now_expr = now.expr
        due = fair_due(t, self._lanes, lane, now_expr, partition_limit, limit, budget)
        prefix = uuid.uuid4().hex + "-"
        token = sa.literal(prefix, sa.String()) + sa.cast(t.c.id, sa.String())
        values = {
            "status": _RUNNING,
            "processing_token": token,
            "lease_expires_at": self._sql.plus(now, lease_ttl),
            "claimed_by": owner,
            "started_at": now_expr,
            "updated_at": now_expr,
        }
        # As the one-statement claim leaves it: the hint is for pending rows only.
        values.update(self._backend_sql.waiting(False))
        # The pick takes no row locks: a row cancelled since is left alone.
        still = t.c.status == _PENDING
        rows = await self._backend_sql.claim_rows(
            conn, t, due, values, self._cols, still=still, prefix=prefix
        )
        return [record_from_row(row) for row in rows]

    # -- fenced writes ------------------------------------------------------------------

    async def _fenced(
        self, operation: str, lease: TaskLease, values: dict[str, Any], *, ends: bool = True
    ) -> bool:
        t = self._table
        # A claim with dependents waiting settles them in the same transaction.
        settles = ends and bool(self._awaited) and self._take_awaited(*claim_of(lease))

        async def body(conn: AsyncConnection) -> bool:
            now = await self._sql.now(conn)
            resolved = {k: (v(now) if callable(v) else v) for k, v in values.items()}
            resolved.setdefault("updated_at", now.expr)
            if "run_at" in resolved:
                resolved.update(self._backend_sql.waiting(resolved["run_at"] > now.expr))
            update = sa.update(t).where(self._sql.fence(lease)).values(**resolved)
            if ends:
                written = await execute_ending(conn, self._sql, update) == 1
            else:
                written = (await conn.execute(update)).rowcount == 1
            if written and settles:
                await self._deps.settle(conn, now, [lease.task_id])
            return written

        return await self._sql.run(
            operation, body, single_statement=self._backend_sql.writes_autocommit and not settles
        )

    async def renew_task_lease(self, lease: TaskLease, lease_ttl: timedelta) -> TaskLease | None:
        """Extend the lease if the claim still owns the task (else ``None``)."""
        check_ttl(lease_ttl)
        t = self._table

        async def body(conn: AsyncConnection) -> TaskLease | None:
            now = await self._sql.now(conn)
            stmt = (
                sa.update(t)
                .where(self._sql.fence(lease))
                .values(lease_expires_at=self._sql.plus(now, lease_ttl), updated_at=now.expr)
            )
            return await self._renew_one(conn, stmt, lease)

        return await self._sql.run(
            "renew task lease", body, single_statement=self._backend_sql.writes_autocommit
        )

    async def _renew_one(
        self, conn: AsyncConnection, stmt: Any, lease: TaskLease
    ) -> TaskLease | None:
        # The new expiry and the operator's cancel flag come back with the renewal.
        t = self._table
        row = await self._backend_sql.update_one(
            conn, stmt, (t.c.lease_expires_at, t.c.cancel_requested), t.c.id == lease.task_id
        )
        return None if row is None else lease.renewed(row[0], cancel_requested=bool(row[1]))

    async def renew_task_leases_many(
        self, leases: Sequence[TaskLease], lease_ttl: timedelta
    ) -> list[TaskLease | None]:
        """Batched :meth:`renew_task_lease`: each lease fenced on its own, input order.

        One ``UPDATE ... FROM unnest(ids, tokens)`` on PostgreSQL; one transaction
        elsewhere. ``None`` where that lease's fence failed.
        """
        check_ttl(lease_ttl)
        if not leases:
            return []
        t = self._table
        if self._pg_run is not None and lease_ttl < _SATURATING_DELTA:
            renewed = await self._pg_run.renew_many(leases, lease_ttl)
            return [
                None
                if (got := renewed.get((lease.task_id, lease.processing_token))) is None
                else lease.renewed(got[0], cancel_requested=got[1])
                for lease in leases
            ]

        async def body(conn: AsyncConnection) -> list[TaskLease | None]:
            now = await self._sql.now(conn)
            expires = self._sql.plus(now, lease_ttl)
            out: list[TaskLease | None] = []
            for lease in leases:
                stmt = (
                    sa.update(t)
                    .where(self._sql.fence(lease))
                    .values(lease_expires_at=expires, updated_at=now.expr)
                )
                out.append(await self._renew_one(conn, stmt, lease))
            return out

        return await self._sql.run("renew task leases", body)

    def _success_values(self, result_json: str | None, steps_json: str | None) -> dict[str, Any]:
        t = self._table
        return {
            "status": TaskStatus.SUCCEEDED.value,
            "result_json": result_json,
            "steps_json": t.c.steps_json if steps_json is None else steps_json,
            "failure_reason": None,
            "processing_token": None,
            "lease_expires_at": None,
            "finished_at": lambda now: now.expr,
        }

    async def begin_task_transaction(self, lease: TaskLease) -> DbTaskTransaction:
        """A transaction on the store's database for the body of the task ``lease`` holds;
        its success commits with it (see :class:`~aster_forge.tasks.TaskTransaction`)."""
        return await DbTaskTransaction.begin(
            self._sql, success_values=self._success_values, update_steps=self.update_task_steps
        )

    async def mark_task_succeeded(
        self, lease: TaskLease, result_json: str | None, steps_json: str | None
    ) -> bool:
        """Fenced: mark succeeded, store the result and final steps."""
        return await self._fenced(
            "mark task succeeded", lease, self._success_values(result_json, steps_json)
        )

    def release_connection(self) -> None:
        """Return the connection this store holds to the pool now, unless a call uses it.

        For a store with a ``connection_linger`` (its engine's ``dispose()`` calls it
        too). Nothing happens while a worker keeps the connection (see
        :meth:`keep_connection`).
        """
        self._driver_hold.release_idle()

    def keep_connection(self) -> Callable[[], None]:
        """Keep the pooled connection of the driver-level statements until the callable.

        A worker calls it while it has tasks in flight: its claims, batched successes
        and renewals follow each other closely, with the loop running task bodies in
        between, and each would otherwise check a connection out of the pool and back
        in. Call the returned callable (once) to let go; the connection then goes back
        as soon as the loop runs with no statement in flight. Nothing is kept where no
        connection is held (SQLite, MariaDB, PostgreSQL drivers other than asyncpg).

        Returns:
            Lets go of this keep (a second call does nothing).
        """
        hold = self._driver_hold
        hold.keep()
        kept = [True]

        def let_go() -> None:
            if kept:
                kept.clear()
                hold.let_go()

        return let_go

    @property
    def success_writes_in_flight(self) -> int:
        """How many batched success writes a worker may have in flight at once.

        Two on PostgreSQL: with asyncpg the second waits on the worker's connection
        and goes out the moment the first returns, so the worker runs the tasks one
        statement brought while the database writes the other's. One elsewhere (SQLite
        has one writer; MariaDB keeps the plain order).
        """
        return self._backend_sql.success_writes_in_flight

    @property
    def claims_with_success(self) -> bool:
        """Whether :meth:`mark_tasks_succeeded_and_claim` commits both at once.

        One statement on PostgreSQL, one transaction on SQLite.

        A worker refills freed slots in its success writes only then; elsewhere the two
        calls would gain nothing over its own claim.
        """
        return self._backend_sql.claims_with_success

    async def mark_tasks_succeeded_and_claim(
        self,
        completions: Sequence[TaskCompletion],
        lane: str,
        limit: int,
        owner: str,
        lease_ttl: timedelta,
        *,
        cluster_limit: int | None = None,
        partition_limit: int | None = None,
        rate_limit: TaskRateLimit | None = None,
        partition_rate_limit: TaskRateLimit | None = None,
    ) -> tuple[list[bool], list[BackgroundTaskRecord]]:
        """:meth:`mark_tasks_succeeded_many`, then :meth:`claim_due_for_lane` for the freed slots.

        One statement on PostgreSQL (the successes and the claim, with its lease rescue,
        commit together; the rescue leaves the rows being written alone; see
        :attr:`claims_with_success`); one transaction on SQLite (the claim runs after
        the successes, so its rescue no longer sees them running); two calls elsewhere,
        where a failed claim after stored successes is logged and claims nothing. Each
        success stays fenced by its own token.

        Returns:
            The success results in input order, and the claimed records.
        """
        lane_value = check_claim_args(lane, owner, lease_ttl, limit, cluster_limit, partition_limit)
        rate = check_claim_rate_limit(rate_limit)
        partition_rate = check_claim_rate_limit(partition_rate_limit, "partition_rate_limit")
        awaited = self._awaited_indexes(completions) if self._awaited else None
        if awaited:
            apart = await self._succeed_awaited(completions, awaited)
            rest, claimed = await self.mark_tasks_succeeded_and_claim(
                without(completions, awaited),
                lane,
                limit,
                owner,
                lease_ttl,
                cluster_limit=cluster_limit,
                partition_limit=partition_limit,
                rate_limit=rate_limit,
                partition_rate_limit=partition_rate_limit,
            )
            return merged(len(completions), apart, rest), claimed
        # A lane with a rate limit but no partition rate limit: its success and claim
        # are two calls (its claim is one statement on PostgreSQL without other limits,
        # see claim_due_for_lane).
        rated = rate is not None or partition_rate is not None
        pg = None if rate is not None and partition_rate is None else self._pg_run
        plain = partition_limit is None and not rated
        if self._lite is not None and completions and limit > 0 and plain:
            together = await self._succeed_and_claim_sqlite(
                self._lite, completions, lane_value, limit, owner, lease_ttl, cluster_limit
            )
            if together is not None:
                return together
        if pg is None or not completions or limit <= 0 or lease_ttl >= _SATURATING_DELTA:
            results = await self.mark_tasks_succeeded_many(completions)
            try:
                claimed = await self.claim_due_for_lane(
                    lane,
                    limit,
                    owner,
                    lease_ttl,
                    cluster_limit=cluster_limit,
                    partition_limit=partition_limit,
                    rate_limit=rate_limit,
                    partition_rate_limit=partition_rate_limit,
                )
            except DatabaseOperationError as exc:
                # The successes are stored: report them; the worker's next drain claims.
                logger.warning("claim after batched successes failed (%s)", type(exc).__name__)
                claimed = []
            return results, claimed
        done, records, ended = await pg.succeed_and_claim(
            completions,
            lane_value,
            limit,
            owner,
            lease_ttl,
            cluster_limit,
            partition_limit,
            rate=rate,
            partition_rate=partition_rate,
        )
        self._count_ended(lane_value, ended)
        self._note_claims(records)
        return _applied(completions, done), records

    async def mark_tasks_succeeded_many(self, completions: Sequence[TaskCompletion]) -> list[bool]:
        """Fenced per entry, one statement on PostgreSQL; results in input order."""
        if not completions:
            return []
        awaited = self._awaited_indexes(completions) if self._awaited else None
        if awaited:
            apart = await self._succeed_awaited(completions, awaited)
            rest = await self.mark_tasks_succeeded_many(without(completions, awaited))
            return merged(len(completions), apart, rest)
        if self._pg_run is not None:
            return _applied(completions, await self._pg_run.succeed_many(completions))
        if self._lite is not None:
            written = await self._succeed_many_sqlite(completions)
            if written is not None:
                return written

        t = self._table
        ids = list({c.lease.task_id for c in completions})
        owned_query = sa.select(t.c.id, t.c.processing_token).where(
            t.c.id.in_(ids), t.c.status == _RUNNING
        )
        owned_query = self._backend_sql.locked_for_write(owned_query)

        async def body(conn: AsyncConnection) -> list[bool]:
            # Two statements for the whole batch: read which claims still hold (inside
            # the write transaction), then one executemany of the fenced UPDATE.
            now = await self._sql.now(conn)
            owned = {int(row[0]): row[1] for row in await conn.execute(owned_query)}
            done: list[bool] = []
            params: list[dict[str, Any]] = []
            for item in completions:
                lease = item.lease
                ok = owned.get(lease.task_id) == lease.processing_token
                if ok:
                    del owned[lease.task_id]  # a task id listed twice is written once
                    params.append(
                        {
                            "b_id": lease.task_id,
                            "b_token": lease.processing_token,
                            "b_result": item.result_json,
                            "b_steps": item.steps_json,
                            "b_now": now.value,
                        }
                    )
                done.append(ok)
            if params:
                await conn.execute(self._succeed_many_stmt(), params)
            return done

        return await self._sql.run("mark tasks succeeded", body)

    async def _succeed_many_sqlite(
        self, completions: Sequence[TaskCompletion]
    ) -> list[bool] | None:
        # The common case on SQLite: every claim still holds. One executemany of the
        # fenced UPDATE (no read first); when it wrote fewer rows than asked, it is
        # rolled back and ``None`` sends the batch down the read-then-write path.
        if len({c.lease.task_id for c in completions}) != len(completions):
            return None

        async def body(conn: AsyncConnection) -> list[bool]:
            now = await self._backend_sql.now_value(conn, self._sql.clock)
            return await self._all_succeed_on_sqlite(conn, now, completions)

        try:
            return await self._sql.run("mark tasks succeeded", body)
        except ClaimsNotAllHeld:
            return None

    async def _succeed_and_claim_sqlite(
        self,
        lite: SqliteTaskStatements,
        completions: Sequence[TaskCompletion],
        lane: str,
        limit: int,
        owner: str,
        lease_ttl: timedelta,
        cluster_limit: int | None,
    ) -> tuple[list[bool], list[BackgroundTaskRecord]] | None:
        # Both in one transaction when every claim still holds; else ``None`` (the
        # caller writes and claims separately, the refused entries read back).
        if len({c.lease.task_id for c in completions}) != len(completions):
            return None

        async def body(conn: AsyncConnection) -> tuple[list[bool], list[BackgroundTaskRecord]]:
            now = await self._backend_sql.now_value(conn, self._sql.clock)
            written = await self._all_succeed_on_sqlite(conn, now, completions)
            claimed = await lite.claim_records(
                conn, now, lane, limit, owner, lease_ttl, cluster_limit
            )
            return written, claimed

        try:
            written, records = await self._sql.run("mark tasks succeeded and claim", body)
        except ClaimsNotAllHeld:
            return None
        return written, self._claimed_sqlite(lane, records)

    async def _all_succeed_on_sqlite(
        self, conn: AsyncConnection, now: datetime, completions: Sequence[TaskCompletion]
    ) -> list[bool]:
        """The fenced success of every entry, or :class:`ClaimsNotAllHeld` (rolled back)."""
        lite = self._lite
        assert lite is not None
        succeed = self._succeed_many_driver
        if succeed is None:
            succeed = DriverStatement(self._succeed_many_stmt(), lite.dialect)
            self._succeed_many_driver = succeed
        return await lite.succeed_all(conn, now, completions, succeed)

    def _succeed_many_stmt(self) -> Any:
        stmt = self._succeed_many_cached
        if stmt is None:
            t = self._table
            now = sa.bindparam("b_now", type_=UtcDateTime())
            stmt = (
                sa.update(t)
                .where(
                    t.c.id == sa.bindparam("b_id", type_=t.c.id.type),
                    t.c.processing_token == sa.bindparam("b_token", type_=sa.String()),
                    t.c.status == _RUNNING,
                )
                .values(
                    status=TaskStatus.SUCCEEDED.value,
                    result_json=sa.bindparam("b_result", type_=sa.Text()),
                    steps_json=sa.func.coalesce(
                        sa.bindparam("b_steps", type_=sa.Text()), t.c.steps_json
                    ),
                    failure_reason=None,
                    processing_token=None,
                    lease_expires_at=None,
                    finished_at=now,
                    updated_at=now,
                )
            )
            self._succeed_many_cached = stmt
        return stmt

    async def mark_task_retry(
        self,
        lease: TaskLease,
        *,
        delay: timedelta,
        error: str,
        steps_json: str | None,
        count_attempt: bool,
        traceback: str | None = None,
    ) -> bool:
        """Fenced: back to pending after ``delay`` (cancelled when a cancel was requested)."""
        check_retry_delay(delay)
        t = self._table
        cancel = t.c.cancel_requested
        values: dict[str, Any] = {
            "status": sa.case((cancel, TaskStatus.CANCELLED.value), else_=_PENDING),
            "run_at": lambda now: sa.case((cancel, t.c.run_at), else_=self._sql.plus(now, delay)),
            "finished_at": lambda now: sa.case((cancel, now.expr), else_=sa.null()),
            "failure_reason": sa.case(
                (cancel, TaskFailureReason.CANCELLED.value),
                else_=TaskFailureReason.PRODUCT_ERROR.value,
            ),
            "last_error": error,
            "last_traceback": traceback,
            "steps_json": t.c.steps_json if steps_json is None else steps_json,
            "processing_token": None,
            "lease_expires_at": None,
            "rescued": False,
            "attempt": t.c.attempt + 1 if count_attempt else t.c.attempt,
        }
        return await self._fenced("mark task retry", lease, values)

    async def mark_task_failed(
        self,
        lease: TaskLease,
        *,
        error: str,
        steps_json: str | None,
        manual_retry: bool,
        traceback: str | None = None,
    ) -> bool:
        """Fenced: failed for good, ``attempt + 1``."""
        t = self._table
        values: dict[str, Any] = {
            "status": TaskStatus.FAILED.value,
            "last_error": error,
            "last_traceback": traceback,
            "failure_reason": TaskFailureReason.PRODUCT_ERROR.value,
            "manual_retry_allowed": bool(manual_retry),
            "steps_json": t.c.steps_json if steps_json is None else steps_json,
            "processing_token": None,
            "lease_expires_at": None,
            "finished_at": lambda now: now.expr,
            "attempt": t.c.attempt + 1,
        }
        return await self._fenced("mark task failed", lease, values)

    async def release_task_for_shutdown(self, lease: TaskLease) -> bool:
        """Fenced: back to pending, due now; attempt and stored error unchanged."""
        t = self._table
        cancel = t.c.cancel_requested
        values: dict[str, Any] = {
            "status": sa.case((cancel, TaskStatus.CANCELLED.value), else_=_PENDING),
            "failure_reason": sa.case(
                (cancel, TaskFailureReason.CANCELLED.value), else_=t.c.failure_reason
            ),
            "run_at": lambda now: sa.case((cancel, t.c.run_at), else_=now.expr),
            "finished_at": lambda now: sa.case((cancel, now.expr), else_=sa.null()),
            "processing_token": None,
            "lease_expires_at": None,
            "rescued": False,
        }
        return await self._fenced("release task for shutdown", lease, values)

    async def update_task_steps(self, lease: TaskLease, steps_json: str) -> bool:
        """Fenced: store step progress."""
        return await self._fenced(
            "update task steps", lease, {"steps_json": steps_json}, ends=False
        )

    def __repr__(self) -> str:
        backend = self._backend_sql.backend.value
        return f"<BackgroundTaskDbStore backend={backend} table={self._table.name}>"


def _applied(completions: Sequence[TaskCompletion], written: set[tuple[int, str]]) -> list[bool]:
    """Which completions the statement wrote (a task id listed twice is written once)."""
    seen: set[int] = set()
    out: list[bool] = []
    for c in completions:
        ok = (c.lease.task_id, c.lease.processing_token) in written and (
            c.lease.task_id not in seen
        )
        if ok:
            seen.add(c.lease.task_id)
        out.append(ok)
    return out
