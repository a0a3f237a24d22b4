"""The enqueue boundary on every backend: registry checks, bad text, the claim limit."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from aster_forge.db import (
    BackgroundTaskDbStore,
    DatabaseDataError,
    DatabaseUnavailableError,
    background_tasks_table,
    create_background_tasks_table,
)
from aster_forge.tasks import NewTask, TaskInvalidValueError, TaskRegistry
from aster_forge.tasks.errors import TaskDedupeKeyError, TaskEnqueueValueError, TaskRegistryError
from aster_forge.testing import InMemoryTaskStore, ManualClock, TaskEnqueueConformance

from ..tasks._dispatch_support import REGISTRY, Job, Kind, Lane
from ._support import advance_for


@pytest.fixture
async def task_engine(engine: AsyncEngine) -> AsyncIterator[AsyncEngine]:
    """``engine`` with the background_tasks table created."""
    await create_background_tasks_table(engine)
    yield engine


@pytest.mark.parametrize("check", TaskEnqueueConformance.CHECKS)
async def test_in_memory_store(check: str) -> None:
    clock = ManualClock()
    stores: list[InMemoryTaskStore] = []

    def make(registry: object) -> InMemoryTaskStore:
        if not stores:
            stores.append(InMemoryTaskStore(clock, registry=registry))  # type: ignore[arg-type]
        return stores[0]

    await TaskEnqueueConformance(make, advance=clock.advance).run(check)


@pytest.mark.parametrize("check", TaskEnqueueConformance.CHECKS)
async def test_db_store(check: str, task_engine: AsyncEngine, backend: str) -> None:
    clock = ManualClock()
    suite = TaskEnqueueConformance(
        lambda registry: BackgroundTaskDbStore(task_engine, clock=clock, registry=registry),
        advance=advance_for(backend, clock),
    )
    await suite.run(check)


# One test per bad input, on every backend, through the store without a registry:
# the same typed error everywhere, raised before any statement.
BAD_TASKS = {
    "surrogate-in-payload": lambda: NewTask("k", "bad-input", payload_json='"\ud800"'),
    "surrogate-in-kind": lambda: NewTask("k\ud800", "bad-input"),
    "nul-in-kind": lambda: NewTask("k\x00", "bad-input"),
    "nul-in-lane": lambda: NewTask("k", "bad-input\x00"),
    "nan-in-payload": lambda: NewTask("k", "bad-input", payload_json='{"x": NaN}'),
}


@pytest.mark.parametrize("name", sorted(BAD_TASKS))
async def test_bad_text_is_the_same_typed_error(name: str, task_engine: AsyncEngine) -> None:
    store = BackgroundTaskDbStore(task_engine, clock=ManualClock())
    with pytest.raises(TaskEnqueueValueError):
        await store.enqueue(BAD_TASKS[name]())
    assert (await store.list_tasks(lane="bad-input")).items == []


@pytest.mark.parametrize("key", ["key\x00", "key\ud800"])
async def test_bad_dedupe_key_is_the_same_typed_error(key: str, task_engine: AsyncEngine) -> None:
    store = BackgroundTaskDbStore(task_engine, clock=ManualClock())
    with pytest.raises(TaskDedupeKeyError):
        await store.enqueue(NewTask("k", "bad-input", dedupe_key=key))
    assert (await store.list_tasks(lane="bad-input")).items == []


@pytest.mark.parametrize("limit", [2**31, 10**12])
async def test_claim_limit_beyond_32_bits_is_the_same_typed_error(
    limit: int, task_engine: AsyncEngine
) -> None:
    store = BackgroundTaskDbStore(task_engine, clock=ManualClock())
    await store.enqueue(NewTask("k", "claim-limit"))
    with pytest.raises(TaskInvalidValueError, match="claim limit"):
        await store.claim_due_for_lane("claim-limit", limit, "w", timedelta(minutes=1))
    claimed = await store.claim_due_for_lane("claim-limit", 2**31 - 1, "w", timedelta(minutes=1))
    assert len(claimed) == 1


@pytest.mark.parametrize("owner", ["w\x00", "w\ud800"])
async def test_bad_claim_owner_is_the_same_typed_error(
    owner: str, task_engine: AsyncEngine
) -> None:
    store = BackgroundTaskDbStore(task_engine, clock=ManualClock())
    with pytest.raises(TaskInvalidValueError, match="claim owner"):
        await store.claim_due_for_lane("claim-owner", 1, owner, timedelta(minutes=1))


async def test_driver_encoding_errors_are_translated(engine: AsyncEngine) -> None:
    # A product column the store cannot validate: the driver's encoding failure (a bare
    # UnicodeEncodeError on SQLite and MariaDB) becomes the typed data error everywhere.
    table = background_tasks_table(sa.MetaData(), "tasks_with_note", sa.Column("note", sa.Text))
    async with engine.begin() as conn:
        await conn.run_sync(table.metadata.create_all)
    store = BackgroundTaskDbStore(engine, table=table, clock=ManualClock())
    with pytest.raises(DatabaseDataError):
        await store.enqueue(NewTask("k", "extra", extra={"note": "n\ud800"}))
    assert (await store.list_tasks(lane="extra")).items == []


async def test_store_refuses_an_unvalidated_registry(task_engine: AsyncEngine) -> None:
    with pytest.raises(TaskRegistryError):
        BackgroundTaskDbStore(task_engine, registry=TaskRegistry(kind=Kind, lane=Lane))
    with pytest.raises(TaskRegistryError):
        InMemoryTaskStore(registry=TaskRegistry(kind=Kind, lane=Lane))


@pytest.mark.postgres
async def test_a_broken_driver_connection_is_unavailable_then_replaced(postgres_url: str) -> None:
    # PostgreSQL enqueue runs on the asyncpg connection itself: a connection killed
    # under it is the typed "unavailable" error, and the pool never reuses it.
    engine = create_async_engine(postgres_url, pool_size=1, max_overflow=0)
    admin = create_async_engine(postgres_url)
    try:
        await create_background_tasks_table(engine)
        store = BackgroundTaskDbStore(engine, registry=REGISTRY)
        await store.enqueue(REGISTRY.new_task(Kind.MAIL, Job(name="warm")))
        async with engine.connect() as conn:
            pid = (await conn.execute(sa.text("SELECT pg_backend_pid()"))).scalar_one()
        async with admin.connect() as conn:
            await conn.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        with pytest.raises(DatabaseUnavailableError):
            await store.enqueue(REGISTRY.new_task(Kind.MAIL, Job(name="lost")))
        again = await store.enqueue(REGISTRY.new_task(Kind.MAIL, Job(name="again")))
        assert again.created
        assert {r.kind for r in (await store.list_tasks(lane="fallback")).items} == {"mail"}
        assert len((await store.list_tasks(lane="fallback")).items) == 2
    finally:
        async with engine.begin() as conn:
            await conn.execute(sa.text("DROP TABLE IF EXISTS background_tasks"))
        await engine.dispose()
        await admin.dispose()
