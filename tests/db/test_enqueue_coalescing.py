"""Concurrent one-task enqueues share statements on every backend, each with its own outcome.

The coalescer's step-by-step contract is in ``test_enqueue_coalescer.py``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from aster_forge import EnqueueResult
from aster_forge.db import (
    BackgroundTaskDbStore,
    DatabaseDataError,
    background_tasks_table,
    create_background_tasks_table,
)
from aster_forge.tasks import NewTask
from aster_forge.testing import ManualClock

LANE = "coalesce"


@pytest.fixture
async def task_engine(engine: AsyncEngine) -> AsyncIterator[AsyncEngine]:
    """``engine`` with the background_tasks table created."""
    await create_background_tasks_table(engine)
    yield engine


def _task(n: int, **kwargs: object) -> NewTask:
    return NewTask("k", LANE, payload_json=json.dumps(n), **kwargs)  # type: ignore[arg-type]


def _batches(store: BackgroundTaskDbStore) -> int:
    assert store._coalescer is not None
    return store._coalescer.batches


async def _stored(store: BackgroundTaskDbStore) -> list[int]:
    page = await store.list_tasks(lane=LANE, limit=500)
    return sorted(json.loads(record.payload_json) for record in page.items)


async def test_concurrent_callers_share_statements_and_each_gets_its_own_row(
    task_engine: AsyncEngine,
) -> None:
    store = BackgroundTaskDbStore(task_engine, clock=ManualClock())
    results = await asyncio.gather(*(store.enqueue(_task(n)) for n in range(60)))
    assert [json.loads(r.record.payload_json) for r in results] == list(range(60))
    assert all(r.created for r in results)
    assert len({r.record.id for r in results}) == 60
    assert _batches(store) >= 1  # the first went alone; the rest did not each go alone
    assert await _stored(store) == list(range(60))


async def test_sequential_callers_are_never_batched(task_engine: AsyncEngine) -> None:
    store = BackgroundTaskDbStore(task_engine, clock=ManualClock())
    for n in range(5):
        await store.enqueue(_task(n))
    assert _batches(store) == 0
    assert await _stored(store) == list(range(5))


async def test_concurrent_callers_with_one_dedupe_key_get_one_row(
    task_engine: AsyncEngine,
) -> None:
    store = BackgroundTaskDbStore(task_engine, clock=ManualClock())
    results = await asyncio.gather(
        *(store.enqueue(_task(n, dedupe_key="report:1")) for n in range(12)),
        *(store.enqueue(_task(100 + n, dedupe_key=f"other:{n}")) for n in range(3)),
    )
    keyed = results[:12]
    assert len({r.record.id for r in keyed}) == 1
    assert [r.created for r in keyed].count(True) == 1
    assert all(r.created for r in results[12:])
    assert await _stored(store) == [json.loads(keyed[0].record.payload_json), 100, 101, 102]


async def test_a_row_the_database_refuses_fails_only_its_own_caller(engine: AsyncEngine) -> None:
    # A product column the store cannot check: the database (or its driver) refuses the
    # value, the batch is rolled back whole and sent again one task per statement.
    table = background_tasks_table(sa.MetaData(), "tasks_with_note", sa.Column("note", sa.Text))
    async with engine.begin() as conn:
        await conn.run_sync(table.metadata.create_all)
    store = BackgroundTaskDbStore(engine, table=table, clock=ManualClock())
    notes = ["ok", "ok", "n\ud800", "ok", "ok"]
    outcomes = await asyncio.gather(
        *(store.enqueue(_task(n, extra={"note": note})) for n, note in enumerate(notes)),
        return_exceptions=True,
    )
    assert isinstance(outcomes[2], DatabaseDataError)
    assert all(isinstance(o, EnqueueResult) and o.created for i, o in enumerate(outcomes) if i != 2)
    assert _batches(store) >= 1
    assert await _stored(store) == [0, 1, 3, 4]


async def test_a_caller_without_a_product_column_gets_its_default(engine: AsyncEngine) -> None:
    # Callers naming different `extra` columns share a batch: each row still gets the
    # column's default where its own task named no value, never another's NULL.
    column = sa.Column("note", sa.String(20), server_default="unset")
    table = background_tasks_table(sa.MetaData(), "tasks_with_default", column)
    async with engine.begin() as conn:
        await conn.run_sync(table.metadata.create_all)
    store = BackgroundTaskDbStore(engine, table=table, clock=ManualClock())
    extras = [{}, {"note": "given"}, {}, {"note": "other"}, {}]
    await asyncio.gather(*(store.enqueue(_task(n, extra=e)) for n, e in enumerate(extras)))
    assert _batches(store) >= 1
    await store.enqueue_many([_task(10, extra={"note": "many"}), _task(11)])
    async with engine.connect() as conn:
        rows = (await conn.execute(sa.select(table.c.payload_json, table.c.note))).all()
    notes = {json.loads(payload): note for payload, note in rows}
    assert notes == {
        0: "unset",
        1: "given",
        2: "unset",
        3: "other",
        4: "unset",
        10: "many",
        11: "unset",
    }


async def test_a_caller_cancelled_while_queued_writes_nothing(task_engine: AsyncEngine) -> None:
    store = BackgroundTaskDbStore(task_engine, clock=ManualClock())
    first, queued, last = (asyncio.create_task(store.enqueue(_task(n))) for n in range(3))
    await asyncio.sleep(0)  # the first is on the wire; the others wait for it
    queued.cancel()
    await asyncio.gather(first, last)
    with pytest.raises(asyncio.CancelledError):
        await queued
    assert await _stored(store) == [0, 2]


async def test_flush_waits_for_the_queued_batch(task_engine: AsyncEngine) -> None:
    store = BackgroundTaskDbStore(task_engine, clock=ManualClock())
    calls = [asyncio.create_task(store.enqueue(_task(n))) for n in range(10)]
    await asyncio.sleep(0)
    await calls[0]
    await store.flush_notifications()
    assert all(call.done() for call in calls)
    assert await _stored(store) == list(range(10))


async def test_coalescing_can_be_turned_off(task_engine: AsyncEngine) -> None:
    store = BackgroundTaskDbStore(task_engine, clock=ManualClock(), coalesce_enqueues=False)
    assert store._coalescer is None
    results = await asyncio.gather(*(store.enqueue(_task(n)) for n in range(20)))
    assert len({r.record.id for r in results}) == 20
    assert await _stored(store) == list(range(20))
