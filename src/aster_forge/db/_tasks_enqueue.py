"""Enqueue for :class:`~aster_forge.db.BackgroundTaskDbStore`: insert-or-get on the dedupe key.

Three ways in, one set of guarantees (the registry check, dedupe, NOTIFY on commit):

- PostgreSQL: one statement (:class:`PgEnqueueStatement`) in autocommit, or in the
  product's transaction when ``connection=`` is given.
- SQLite and MariaDB, store transaction: read the existing keys, insert the rest; a
  racing insert of one of our keys rolls the transaction back and the batch is retried.
- MariaDB (and PostgreSQL rows with ``extra`` columns), the product's transaction: the
  same, inside a savepoint, so a lost race
  rolls back only the savepoint; the retry reads the winner's row with a locking read
  (which sees the latest committed row at any isolation level).
- SQLite, the product's transaction: the same, without a savepoint (one writer at a
  time: a transaction that has written cannot lose a race on a key).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from operator import attrgetter
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from .._errors import AsterForgeError
from ..tasks import NewTask, TaskRegistry
from ..tasks._internal import BackgroundTaskRecord, EnqueueResult, TaskStatus
from ._driver_hold import HeldDriverConnection, hand_over
from ._enqueue_coalescer import EnqueueCoalescer
from ._notify_limiter import NotifyLimiter
from ._postgres import NOTIFY_SQL, PgEnqueueStatement
from ._tables import CORE_COLUMNS, record_from_row
from ._tasks_dedupe_window import (
    has_windows,
    release_ended_keys,
    replace_pending_holders,
    replaces,
    window_groups,
)
from ._tasks_sql import _SATURATING_DELTA, DbNow, TaskSql
from ._time import DatabaseBackend
from ._translate import translate_db_error, translate_driver_error
from .errors import DatabaseIntegrityError, DatabaseOperationError, UnsupportedDatabaseBackendError

__all__ = ["DEFAULT_TASK_NOTIFY_CHANNEL", "TaskEnqueueMixin"]

DEFAULT_TASK_NOTIFY_CHANNEL = "aster_forge_tasks"
"""The PostgreSQL ``NOTIFY`` channel enqueue signals on (payload: the lane)."""

_KEY_CHUNK = 500
_DEDUPE_RACE_ATTEMPTS = 8
_PENDING = TaskStatus.PENDING.value
_OPERATION = "enqueue tasks"
_ID = attrgetter("id")
_CORE = frozenset(CORE_COLUMNS)

# One statement's rows: the records it inserted, and those already holding a key.
_Rows = tuple[list[BackgroundTaskRecord], list[BackgroundTaskRecord]]


class TaskEnqueueMixin:
    """The enqueue half of :class:`~aster_forge.db.BackgroundTaskDbStore`."""

    _table: sa.Table
    _sql: TaskSql
    _cols: list[sa.Column[Any]]
    _column_names: frozenset[str]
    _notify: bool
    _channel: str
    _registry: TaskRegistry[Any, Any, Any] | None
    _pg_enqueue: PgEnqueueStatement | None
    _driver_hold: HeldDriverConnection
    _notify_limiter: NotifyLimiter | None
    _coalescer: EnqueueCoalescer | None
    _quiet_pool: object = None

    # -- enqueue ----------------------------------------------------------------------

    async def enqueue(
        self, task: NewTask, *, connection: AsyncConnection | AsyncSession | None = None
    ) -> EnqueueResult:
        """Insert ``task`` or return the row already holding its dedupe key.

        See :meth:`enqueue_many` (``connection=`` joins the product's transaction).
        Without ``connection``, concurrent calls share statements (see
        :class:`BackgroundTaskDbStore`'s ``coalesce_enqueues``).
        """
        if connection is not None:
            return (await self.enqueue_many([task], connection=connection))[0]
        registry = self._registry
        if isinstance(task, NewTask) and not task.extra:
            # A web request's enqueue: the registry check alone, before it can queue.
            if registry is not None:
                task = registry.check_new_task(task)
        else:
            (task,) = self._checked([task])
        coalescer = self._coalescer
        if coalescer is None:
            return await self._enqueue_one(task)
        return await coalescer.enqueue(task)

    async def _enqueue_one(self, task: NewTask) -> EnqueueResult:
        """One checked task in a statement of its own, on the store's connection."""
        pg = self._pg_enqueue
        if pg is not None and not task.extra and task.dedupe_key is None:
            return await self._insert_one(pg, task)
        return (await self._enqueue_checked([task]))[0]

    async def enqueue_many(
        self,
        tasks: Sequence[NewTask],
        *,
        connection: AsyncConnection | AsyncSession | None = None,
    ) -> list[EnqueueResult]:
        """Enqueue all atomically; dedupe hits return existing rows (input order).

        Args:
            tasks: The requests. With a ``registry`` every one is checked first (kind
                registered, lane its own; steps filled in); one bad task refuses the
                whole batch and nothing is written.
            connection: The product's own open ``AsyncConnection`` or ``AsyncSession``
                (on this store's database): the rows are written in its transaction
                and exist if and only if it commits; on PostgreSQL the ``NOTIFY`` is
                delivered only on commit. The product commits; errors are raised as the
                typed :mod:`aster_forge.db` errors and nothing is retried (a lost race
                on a dedupe key is resolved inside the call).

        Raises:
            TaskKindNotRegisteredError: A kind the registry does not know.
            TaskLaneMismatchError: A lane that is not the kind's own.
            UnsupportedDatabaseBackendError: ``connection`` is on another backend.
            DatabaseOperationError: (or a subclass) when the database fails.
        """
        tasks = self._checked(tasks)
        if not tasks:
            return []
        if connection is not None:
            return await self._enqueue_in(connection, tasks)
        return await self._enqueue_checked(tasks)

    async def _enqueue_checked(self, tasks: Sequence[NewTask]) -> list[EnqueueResult]:
        """Checked tasks atomically, in a transaction of the store's own."""
        pg = self._pg_enqueue
        if pg is not None and not any(task.extra for task in tasks):
            if not has_windows(tasks):
                return await self._enqueue_on_driver(pg, tasks)
            if not replaces(tasks):
                # Releasing an ended holder's key is right on its own: a statement ahead.
                return await self._enqueue_on_driver(pg, tasks, release=True)
            # A rewrite of a pending holder: one transaction of the store's.
            return await self._sql.run(_OPERATION, lambda c: self._enqueue_pg_in(c, pg, tasks))
        has_keys = any(task.dedupe_key is not None for task in tasks)
        attempt = 0
        while True:
            attempt += 1
            try:
                return await self._sql.run(_OPERATION, lambda c: self._enqueue(c, tasks))
            except DatabaseIntegrityError:
                # Another process inserted one of our keys after our read: re-read.
                if not has_keys or attempt >= _DEDUPE_RACE_ATTEMPTS:
                    raise

    def _checked(self, tasks: Sequence[NewTask]) -> list[NewTask]:
        """Type, ``extra`` and registry checks of the whole batch before any I/O."""
        checked: list[NewTask] = []
        columns = self._column_names
        registry = self._registry
        for task in tasks:
            if not isinstance(task, NewTask):
                raise TypeError(f"enqueue expects NewTask, got {type(task).__name__}")
            if task.extra and (set(task.extra) - columns or _CORE.intersection(task.extra)):
                raise ValueError(
                    f"NewTask.extra names unknown or core columns: {sorted(task.extra)}"
                )
            checked.append(task if registry is None else registry.check_new_task(task))
        return checked

    async def _enqueue_in(
        self, connection: AsyncConnection | AsyncSession, tasks: Sequence[NewTask]
    ) -> list[EnqueueResult]:
        conn = await connection.connection() if isinstance(connection, AsyncSession) else connection
        if DatabaseBackend.of(conn.dialect) is not self._sql.backend:
            raise UnsupportedDatabaseBackendError(
                f"connection is on {conn.dialect.name}, the store on {self._sql.backend.value}"
            )
        pg = self._pg_enqueue
        try:
            if pg is not None and not any(task.extra for task in tasks):
                return await self._enqueue_pg_in(conn, pg, tasks)
            if self._sql.backend_sql.one_writer:
                # One writer (SQLite): once this transaction writes, no other can
                # insert our key, and a stale read fails as "database is locked".
                return await self._enqueue(conn, tasks)
            for attempt in range(1, _DEDUPE_RACE_ATTEMPTS + 1):
                try:
                    async with conn.begin_nested():
                        return await self._enqueue(conn, tasks, locking_read=attempt > 1)
                except sa.exc.IntegrityError:
                    # A racing transaction committed one of our keys: only the savepoint
                    # is rolled back; the locking re-read finds the winner's row.
                    if attempt >= _DEDUPE_RACE_ATTEMPTS or not any(t.dedupe_key for t in tasks):
                        raise
            raise AssertionError("unreachable")  # pragma: no cover
        except AsterForgeError:
            raise
        except (sa.exc.SQLAlchemyError, OSError, TimeoutError, UnicodeError) as exc:
            raise translate_db_error(exc, _OPERATION) from exc

    async def _enqueue_pg_in(
        self, conn: AsyncConnection, pg: PgEnqueueStatement, tasks: Sequence[NewTask]
    ) -> list[EnqueueResult]:
        """The PostgreSQL statement through SQLAlchemy, in ``conn``'s transaction."""
        windowed = has_windows(tasks)
        now = await self._sql.now(conn)
        if windowed:
            await release_ended_keys(conn, self._sql, tasks, now)

        async def fetch(pending: Sequence[NewTask]) -> _Rows:
            rows = (await conn.execute(pg.statement, pg.parameters(pending))).all()
            return [record_from_row(row) for row in rows if row.created], [
                record_from_row(row) for row in rows if not row.created
            ]

        results = await self._enqueue_pg(
            tasks, fetch, lambda keys: self._rows_by_key(conn, keys, locking_read=False)
        )
        if not windowed:
            return results
        return await self._replace_holders(conn, tasks, results, now)

    async def _replace_holders(
        self,
        conn: AsyncConnection,
        tasks: Sequence[NewTask],
        results: list[EnqueueResult],
        now: DbNow,
    ) -> list[EnqueueResult]:
        channel = self._channel if self._notify else None
        return await replace_pending_holders(
            conn, self._sql, self._cols, tasks, results, now, notify_channel=channel
        )

    async def _enqueue_on_driver(
        self, pg: PgEnqueueStatement, tasks: Sequence[NewTask], *, release: bool = False
    ) -> list[EnqueueResult]:
        """The statement on a pooled asyncpg connection itself, in autocommit.

        The pool's own checkout (``pool_pre_ping``, events) without a SQLAlchemy
        ``Connection`` around it: no isolation level set and reset per call, and no
        transaction is begun, so one round trip commits. Back-to-back calls reuse one
        connection (:class:`HeldDriverConnection`).
        """
        connection, held = await self._driver_hold.acquire(_OPERATION)
        driver: Any = connection.driver_connection
        if all(task.dedupe_key is None for task in tasks):
            # No key: nothing to resolve, a plain insert.
            sql, args = pg.unkeyed(tasks)
            try:
                results = pg.unkeyed_results(tasks, await self._on_driver(driver, sql, args))
            except BaseException as exc:
                await self._driver_hold.release_after(connection, held, exc)
                raise
            await self._driver_hold.release(connection, held, broken=False)
            return results

        async def fetch(pending: Sequence[NewTask]) -> _Rows:
            if len(pending) == 1:
                sql, args = pg.single_sql, pg.single_arguments(pending[0])
            else:
                sql, args = pg.sql, pg.arguments(pending)
            return pg.split(await self._on_driver(driver, sql, args))

        async def read_keys(keys: Sequence[str]) -> list[BackgroundTaskRecord]:
            return pg.records(await self._on_driver(driver, pg.by_key_sql, [list(keys)]))

        try:
            if release:
                for (statuses, period), keys in window_groups(tasks).items():
                    await self._on_driver(driver, pg.release_sql, [keys, statuses, period])
            results = await self._enqueue_pg(tasks, fetch, read_keys)
        except BaseException as exc:
            await self._driver_hold.release_after(connection, held, exc)
            raise
        await self._driver_hold.release(connection, held, broken=False)
        return results

    async def _insert_one(self, pg: PgEnqueueStatement, task: NewTask) -> EnqueueResult:
        """:meth:`_enqueue_on_driver` for one task without a key, in as few steps."""
        hold = self._driver_hold
        connection = hold.take()
        held = True
        if connection is None:
            connection, held = await hold.acquire(_OPERATION)
        limiter = self._notify_limiter
        lane = str(task.lane)
        ticket = limiter.take(lane) if limiter is not None else 0
        sql, args = pg.insert_one(task, notify=ticket is not None)
        try:
            rows = await self._on_driver(connection.driver_connection, sql, args)
        except BaseException as exc:
            await self._driver_hold.release_after(connection, held, exc)
            raise
        if limiter is not None:
            if ticket is None:
                self._quiet_pool = self._sql.pool
                limiter.inserted_quietly(lane)
            else:
                limiter.carried(lane, ticket)
        if not held:
            await hold.release(connection, held, broken=False)
        elif hold.free():  # the held connection's release, without a coroutine
            await hand_over()
        return pg.inserted(task, rows)

    async def flush_notifications(self) -> None:
        """Wait until queued enqueues were written and the NOTIFY that follows them sent.

        One-task enqueues within ``notify_window`` of a lane's last NOTIFY insert
        without one; a later enqueue, or a NOTIFY of the store's own up to two windows
        later, announces them. A process that exits right after enqueueing awaits this
        so a waiting worker is woken rather than left to its next poll.
        """
        if self._coalescer is not None:
            await self._coalescer.join()
        if self._notify_limiter is not None:
            await self._notify_limiter.join()

    async def _notify_lane(self, lane: str) -> None:
        """``lane``'s NOTIFY in a statement of its own (after quiet enqueues)."""
        if self._sql.pool is not self._quiet_pool:
            return  # the engine was disposed since: its owner is shutting down
        hold = self._driver_hold
        connection, held = await hold.acquire("notify")
        try:
            await self._on_driver(connection.driver_connection, NOTIFY_SQL, [self._channel, lane])
        except BaseException as exc:
            await self._driver_hold.release_after(connection, held, exc)
            raise
        await hold.release(connection, held, broken=False)

    @staticmethod
    async def _on_driver(driver: Any, sql: str, args: Sequence[Any]) -> list[Any]:
        """Run ``sql`` on the asyncpg connection (its ``Record`` rows); errors typed."""
        try:
            records: list[Any] = await driver.fetch(sql, *args)
        except (asyncio.CancelledError, AsterForgeError):
            raise
        except Exception as exc:
            raise translate_driver_error(exc, _OPERATION) from exc
        return records

    async def _enqueue_pg(
        self,
        tasks: Sequence[NewTask],
        fetch: Callable[[Sequence[NewTask]], Awaitable[_Rows]],
        read_keys: Callable[[Sequence[str]], Awaitable[list[BackgroundTaskRecord]]],
    ) -> list[EnqueueResult]:
        keys = [task.dedupe_key_text for task in tasks]  # once: a property per call
        first: dict[str, int] = {}
        send: list[NewTask] = []
        pending: list[tuple[NewTask, str | None]] = []
        for index, (task, key) in enumerate(zip(tasks, keys, strict=True)):
            if key is None or first.setdefault(key, index) == index:
                send.append(task)
                pending.append((task, key))
        created: list[BackgroundTaskRecord] = []
        found: dict[str, BackgroundTaskRecord] = {}
        for _ in range(_DEDUPE_RACE_ATTEMPTS):
            inserted, existing = await fetch(send)
            fresh = sorted(inserted, key=_ID)
            created.extend(fresh)
            if not first:
                break  # no dedupe keys: every row was inserted
            for record in existing:
                found[record.dedupe_key or ""] = record
            inserted_keys = {r.dedupe_key for r in fresh if r.dedupe_key is not None}
            missing = [
                (t, k)
                for t, k in pending
                if k is not None and k not in inserted_keys and k not in found
            ]
            if missing:
                # Committed by a racing transaction after the statement's snapshot.
                for record in await read_keys([k for _, k in missing]):
                    found[record.dedupe_key or ""] = record
            pending = [(t, k) for t, k in missing if k not in found]
            if not pending:
                break
            send = [t for t, _ in pending]
        else:
            raise DatabaseOperationError(
                "enqueue tasks: a dedupe key kept vanishing between insert and read",
                operation=_OPERATION,
            )
        by_key = {r.dedupe_key: r for r in created if r.dedupe_key is not None}
        unkeyed = iter([r for r in created if r.dedupe_key is None])
        results: list[EnqueueResult] = []
        for index, (task, key) in enumerate(zip(tasks, keys, strict=True)):
            if key is None:
                record = next(unkeyed)
                made = True
            elif key in by_key and first[key] == index:
                record, made = by_key[key], True
            else:
                record, made = by_key.get(key) or found[key], False
            if made and record.payload_json != task.payload_json:
                raise RuntimeError("inserted rows came back out of input order")
            results.append(EnqueueResult(record, created=made))
        return results

    async def _rows_by_key(
        self, conn: AsyncConnection, keys: Sequence[str], *, locking_read: bool
    ) -> list[BackgroundTaskRecord]:
        t = self._table
        records: list[BackgroundTaskRecord] = []
        for start in range(0, len(keys), _KEY_CHUNK):
            query = sa.select(*self._cols).where(
                t.c.dedupe_key.in_(keys[start : start + _KEY_CHUNK])
            )
            if locking_read:
                query = self._sql.backend_sql.locking_read(query)
            records.extend(record_from_row(row) for row in await conn.execute(query))
        return records

    async def _enqueue(
        self, conn: AsyncConnection, tasks: Sequence[NewTask], *, locking_read: bool = False
    ) -> list[EnqueueResult]:
        keys: dict[str, int] = {}
        for index, task in enumerate(tasks):
            key = task.dedupe_key_text
            if key is not None:
                keys.setdefault(key, index)
        windowed = has_windows(tasks)
        now: DbNow | None = None
        if windowed:
            now = await self._sql.now(conn)
            await release_ended_keys(conn, self._sql, tasks, now)
        existing = {
            record.dedupe_key or "": record
            for record in await self._rows_by_key(conn, list(keys), locking_read=locking_read)
        }
        inserts = [
            index
            for index, task in enumerate(tasks)
            if task.dedupe_key_text is None
            or (task.dedupe_key_text not in existing and keys[task.dedupe_key_text] == index)
        ]
        created: dict[int, BackgroundTaskRecord] = {}
        if inserts:
            if now is None:
                now = await self._sql.now(conn)
            # One statement per set of `extra` columns: a task that gives no value for a
            # product column gets the column's default, not a NULL another task's forced.
            shapes: dict[frozenset[str], list[int]] = {}
            for index in inserts:
                shapes.setdefault(frozenset(tasks[index].extra), []).append(index)
            for group in shapes.values():
                stmt, params = self._insert(now, [tasks[i] for i in group])
                rows = (await conn.execute(stmt, params)).all()
                # In input order (checked below).
                inserted = self._sql.backend_sql.inserted_rows(rows)
                for index, row in zip(group, inserted, strict=True):
                    record = record_from_row(row)
                    task = tasks[index]
                    if (record.payload_json, record.dedupe_key) != (
                        task.payload_json,
                        task.dedupe_key_text,
                    ):
                        raise RuntimeError("inserted rows came back out of input order")
                    created[index] = record
            if self._notify:
                for lane in sorted({tasks[i].lane for i in inserts}):
                    await conn.execute(sa.select(sa.func.pg_notify(self._channel, lane)))
        by_key = {r.dedupe_key: r for r in created.values() if r.dedupe_key is not None}
        by_key.update(existing)
        results: list[EnqueueResult] = []
        for index, task in enumerate(tasks):
            if index in created:
                results.append(EnqueueResult(created[index], created=True))
            else:
                results.append(EnqueueResult(by_key[task.dedupe_key_text or ""], created=False))
        if now is None or not windowed:
            return results
        return await self._replace_holders(conn, tasks, results, now)

    def _insert(self, now: DbNow, tasks: Sequence[NewTask]) -> tuple[Any, list[dict[str, Any]]]:
        t = self._table
        params: list[dict[str, Any]] = []
        for task in tasks:  # every one names the same extra columns (see _enqueue)
            run_at = task.run_at
            if run_at is None and (now.value is not None or task.delay >= _SATURATING_DELTA):
                run_at = self._sql.plus(now, task.delay).value
            row: dict[str, Any] = {
                "kind": task.kind,
                "lane": task.lane,
                "status": _PENDING,
                "payload_json": task.payload_json,
                "steps_json": task.steps_json,
                "attempt": 0,
                "max_attempts": task.max_attempts,
                "p_run_at": run_at,
                "p_delay": task.delay,
                "priority": task.priority,
                "dedupe_key": task.dedupe_key_text,
                "manual_retry_allowed": True,
                "cancel_requested": False,
                "rescued": False,
                "trace_context": task.trace_context,
                "partition_key": task.partition,
            }
            row.update(task.extra)
            params.append(row)
        backend_sql = self._sql.backend_sql
        run_at_expr, waiting = backend_sql.enqueue_run_at(now, params)
        insert = sa.insert(t).values(
            run_at=run_at_expr, created_at=now.expr, updated_at=now.expr, **waiting
        )
        return backend_sql.insert_returning(insert, self._cols), params
