"""PostgreSQL hot statements on the asyncpg connection: the SQLAlchemy path's results and errors.

The claim, the success-and-claim, the batched success and the batched renewal run on
the asyncpg connection itself. They must return what the SQLAlchemy path returns
(aware UTC datetimes included), retry lost conflicts and raise the same typed errors,
and never reuse a connection left in an unknown state.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from aster_forge import BackgroundTaskRecord
from aster_forge.db import (
    BackgroundTaskDbStore,
    DatabaseConflictError,
    DatabaseOperationError,
    DatabaseUnavailableError,
    UtcDateTime,
)
from aster_forge.db._pg_driver import PgDriverStatement
from aster_forge.db._postgres import PgTaskRunner
from aster_forge.db._tables import CORE_COLUMNS
from aster_forge.tasks import NewTask, TaskLease
from aster_forge.tasks._records import TaskCompletion

from ._pg_driver_support import (
    EPOCH,
    RECORD_FIELDS,
    assert_same,
    pg_engine,
    read_back,
    wait_for_lock_wait,
    with_offset_codec,
)

pytestmark = pytest.mark.postgres

_TTL = timedelta(minutes=10)
_PATHS = [pytest.param(True, id="driver"), pytest.param(False, id="sqlalchemy")]


def _store(engine: AsyncEngine, *, driver: bool = True) -> BackgroundTaskDbStore:
    store = BackgroundTaskDbStore(engine, notify=False)
    assert store._pg is not None and store._pg_run is not None
    assert store._pg_run.driver  # asyncpg: the driver path is the default
    store._pg_run = PgTaskRunner(store._pg, engine, store._sql, store._driver_hold, driver=driver)
    return store


def _lease(record: BackgroundTaskRecord) -> TaskLease:
    assert record.processing_token is not None and record.lease_expires_at is not None
    return TaskLease(record.id, record.processing_token, record.lease_expires_at)


def test_the_record_fields_follow_the_statements_columns() -> None:
    # The driver path builds records positionally from the returned core columns.
    assert tuple(RECORD_FIELDS) == CORE_COLUMNS


async def test_a_refused_bind_value_is_raised_as_sqlalchemy_raises_it(postgres_url: str) -> None:
    engine = create_async_engine(postgres_url)
    try:
        query = sa.select(sa.bindparam("at", type_=UtcDateTime()))
        statement = PgDriverStatement(query, engine.dialect)
        assert statement.arguments({"at": EPOCH}) == [EPOCH]
        with pytest.raises(sa.exc.StatementError) as caught:
            statement.arguments({"at": datetime(2000, 1, 1)})  # naive: refused
        assert isinstance(caught.value.orig, ValueError)
        with pytest.raises(sa.exc.StatementError) as on_sqlalchemy:
            async with engine.connect() as conn:
                await conn.execute(query, {"at": datetime(2000, 1, 1)})
        assert type(on_sqlalchemy.value) is type(caught.value)
    finally:
        await engine.dispose()


@pytest.mark.parametrize("codec", [False, True], ids=["default-codec", "offset-codec"])
async def test_driver_records_are_what_sqlalchemy_reads_back(
    postgres_url: str, codec: bool
) -> None:
    async with pg_engine(postgres_url) as engine:
        if codec:
            await with_offset_codec(engine)
        store = _store(engine)
        past = datetime.now(UTC) - timedelta(minutes=5)
        await store.enqueue_many(
            [
                NewTask("k", "media", payload_json="1", dedupe_key="one", priority=2),
                NewTask("k", "media", payload_json="2", steps_json="[]", run_at=past),
                NewTask("k", "media", payload_json="3"),
                NewTask("k", "media", payload_json="4"),
            ]
        )
        claimed = await store.claim_due_for_lane("media", 2, "w1", _TTL)
        assert [r.payload_json for r in claimed] == ["1", "2"]  # priority, then run_at
        for got, want in zip(
            claimed, await read_back(engine, store, [r.id for r in claimed]), strict=True
        ):
            assert_same(got, want)

        (renewed,) = await store.renew_task_leases_many([_lease(claimed[0])], _TTL)
        assert renewed is not None and renewed.expires_at.tzinfo is UTC
        (after_renewal, _) = await read_back(engine, store, [r.id for r in claimed])
        assert renewed.expires_at == after_renewal.lease_expires_at

        completions = [TaskCompletion(_lease(r), '"ok"', None) for r in claimed]
        written, more = await store.mark_tasks_succeeded_and_claim(
            completions[:1], "media", 2, "w2", _TTL
        )
        assert written == [True] and len(more) == 2
        for got, want in zip(
            more, await read_back(engine, store, [r.id for r in more]), strict=True
        ):
            assert_same(got, want)
        assert await store.mark_tasks_succeeded_many(completions) == [False, True]


async def test_a_lost_conflict_is_retried_then_raised_as_a_conflict(postgres_url: str) -> None:
    # lock_timeout turns the wait on a row lock into a lock_not_available conflict.
    settings = {"server_settings": {"lock_timeout": "100ms"}}
    async with pg_engine(postgres_url, connect_args=settings) as engine:
        store = _store(engine)
        await store.enqueue_many([NewTask("k", "media"), NewTask("k", "media")])
        first, second = await store.claim_due_for_lane("media", 2, "w1", _TTL)
        t = store.table

        async def lock_row(conn: AsyncConnection, task_id: int) -> None:
            await conn.execute(sa.select(t.c.id).where(t.c.id == task_id).with_for_update())

        async with engine.connect() as admin:
            await lock_row(admin, first.id)
            done = asyncio.create_task(
                store.mark_tasks_succeeded_many([TaskCompletion(_lease(first))])
            )
            await asyncio.sleep(0.25)  # a first attempt or two lost the lock wait
            assert not done.done()
            await admin.rollback()
        assert await done == [True]

        async with engine.connect() as admin:
            await lock_row(admin, second.id)
            with pytest.raises(DatabaseConflictError) as caught:
                await store.renew_task_leases_many([_lease(second)], _TTL)
            assert isinstance(caught.value.__cause__, sa.exc.DBAPIError)
            await admin.rollback()


def _bad_completion(record: BackgroundTaskRecord, kind: str) -> TaskCompletion:
    if kind == "surrogate":
        return TaskCompletion(_lease(record), '"\ud800"', None)
    if kind == "nul":
        return TaskCompletion(_lease(record), '"\x00"', None)
    return TaskCompletion(dataclasses.replace(_lease(record), task_id=2**63), None, None)


async def _error_of(call: Awaitable[Any]) -> type[BaseException]:
    with pytest.raises(DatabaseOperationError) as caught:
        await call
    return type(caught.value)


async def _open_transactions(admin: AsyncEngine) -> int:
    """Other sessions of the database inside a transaction (holding its locks)."""
    query = sa.text(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND pid <> pg_backend_pid() AND xact_start IS NOT NULL"
    )
    async with admin.connect() as conn:
        return int((await conn.execute(query)).scalar_one())


@pytest.mark.parametrize("kind", ["surrogate", "nul", "id-out-of-range"])
async def test_bad_input_raises_the_sqlalchemy_paths_typed_error(
    postgres_url: str, kind: str
) -> None:
    admin = create_async_engine(postgres_url)
    try:
        async with pg_engine(postgres_url, pool_size=1, max_overflow=0, pool_timeout=5) as engine:
            errors: dict[bool, list[type[BaseException]]] = {}
            for driver in (False, True):
                store = _store(engine, driver=driver)
                await store.enqueue_many([NewTask("k", "media")])
                (record,) = await store.claim_due_for_lane("media", 1, "w1", _TTL)
                bad = _bad_completion(record, kind)
                calls: list[Awaitable[Any]] = [
                    store.mark_tasks_succeeded_many([bad]),
                    store.mark_tasks_succeeded_and_claim([bad], "media", 1, "w", _TTL),
                ]
                if kind == "id-out-of-range":
                    calls.append(store.renew_task_leases_many([bad.lease], _TTL))
                errors[driver] = []
                for call in calls:
                    errors[driver].append(await _error_of(call))
                    if driver:
                        # Not back in the pool with the server inside the failed statement.
                        await asyncio.sleep(0)
                        assert await _open_transactions(admin) == 0
            assert errors[True] == errors[False]
    finally:
        await admin.dispose()


async def _behind_a_lock(
    engine: AsyncEngine,
    postgres_url: str,
    then: Callable[[AsyncConnection, asyncio.Task[list[bool]]], Awaitable[None]],
) -> None:
    """A batched success waiting on another session's row lock, handed to ``then``."""
    store = _store(engine)
    await store.enqueue_many([NewTask("k", "media"), NewTask("k", "media")])
    first, _ = await store.claim_due_for_lane("media", 2, "w1", _TTL)
    t = store.table
    admin = create_async_engine(postgres_url)
    try:
        async with admin.connect() as conn:
            await conn.execute(sa.select(t.c.id).where(t.c.id == first.id).with_for_update())
            blocked = asyncio.create_task(
                store.mark_tasks_succeeded_many([TaskCompletion(_lease(first))])
            )
            await wait_for_lock_wait(conn, "the statement")
            await then(conn, blocked)
            await conn.rollback()
    finally:
        await admin.dispose()
    # The pool's only connection was replaced: the next statement works, nothing is held.
    assert len(await store.claim_due_for_lane("media", 5, "w2", _TTL)) == 0
    await asyncio.sleep(0)
    assert engine.sync_engine.pool.checkedout() == 0  # type: ignore[attr-defined]


async def test_a_connection_killed_mid_statement_is_unavailable_and_never_reused(
    postgres_url: str,
) -> None:
    async def kill(conn: AsyncConnection, blocked: asyncio.Task[list[bool]]) -> None:
        await conn.execute(
            sa.text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE wait_event_type = 'Lock' AND datname = current_database()"
            )
        )
        with pytest.raises(DatabaseUnavailableError):
            await blocked

    async with pg_engine(postgres_url, pool_size=1, max_overflow=0, pool_timeout=5) as engine:
        await _behind_a_lock(engine, postgres_url, kill)


async def test_a_cancelled_statement_discards_its_connection(postgres_url: str) -> None:
    async def cancel(_conn: AsyncConnection, blocked: asyncio.Task[list[bool]]) -> None:
        blocked.cancel()
        with pytest.raises(asyncio.CancelledError):
            await blocked

    async with pg_engine(postgres_url, pool_size=1, max_overflow=0, pool_timeout=5) as engine:
        await _behind_a_lock(engine, postgres_url, cancel)
