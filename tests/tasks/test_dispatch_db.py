"""Dispatch and claimed execution over the real SQL store on SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from aster_forge import ClassifiedTaskError, TaskExecutionContext, TaskRetryClass, TaskStatus
from aster_forge.db import BackgroundTaskDbStore, create_background_tasks_table
from aster_forge.runtime import CancellationToken
from aster_forge.runtime._clock import SystemClock
from aster_forge.tasks import ClaimedTaskOutcome, DispatchPollConfig, TaskLaneConfig, TaskWorker
from aster_forge.testing import ManualClock

from ..db._support import advance_for
from ._dispatch_support import Harness, Job, Kind, Lane, make_config, new_task, run_claimed, until

FAST_POLL = DispatchPollConfig(
    base_interval=timedelta(milliseconds=50), max_interval=timedelta(milliseconds=200)
)


@pytest.fixture
async def task_engine(engine: AsyncEngine) -> AsyncIterator[AsyncEngine]:
    await create_background_tasks_table(engine)
    yield engine


async def _eventually(check: Callable[[], Awaitable[bool]], *, limit: float = 20.0) -> None:
    """Wait (bounded) for a condition the database reaches on its own."""
    async with asyncio.timeout(limit):
        while not await check():  # noqa: ASYNC110 - a database condition has no event
            await asyncio.sleep(0.02)


async def test_worker_runs_every_task_once_within_lane_limits(task_engine: AsyncEngine) -> None:
    store = BackgroundTaskDbStore(task_engine)
    harness = Harness()

    async def yielding(ctx: TaskExecutionContext, job: Job) -> int:
        await asyncio.sleep(0)  # let other tasks overlap
        return job.value

    renders = [f"r{i}" for i in range(12)]
    mails = [f"m{i}" for i in range(12)]
    for name in renders + mails:
        harness.actions[name] = yielding
    clock = SystemClock()
    worker = TaskWorker(
        store,
        lanes=[TaskLaneConfig(Lane.MEDIA, 2), TaskLaneConfig(Lane.FALLBACK, 3)],
        execution=make_config(harness, clock),  # type: ignore[arg-type]
        poll=FAST_POLL,
    )
    shutdown = CancellationToken()
    running = asyncio.create_task(worker.run(shutdown), name="test-worker")
    await store.enqueue_many([new_task(Kind.RENDER, n, value=i) for i, n in enumerate(renders)])
    await store.enqueue_many([new_task(Kind.MAIL, n) for n in mails])
    worker.wake()

    async def all_done() -> bool:
        page = await store.list_tasks(status=TaskStatus.SUCCEEDED, limit=100)
        return len(page.items) == 24

    await _eventually(all_done)
    shutdown.cancel()
    await running
    assert sorted(harness.started) == sorted(renders + mails)
    assert harness.max_running["media"] <= 2 and harness.max_running["fallback"] <= 3
    total = worker.stats.total()
    assert (total.claimed, total.succeeded, total.in_flight) == (24, 24, 0)
    row = await store.get_task(1)
    assert row is not None and row.result_json == "0" and row.processing_token is None


async def test_late_write_of_a_rescued_claim_is_refused(
    task_engine: AsyncEngine, backend: str
) -> None:
    clock = ManualClock()
    store = BackgroundTaskDbStore(task_engine, clock=clock)
    (task_id,) = [r.record.id for r in await store.enqueue_many([new_task(Kind.MAIL, "stale")])]
    ttl = timedelta(milliseconds=500)
    (stale,) = await store.claim_due_for_lane(Lane.FALLBACK, 1, "dead-worker", ttl)
    await advance_for(backend, clock)(timedelta(milliseconds=700))
    (rescued,) = await store.claim_due_for_lane(
        Lane.FALLBACK, 1, "new-worker", timedelta(minutes=5)
    )
    assert rescued.rescued and rescued.processing_token != stale.processing_token
    # The dead worker wakes up and runs its stale claim to the end: nothing is written.
    report = await run_claimed(store, stale, make_config(Harness(), clock))
    assert report.outcome is ClaimedTaskOutcome.LEASE_LOST
    row = await store.get_task(task_id)
    assert row is not None
    assert (row.status, row.processing_token) == (TaskStatus.RUNNING, rescued.processing_token)
    assert row.result_json is None
    # The rescuing claim completes normally.
    assert (
        await run_claimed(store, rescued, make_config(Harness(), clock))
    ).outcome is ClaimedTaskOutcome.SUCCEEDED


async def test_shutdown_release_and_failed_step_on_the_real_store(
    task_engine: AsyncEngine,
) -> None:
    clock = ManualClock()
    store = BackgroundTaskDbStore(task_engine, clock=clock)
    harness = Harness()

    async def broken(ctx: TaskExecutionContext, job: Job) -> int:
        await ctx.step_succeeded("collect")
        await ctx.step_active("render")
        raise ClassifiedTaskError("Template is missing", TaskRetryClass.PERMANENT)

    async def waits(ctx: TaskExecutionContext, job: Job) -> int:
        await ctx.cancellation.wait()
        ctx.ensure_active()
        return 0

    harness.actions.update(broken=broken, waits=waits)
    results = await store.enqueue_many(
        [new_task(Kind.REPORT, "broken"), new_task(Kind.MAIL, "waits")]
    )
    broken_id, waits_id = (r.record.id for r in results)
    claimed = await store.claim_due_for_lane(Lane.FALLBACK, 2, "w", timedelta(minutes=5))
    by_id = {record.id: record for record in claimed}
    shutdown = CancellationToken()
    config = make_config(harness, clock, shutdown_token=shutdown)
    failed = await run_claimed(store, by_id[broken_id], config)
    assert failed.outcome is ClaimedTaskOutcome.FAILED
    run = asyncio.create_task(run_claimed(store, by_id[waits_id], config), name="test-run")
    await until(lambda: "waits" in harness.started)
    shutdown.cancel()
    assert (await run).outcome is ClaimedTaskOutcome.RELEASED

    broken_row = await store.get_task(broken_id)
    assert broken_row is not None and broken_row.steps_json is not None
    assert (broken_row.status, broken_row.last_error) == (TaskStatus.FAILED, "Template is missing")
    steps = json.loads(broken_row.steps_json)
    assert [(s["status"], s["detail"]) for s in steps] == [
        ("succeeded", None),
        ("failed", "Template is missing"),
    ]
    released = await store.get_task(waits_id)
    assert released is not None
    assert (released.status, released.attempt, released.processing_token) == (
        TaskStatus.PENDING,
        0,
        None,
    )
