"""Enqueue in the product's own transaction: the task exists if and only if it commits."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession, create_async_engine

from aster_forge import EnqueueResult
from aster_forge.db import BackgroundTaskDbStore, create_background_tasks_table
from aster_forge.db._tasks_notify import BackgroundTaskNotificationListener
from aster_forge.db.errors import UnsupportedDatabaseBackendError
from aster_forge.runtime import CancellationToken
from aster_forge.tasks import NewTask
from aster_forge.tasks.errors import TaskLaneMismatchError
from aster_forge.testing import ManualClock

from ..tasks._dispatch_support import REGISTRY, Job, Kind

ROOT = Path(__file__).resolve().parents[2]

ORDERS = sa.Table(
    "tx_orders",
    sa.MetaData(),
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("note", sa.String(50), nullable=False),
)


@pytest.fixture
async def task_engine(engine: AsyncEngine) -> AsyncIterator[AsyncEngine]:
    """``engine`` with the task table and the product's ``tx_orders`` table."""
    await create_background_tasks_table(engine)
    async with engine.begin() as conn:
        await conn.run_sync(ORDERS.metadata.create_all)
    yield engine


async def _claim_in_another_process(url: str, lane: str) -> list[int]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.db._claim_worker",
        url,
        lane,
        cwd=str(ROOT),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    ids: list[int] = json.loads(out.decode().strip().splitlines()[-1])
    return ids


async def _rows(engine: AsyncEngine, lane: str) -> int:
    async with engine.connect() as conn:
        query = sa.text("SELECT count(*) FROM background_tasks WHERE lane = :lane")
        return int((await conn.execute(query, {"lane": lane})).scalar_one())


async def test_rollback_leaves_no_row_commit_is_seen_by_another_process(
    task_engine: AsyncEngine, database_url: str
) -> None:
    # The system clock: the other process claims on its own clock.
    store = BackgroundTaskDbStore(task_engine)
    lane = f"tx-{uuid.uuid4().hex[:8]}"
    async with task_engine.connect() as conn, conn.begin() as tx:
        await conn.execute(ORDERS.insert().values(note="rolled back"))
        made = await store.enqueue(NewTask("k", lane), connection=conn)
        assert made.created
        inside = sa.text("SELECT count(*) FROM background_tasks WHERE id = :id")
        assert (await conn.execute(inside, {"id": made.record.id})).scalar_one() == 1
        await tx.rollback()
    assert await store.get_task(made.record.id) is None
    assert await _rows(task_engine, lane) == 0
    assert await _claim_in_another_process(database_url, lane) == []

    async with task_engine.begin() as conn:
        await conn.execute(ORDERS.insert().values(note="committed"))
        kept = await store.enqueue_many(
            [NewTask("k", lane), NewTask("k", lane, dedupe_key=f"{lane}-once")], connection=conn
        )
    assert await _claim_in_another_process(database_url, lane) == sorted(r.record.id for r in kept)


async def test_an_async_session_is_joined(task_engine: AsyncEngine) -> None:
    store = BackgroundTaskDbStore(task_engine, clock=ManualClock(), registry=REGISTRY)
    task = REGISTRY.new_task(Kind.REPORT, Job(name="session"))
    async with AsyncSession(task_engine) as session:
        async with session.begin():
            await session.execute(ORDERS.insert().values(note="with session"))
            made = await store.enqueue(task, connection=session)
        assert made.record.steps_json is not None
    assert await store.get_task(made.record.id) is not None
    async with AsyncSession(task_engine) as session:
        await session.begin()
        gone = await store.enqueue(task, connection=session)
        await session.rollback()
    assert await store.get_task(gone.record.id) is None


async def test_validation_refuses_before_touching_the_transaction(
    task_engine: AsyncEngine,
) -> None:
    store = BackgroundTaskDbStore(task_engine, clock=ManualClock(), registry=REGISTRY)
    async with task_engine.begin() as conn:
        await conn.execute(ORDERS.insert().values(note="still fine"))
        with pytest.raises(TaskLaneMismatchError):
            await store.enqueue(NewTask("render", "fallback", payload_json="{}"), connection=conn)
        # The product's transaction is untouched and commits its own row.
    async with task_engine.connect() as conn:
        assert (await conn.execute(sa.select(sa.func.count()).select_from(ORDERS))).scalar() == 1


async def _until_blocked(engine: AsyncEngine, backend: str, racing: asyncio.Task[object]) -> None:
    """Wait until the second transaction waits on the first's lock."""
    if backend != "postgres":
        # SQLite waits in the driver's busy handler and MariaDB's lock waits are not
        # reliably visible to another session here: give the second transaction a
        # moment to reach its wait (the outcome must be one row either way).
        done, _ = await asyncio.wait({racing}, timeout=1.0)
        if done:
            racing.result()
            raise AssertionError("the second transaction did not wait on the first")
        return
    query = "SELECT count(*) FROM pg_locks WHERE NOT granted"
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 120  # generous: the machine may be heavily loaded
    async with engine.connect() as conn:
        while loop.time() < deadline:
            if racing.done():
                racing.result()  # raises what went wrong
                raise AssertionError("the second transaction did not wait on the first")
            if (await conn.execute(sa.text(query))).scalar_one():
                return
            await conn.rollback()
            await asyncio.sleep(0.01)
    raise AssertionError("the second transaction never waited on the first")


