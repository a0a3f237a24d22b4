"""Task store races (connections, processes), NOTIFY wake-ups and product-extended tables."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from aster_forge import TaskCancelOutcome, TaskNotFoundError
from aster_forge.db import (
    BackgroundTaskDbStore,
    background_tasks_table,
    create_background_tasks_table,
)
from aster_forge.db._tasks_notify import BackgroundTaskNotificationListener
from aster_forge.db.errors import UnsupportedDatabaseBackendError
from aster_forge.runtime import CancellationToken
from aster_forge.tasks import NewTask
from aster_forge.testing import ManualClock

ROOT = Path(__file__).resolve().parents[2]


async def test_twenty_connections_race_for_one_dedupe_key(database_url: str) -> None:
    engine = create_async_engine(database_url, pool_size=20, max_overflow=0)
    try:
        await create_background_tasks_table(engine)
        store = BackgroundTaskDbStore(engine, clock=ManualClock())
        for round_no in range(5):
            key = f"race-{round_no}-{uuid.uuid4().hex}"
            results = await asyncio.gather(
                *(store.enqueue(NewTask("k", "race", dedupe_key=key)) for _ in range(20))
            )
            assert sum(r.created for r in results) == 1
            assert len({r.record.id for r in results}) == 1
        async with engine.connect() as conn:
            count = (await conn.execute(sa.text("SELECT count(*) FROM background_tasks"))).scalar()
        assert count == 5
    finally:
        async with engine.begin() as conn:
            await conn.execute(sa.text("DROP TABLE IF EXISTS background_tasks"))
        await engine.dispose()


@pytest.mark.postgres
async def test_processes_race_for_dedupe_keys(postgres_url: str) -> None:
    engine = create_async_engine(postgres_url)
    await create_background_tasks_table(engine)
    run_id, keys, contenders, processes = uuid.uuid4().hex, 10, 5, 4
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.db._task_dedupe_worker",
            postgres_url,
            run_id,
            str(keys),
            str(contenders),
            cwd=ROOT,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        for _ in range(processes)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            assert (await asyncio.wait_for(proc.stdout.readline(), 20)).strip() == b"ready"
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write(b"go\n")
            await proc.stdin.drain()
        outputs = []
        for proc in procs:
            assert proc.stdout is not None
            outputs.append(json.loads(await asyncio.wait_for(proc.stdout.readline(), 40)))
            assert await proc.wait() == 0
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.kill()
            await proc.wait()
        async with engine.begin() as conn:
            await conn.execute(sa.text("DROP TABLE IF EXISTS background_tasks"))
        await engine.dispose()
    for index in range(keys):
        key = f"{run_id}:{index}"
        created = sum(out[key][0] for out in outputs)
        ids = {task_id for out in outputs for task_id in out[key][1]}
        assert created == 1, f"{key}: {created} rows created"
        assert len(ids) == 1, f"{key}: racers saw different rows {ids}"


@pytest.mark.postgres
async def test_notify_wakes_listener_and_listener_reconnects(postgres_url: str) -> None:
    engine = create_async_engine(postgres_url)
    await create_background_tasks_table(engine)
    channel = f"af_{uuid.uuid4().hex[:12]}"
    store = BackgroundTaskDbStore(engine, notify_channel=channel)
    payloads: list[str | None] = []
    arrived = asyncio.Event()
    reconnected = asyncio.Event()

    def on_notify(payload: str | None) -> None:
        payloads.append(payload)
        if payload is not None:
            arrived.set()
        elif payloads.count(None) >= 2:
            reconnected.set()

    listener = BackgroundTaskNotificationListener(
        postgres_url, channel, on_notify, reconnect_delay=timedelta(0)
    )
    token = CancellationToken()
    try:
        async with asyncio.TaskGroup() as group:
            group.create_task(listener.run(token), name="listener")
            await asyncio.wait_for(listener.wait_connected(), 10)
            await store.enqueue(NewTask("k", "lane-a"))
            await asyncio.wait_for(arrived.wait(), 10)
            assert "lane-a" in payloads
            # Break the listener's connection from the server side; it must reconnect.
            arrived.clear()
            async with engine.connect() as conn:
                await conn.execute(
                    sa.text(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE query = :q AND pid <> pg_backend_pid()"
                    ),
                    {"q": f'LISTEN "{channel}"'},
                )
            await asyncio.wait_for(reconnected.wait(), 15)
            assert listener.connects == 2
            await asyncio.wait_for(listener.wait_connected(), 10)
            await store.enqueue(NewTask("k", "lane-b"))
            await asyncio.wait_for(arrived.wait(), 10)
            assert "lane-b" in payloads
            token.cancel()
    finally:
        token.cancel()
        async with engine.begin() as conn:
            await conn.execute(sa.text("DROP TABLE IF EXISTS background_tasks"))
        await engine.dispose()
    assert payloads.count(None) >= 2, "each (re)connect is announced with None"


def test_listener_refuses_other_backends() -> None:
    with pytest.raises(UnsupportedDatabaseBackendError):
        BackgroundTaskNotificationListener("sqlite+aiosqlite:///x.db")


async def test_product_extends_the_table(engine: AsyncEngine) -> None:
    metadata = sa.MetaData()
    table = background_tasks_table(
        metadata, "product_tasks", sa.Column("tenant", sa.String(32), nullable=True)
    )
    assert background_tasks_table(metadata, "product_tasks") is table
    with pytest.raises(ValueError, match="core"):
        background_tasks_table(sa.MetaData(), "x", sa.Column("status", sa.String(8)))
    await create_background_tasks_table(engine, table=table)
    await create_background_tasks_table(engine, table=table)  # idempotent
    store = BackgroundTaskDbStore(engine, table=table, clock=ManualClock())
    result = await store.enqueue(NewTask("k", "lane", extra={"tenant": "acme"}))
    async with engine.connect() as conn:
        tenant = (
            await conn.execute(sa.select(table.c.tenant).where(table.c.id == result.record.id))
        ).scalar_one()
    assert tenant == "acme"
    with pytest.raises(ValueError, match="extra"):
        await store.enqueue(NewTask("k", "lane", extra={"nope": 1}))
    assert {index.name for index in table.indexes} == {
        "ux_product_tasks_dedupe_key",
        "ix_product_tasks_due",
        "ix_product_tasks_waiting",
        "ix_product_tasks_lease",
        "ix_product_tasks_finished",
        "ix_product_tasks_dependents",
    }


@pytest.mark.parametrize("task_id", [0, -1, 2**63, 2**70])
async def test_out_of_range_ids_are_not_found_without_reaching_the_driver(
    engine: AsyncEngine, task_id: int
) -> None:
    await create_background_tasks_table(engine)
    store = BackgroundTaskDbStore(engine)
    assert await store.get_task(task_id) is None
    assert await store.cancel_task(task_id) is TaskCancelOutcome.NOT_FOUND
    with pytest.raises(TaskNotFoundError):
        await store.retry_task(task_id)
