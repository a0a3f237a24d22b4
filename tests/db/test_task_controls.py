"""Operator control on the reference store: migration of older tables, the retention pass."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from aster_forge import TaskPruneReport, TaskRetention, TaskStatus
from aster_forge.db import (
    BackgroundTaskDbStore,
    create_background_tasks_table,
)
from aster_forge.runtime import CancellationToken
from aster_forge.tasks import NewTask
from aster_forge.tasks._retention import prune_finished_tasks, run_task_retention
from aster_forge.testing import InMemoryTaskStore, ManualClock

from ._leases import lease_of

_LONG = timedelta(minutes=10)


async def test_retention_pass_prunes_in_batches_and_reports(
    engine: AsyncEngine, backend: str
) -> None:
    await create_background_tasks_table(engine)
    clock = ManualClock()
    store = BackgroundTaskDbStore(engine, clock=clock)
    await store.enqueue_many([NewTask("k", "bulk") for _ in range(7)])
    claimed = await store.claim_due_for_lane("bulk", 7, "w", _LONG)
    for record in claimed[:5]:
        assert await store.mark_task_succeeded(lease_of(record), None, None)
    assert await store.mark_task_cancelled(lease_of(claimed[5]), steps_json=None)
    retention = TaskRetention(
        succeeded=timedelta(0), failed=None, cancelled=timedelta(0), batch_size=2
    )
    report = await prune_finished_tasks(store, retention)
    assert report.removed == {TaskStatus.SUCCEEDED: 5, TaskStatus.CANCELLED: 1}
    assert report.total == 6
    assert report.batches == 3 + 1, "5 rows in batches of 2, then 1 row (< batch: done)"
    remaining = await store.list_tasks(lane="bulk")
    assert [r.id for r in remaining.items] == [claimed[6].id], "the running task is kept"


async def test_retention_loop_runs_each_interval_until_stopped() -> None:
    clock = ManualClock()
    store = InMemoryTaskStore(clock)
    await store.enqueue(NewTask("k", "l"))
    [record] = await store.claim_due_for_lane("l", 1, "w", _LONG)
    await store.mark_task_succeeded(lease_of(record), None, None)
    reports: list[TaskPruneReport] = []
    stop = CancellationToken()

    async def on_report(report: TaskPruneReport) -> None:
        reports.append(report)
        if len(reports) == 2:
            stop.cancel()

    retention = TaskRetention(succeeded=timedelta(days=1), interval=timedelta(days=2))
    loop = asyncio.create_task(
        run_task_retention(store, retention, stop=stop, clock=clock, on_report=on_report),
        name="test-retention",
    )
    await clock.wait_for_sleepers(1)
    assert reports[0].total == 0, "a task finished just now is kept"
    await clock.advance(timedelta(days=2))
    await asyncio.wait_for(loop, timeout=5)
    assert reports[1].removed[TaskStatus.SUCCEEDED] == 1
    assert await store.get_task(record.id) is None


@pytest.mark.parametrize("age", [timedelta(days=365 * 5000)])
async def test_an_age_beyond_the_calendar_deletes_nothing(
    engine: AsyncEngine, age: timedelta
) -> None:
    await create_background_tasks_table(engine)
    store = BackgroundTaskDbStore(engine, clock=ManualClock())
    assert await store.delete_finished_tasks(TaskStatus.SUCCEEDED, age, limit=10) == 0
