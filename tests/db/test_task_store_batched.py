"""Batched renewal and success on every backend: each entry fenced on its own."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from aster_forge import TaskStatus
from aster_forge.db import BackgroundTaskDbStore, create_background_tasks_table
from aster_forge.tasks import NewTask, TaskLease
from aster_forge.tasks._records import TaskCompletion
from aster_forge.testing import ManualClock

TTL = timedelta(seconds=30)


@pytest.fixture
async def store(engine: AsyncEngine) -> AsyncIterator[BackgroundTaskDbStore]:
    await create_background_tasks_table(engine)
    yield BackgroundTaskDbStore(engine, clock=ManualClock())


async def _claimed(
    store: BackgroundTaskDbStore, count: int, *, steps_json: str | None = None
) -> list[TaskLease]:
    await store.enqueue_many(
        [NewTask("noop", "lane", payload_json=str(n), steps_json=steps_json) for n in range(count)]
    )
    records = await store.claim_due_for_lane("lane", count, "w", TTL)
    assert len(records) == count
    leases = []
    for record in records:
        assert record.processing_token is not None and record.lease_expires_at is not None
        leases.append(TaskLease(record.id, record.processing_token, record.lease_expires_at))
    return leases


async def test_renew_many_fences_each_lease(store: BackgroundTaskDbStore) -> None:
    first, second, third = await _claimed(store, 3)
    stale = TaskLease(third.task_id, "stale-token", third.expires_at)
    renewed = await store.renew_task_leases_many([first, stale, second], TTL * 2)
    assert renewed[1] is None
    assert renewed[0] is not None and renewed[0].same_claim(first)
    assert renewed[2] is not None and renewed[2].expires_at >= second.expires_at
    assert await store.renew_task_leases_many([], TTL) == []


async def test_succeed_many_fences_each_entry_once(store: BackgroundTaskDbStore) -> None:
    first, second = await _claimed(store, 2)
    stale = TaskLease(second.task_id, "stale-token", second.expires_at)
    done = await store.mark_tasks_succeeded_many(
        [
            TaskCompletion(first, '"one"', None),
            TaskCompletion(stale, '"wrong"', None),
            TaskCompletion(first, '"twice"', None),
        ]
    )
    assert done == [True, False, False]
    row = await store.get_task(first.task_id)
    assert row is not None and row.status is TaskStatus.SUCCEEDED and row.result_json == '"one"'
    other = await store.get_task(second.task_id)
    assert other is not None and other.status is TaskStatus.RUNNING
    assert await store.mark_tasks_succeeded_many([TaskCompletion(second, None, "[]")]) == [True]


async def test_succeed_many_keeps_the_stored_steps_unless_given_and_writes_each_result(
    store: BackgroundTaskDbStore,
) -> None:
    # A column that is None for the whole batch is sent as no values on PostgreSQL.
    first, second, third = await _claimed(store, 3, steps_json='["stored"]')
    written = await store.mark_tasks_succeeded_many(
        [TaskCompletion(first, None, None), TaskCompletion(second, '"two"', None)]
    )
    assert written == [True, True]
    assert await store.mark_tasks_succeeded_many([TaskCompletion(third, None, '["new"]')]) == [True]
    rows = [await store.get_task(lease.task_id) for lease in (first, second, third)]
    assert [(r.result_json, r.steps_json) for r in rows if r is not None] == [
        (None, '["stored"]'),
        ('"two"', '["stored"]'),
        (None, '["new"]'),
    ]