async def test_dedupe_inside_two_concurrent_transactions_gives_one_row(
    task_engine: AsyncEngine, backend: str
) -> None:
    store = BackgroundTaskDbStore(task_engine, clock=ManualClock())
    lane = f"tx-{uuid.uuid4().hex[:8]}"
    key = f"{lane}-order-42"

    async def place(conn: AsyncConnection, note: str) -> EnqueueResult:
        # The product writes its own row first (on SQLite this takes the write lock).
        await conn.execute(ORDERS.insert().values(note=note))
        return await store.enqueue(NewTask("k", lane, dedupe_key=key), connection=conn)

    async with task_engine.connect() as first_conn, task_engine.connect() as second_conn:
        await first_conn.begin()
        first = await place(first_conn, "first")
        await second_conn.begin()
        racing: asyncio.Task[EnqueueResult] = asyncio.create_task(
            place(second_conn, "second"), name="second-transaction"
        )
        try:
            await _until_blocked(task_engine, backend, racing)
        finally:
            # Always unblock and join the second transaction before its connection
            # closes, also when the wait above failed.
            await first_conn.commit()
            second = await racing
        await second_conn.commit()
    assert first.created and not second.created
    assert second.record.id == first.record.id
    assert await _rows(task_engine, lane) == 1

    # Both transactions at once, many rounds: always exactly one row per key.
    for round_no in range(5):
        round_key = f"{key}-{round_no}"

        async def one(note: str, round_key: str = round_key) -> EnqueueResult:
            async with task_engine.begin() as conn:
                await conn.execute(ORDERS.insert().values(note=note))
                task = NewTask("k", lane, dedupe_key=round_key)
                return await store.enqueue(task, connection=conn)

        results = await asyncio.gather(one("a"), one("b"))
        assert sum(r.created for r in results) == 1
        assert len({r.record.id for r in results}) == 1
    assert await _rows(task_engine, lane) == 6


# The other backend is SQLite: the store is on a server.
@pytest.mark.parametrize(
    "backend",
    [
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("mysql", marks=pytest.mark.mysql),
    ],
    indirect=True,
)
async def test_a_connection_on_another_backend_is_refused(
    task_engine: AsyncEngine, tmp_path: Path
) -> None:
    other = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'other.db'}")
    try:
        store = BackgroundTaskDbStore(task_engine, clock=ManualClock())
        async with other.begin() as conn:
            with pytest.raises(UnsupportedDatabaseBackendError):
                await store.enqueue(NewTask("k", "l"), connection=conn)
    finally:
        await other.dispose()


@pytest.mark.postgres
async def test_notify_is_delivered_only_on_commit(postgres_url: str) -> None:
    engine = create_async_engine(postgres_url)
    await create_background_tasks_table(engine)
    channel = f"af_{uuid.uuid4().hex[:12]}"
    store = BackgroundTaskDbStore(engine, notify_channel=channel)
    payloads: list[str] = []
    arrived: dict[str, asyncio.Event] = {}

    def on_notify(payload: str | None) -> None:
        if payload is not None:
            payloads.append(payload)
            arrived.setdefault(payload, asyncio.Event()).set()

    async def seen(lane: str) -> None:
        await asyncio.wait_for(arrived.setdefault(lane, asyncio.Event()).wait(), 10)

    listener = BackgroundTaskNotificationListener(postgres_url, channel, on_notify)
    token = CancellationToken()
    try:
        async with asyncio.TaskGroup() as group:
            group.create_task(listener.run(token), name="tx-listener")
            await asyncio.wait_for(listener.wait_connected(), 10)
            async with engine.connect() as conn:
                tx = await conn.begin()
                await store.enqueue(NewTask("k", "tx-rolled-back"), connection=conn)
                # Notifications arrive in commit order: this one proves the open
                # transaction's NOTIFY was not sent early.
                await store.enqueue(NewTask("k", "sentinel-1"))
                await seen("sentinel-1")
                assert "tx-rolled-back" not in payloads
                await tx.rollback()
            await store.enqueue(NewTask("k", "sentinel-2"))
            await seen("sentinel-2")
            assert "tx-rolled-back" not in payloads
            async with engine.connect() as conn:
                tx = await conn.begin()
                await store.enqueue(NewTask("k", "tx-committed"), connection=conn)
                await store.enqueue(NewTask("k", "sentinel-3"))
                await seen("sentinel-3")
                assert "tx-committed" not in payloads
                await tx.commit()
            await seen("tx-committed")
            token.cancel()
    finally:
        token.cancel()
        await engine.dispose()
    assert payloads == ["sentinel-1", "sentinel-2", "sentinel-3", "tx-committed"]


async def test_delay_and_run_at_in_a_transaction(task_engine: AsyncEngine) -> None:
    store = BackgroundTaskDbStore(task_engine, clock=ManualClock())
    async with task_engine.begin() as conn:
        later = await store.enqueue(
            NewTask("k", "tx-later", delay=timedelta(hours=1)), connection=conn
        )
    assert later.record.run_at > later.record.created_at
