"""TaskWorker: lanes checked against the registry, stats from what the store applied, one grace."""

from __future__ import annotations

import asyncio
import enum
import gc
import logging
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from aster_forge import TaskExecutionContext, TaskStatus
from aster_forge.db import BackgroundTaskDbStore, create_background_tasks_table
from aster_forge.runtime import CancellationToken
from aster_forge.runtime._clock import SystemClock
from aster_forge.runtime._race import abandoned_tasks
from aster_forge.tasks import (
    ClaimedTaskExecution,
    ClaimedTaskExecutionConfig,
    DispatchPollConfig,
    TaskLaneConfig,
    TaskWorker,
)
from aster_forge.tasks._rate_limit import TaskRateLimit
from aster_forge.tasks.errors import TaskDispatchConfigError
from aster_forge.testing import InMemoryTaskStore, ManualClock

from ._dispatch_support import (
    LEASE_TTL,
    NO_JITTER,
    REGISTRY,
    Harness,
    Job,
    Kind,
    Lane,
    enqueue,
    new_task,
    until,
)

SLOW_POLL = DispatchPollConfig(base_interval=timedelta(seconds=10))


class OtherLane(enum.StrEnum):
    ELSEWHERE = "elsewhere"


def _worker(
    store: object,
    harness: Harness,
    clock: object,
    *,
    grace: timedelta = timedelta(seconds=10),
    lanes: list[TaskLaneConfig] | None = None,
) -> TaskWorker[Harness]:
    execution = ClaimedTaskExecutionConfig(
        state=harness,
        registry=REGISTRY,
        lease_ttl=LEASE_TTL,
        retry_policy=NO_JITTER,
        shutdown_grace=grace,
        clock=clock,  # type: ignore[arg-type]
    )
    return TaskWorker(
        store,  # type: ignore[arg-type]
        lanes=lanes or [TaskLaneConfig(Lane.MEDIA, 2), TaskLaneConfig(Lane.FALLBACK, 2)],
        execution=execution,
        poll=SLOW_POLL,
    )


def test_lanes_are_checked_against_the_registry() -> None:
    store, harness, clock = InMemoryTaskStore(), Harness(), ManualClock()
    with pytest.raises(TaskDispatchConfigError, match=r"without a lane config.*fallback"):
        _worker(store, harness, clock, lanes=[TaskLaneConfig(Lane.MEDIA, 1)])
    with pytest.raises(TaskDispatchConfigError, match=r"does not know.*elsewhere"):
        _worker(
            store,
            harness,
            clock,
            lanes=[
                TaskLaneConfig(Lane.MEDIA, 1),
                TaskLaneConfig(Lane.FALLBACK, 1),
                TaskLaneConfig(OtherLane.ELSEWHERE, 1),
            ],
        )
    partial = TaskWorker(
        store,
        lanes=[TaskLaneConfig(Lane.MEDIA, 1)],
        execution=ClaimedTaskExecutionConfig(state=harness, registry=REGISTRY),
        partial_lanes=True,
    )
    assert [config.lane for config in partial.lanes] == [Lane.MEDIA]


async def test_in_flight_view_names_each_running_task() -> None:
    clock = ManualClock()
    store, harness = InMemoryTaskStore(clock), Harness()
    harness.gate("a", "b")
    await enqueue(store, new_task(Kind.RENDER, "a"), new_task(Kind.MAIL, "b"))
    worker = _worker(store, harness, clock)
    await worker.drain()
    await until(lambda: len(harness.started) == 2)
    view = sorted(worker.in_flight_tasks(), key=lambda item: item.task_id)
    assert [(item.kind, item.lane, item.attempt) for item in view] == [
        (Kind.RENDER.value, Lane.MEDIA, 1),
        (Kind.MAIL.value, Lane.FALLBACK, 1),
    ]
    assert {item.lease for item in view} == set(worker.running_leases())
    harness.open("a", "b")
    await worker.join()
    assert worker.in_flight_tasks() == ()
    assert worker.stats.total().succeeded == 2


async def test_each_body_runs_inline_in_its_execution_task() -> None:
    clock = ManualClock()
    store, harness = InMemoryTaskStore(clock), Harness()
    seen: dict[str, tuple[str, int]] = {}
    tasks_while_running: list[set[str]] = []

    async def where(ctx: TaskExecutionContext, job: Job) -> int:
        current = asyncio.current_task()
        assert current is not None
        seen[job.name] = (current.get_name(), ctx.lease.task_id)
        names = {t.get_name() for t in asyncio.all_tasks()}
        tasks_while_running.append({n for n in names if n.startswith("aster-forge:")})
        return 0

    harness.actions["a"] = harness.actions["b"] = where
    await enqueue(store, new_task(Kind.RENDER, "a"), new_task(Kind.MAIL, "b"))
    worker = _worker(store, harness, clock)
    await worker.drain()
    await worker.join()
    # One task per execution, the heartbeat loop and the success batch: no task per
    # body, no waiter per execution.
    expected = {"aster-forge:task-heartbeat", "aster-forge:task-completions"}
    expected |= {f"aster-forge:task-{task_id}" for _, task_id in seen.values()}
    assert tasks_while_running and all(names <= expected for names in tasks_while_running), (
        tasks_while_running
    )
    assert {name for name, _ in seen.values()} == {
        f"aster-forge:task-{task_id}" for _, task_id in seen.values()
    }
    assert len(seen) == 2 and worker.stats.total().succeeded == 2


async def test_a_stubborn_body_is_abandoned_after_one_grace_on_the_injected_clock() -> None:
    clock = ManualClock()
    store, harness = InMemoryTaskStore(clock), Harness()
    released = asyncio.Event()
    ignored: list[int] = []

    async def stubborn(ctx: TaskExecutionContext, job: Job) -> int:
        while not released.is_set():
            try:
                await released.wait()
            except asyncio.CancelledError:
                ignored.append(1)  # ignores every cancellation
        return 0

    harness.actions["stubborn"] = stubborn
    await enqueue(store, new_task(Kind.MAIL, "stubborn"))
    worker = _worker(store, harness, clock, grace=timedelta(seconds=5))
    shutdown = CancellationToken()
    run = asyncio.create_task(worker.run(shutdown), name="test-worker")
    await until(lambda: "stubborn" in harness.started)
    shutdown.cancel()
    await until(lambda: worker.stopping)
    await clock.wait_for_sleepers(2)  # the heartbeat and the grace
    await clock.advance(4.9)
    assert not run.done()
    await clock.advance(0.1)  # exactly one grace
    await until(run.done)
    await run
    assert clock.monotonic() == 5.0
    assert ignored, "the body saw (and ignored) its cancellation"
    (row,) = store.all_tasks()
    assert any(task.get_name() == f"aster-forge:task-{row.id}" for task in abandoned_tasks())
    # Nothing written: the lease is left to expire, so the task is rescued later.
    assert row.status is TaskStatus.RUNNING and row.processing_token is not None
    total = worker.stats.total()
    assert (total.lease_lost, total.released_on_shutdown, total.in_flight) == (1, 0, 0)
    released.set()
    await until(lambda: not abandoned_tasks())


@pytest.fixture
async def db_store(engine: AsyncEngine) -> AsyncIterator[BackgroundTaskDbStore]:
    await create_background_tasks_table(engine)
    yield BackgroundTaskDbStore(engine)


@pytest.mark.parametrize("taken_over", [False, True], ids=["released", "refused"])
async def test_released_on_shutdown_counts_only_releases_the_store_applied(
    engine: AsyncEngine, db_store: BackgroundTaskDbStore, taken_over: bool
) -> None:
    harness = Harness()
    harness.gate("a")
    (result,) = await db_store.enqueue_many([new_task(Kind.MAIL, "a")])
    task_id = result.record.id
    worker = _worker(db_store, harness, SystemClock())
    shutdown = CancellationToken()
    run = asyncio.create_task(worker.run(shutdown), name="test-worker")
    async with asyncio.timeout(20):
        await until(lambda: "a" in harness.started, turns=10**7)
    if taken_over:
        # Another worker rescued the task (as after an expired lease): the fence changed.
        async with engine.begin() as conn:
            await conn.execute(
                sa.text("UPDATE background_tasks SET processing_token = 'other' WHERE id = :id"),
                {"id": task_id},
            )
    # The worker's shutdown is itself cancelled: each execution releases on cancellation.
    stopping = asyncio.create_task(worker.shutdown(), name="test-shutdown")
    await asyncio.sleep(0)
    stopping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopping
    shutdown.cancel()
    await run
    row = await db_store.get_task(task_id)
    assert row is not None
    total = worker.stats.total()
    if taken_over:
        assert (row.status, row.processing_token) == (TaskStatus.RUNNING, "other")
        assert (total.released_on_shutdown, total.lease_lost) == (0, 1)
    else:
        assert (row.status, row.attempt, row.processing_token) == (TaskStatus.PENDING, 0, None)
        assert (total.released_on_shutdown, total.lease_lost) == (1, 0)
    assert total.in_flight == 0 and total.finished == 1


async def test_finished_executions_are_freed_without_the_garbage_collector() -> None:
    # A reference cycle per execution leaves each finished one to the collector, which
    # cost about a sixth of the worker's CPU per task at concurrency 50.
    store, harness, clock = InMemoryTaskStore(), Harness(), ManualClock()
    worker = _worker(store, harness, clock)
    await enqueue(store, *(new_task(Kind.MAIL, f"m{i}") for i in range(6)))
    gc.collect()
    gc.disable()
    try:
        while len(harness.finished) < 6:
            await worker.drain()
            await worker.join()
        await worker.shutdown()
        left = [o for o in gc.get_objects() if isinstance(o, ClaimedTaskExecution)]
    finally:
        gc.enable()
    assert left == []


class _HeldClaimStore(InMemoryTaskStore):
    """Its claims wait for ``gate``: a claim can be in flight when the worker stops."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock)
        self.gate = asyncio.Event()
        self.claiming = asyncio.Event()

    async def claim_due_for_lane(  # type: ignore[override]
        self,
        lane: object,
        limit: int,
        owner: str,
        lease_ttl: timedelta,
        *,
        cluster_limit: int | None = None,
        partition_limit: int | None = None,
        rate_limit: TaskRateLimit | None = None,
        partition_rate_limit: TaskRateLimit | None = None,
    ) -> list[object]:
        self.claiming.set()
        await self.gate.wait()
        claimed = await super().claim_due_for_lane(
            lane,  # type: ignore[arg-type]
            limit,
            owner,
            lease_ttl,
            cluster_limit=cluster_limit,
            partition_limit=partition_limit,
            rate_limit=rate_limit,
            partition_rate_limit=partition_rate_limit,
        )
        return list(claimed)


async def test_shutdown_waits_for_a_claim_on_the_wire_and_releases_what_it_brings() -> None:
    # The claim was on the wire when the stop came (a drain beside the shutdown): the
    # shutdown waits for it, and the task it brings starts with its context already
    # cancelled and is released, written before the shutdown returns.
    clock = ManualClock()
    store, harness = _HeldClaimStore(clock), Harness()

    async def cooperative(ctx: TaskExecutionContext, job: Job) -> int:
        await ctx.sleep(3600)  # raises the shutdown error at once: the context is cancelled
        return 0

    harness.actions["late"] = cooperative
    (task_id,) = await enqueue(store, new_task(Kind.RENDER, "late"))
    worker = _worker(store, harness, clock)  # the drain claims the media lane first
    draining = asyncio.create_task(worker.drain(), name="test-drain")
    await store.claiming.wait()
    stopping = asyncio.create_task(worker.shutdown(), name="test-shutdown")
    await until(lambda: worker.stopping)
    for _ in range(50):
        await asyncio.sleep(0)
    assert not stopping.done(), "the shutdown waits for the claim on the wire"
    store.gate.set()
    await stopping
    assert draining.done()
    assert harness.started == ["late"]
    row = await store.get_task(task_id)
    assert row is not None
    assert (row.status, row.attempt, row.processing_token) == (TaskStatus.PENDING, 0, None)
    total = worker.stats.total()
    assert (total.claimed, total.released_on_shutdown, total.in_flight) == (1, 1, 0)


class _ErrorSeen(logging.Handler):
    """Sets ``seen`` on the first ERROR record (no polling, no sleeps)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.seen = asyncio.Event()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        self.seen.set()


async def test_a_crashed_loop_is_logged_and_recorded_before_its_tasks_are_released() -> None:
    clock = ManualClock()
    store, harness = InMemoryTaskStore(clock), Harness()
    harness.gate("held")
    (task_id,) = await enqueue(store, new_task(Kind.MAIL, "held"))
    worker = _worker(store, harness, clock, grace=timedelta(hours=1))
    errors = _ErrorSeen()
    log = logging.getLogger("aster_forge.tasks.dispatch")
    log.addHandler(errors)
    # The production failure: a poll setting of the wrong type reached the loop.
    wrong_poll: Any = timedelta(seconds=1)
    running = asyncio.create_task(
        worker.run(CancellationToken(), poll=wrong_poll), name="test:crashing-worker"
    )
    try:
        async with asyncio.timeout(10):
            await errors.seen.wait()
        assert isinstance(worker.crashed, AttributeError)
        (record,) = errors.records
        assert record.getMessage().startswith(
            "the task worker's loop crashed (AttributeError: 'datetime.timedelta' object has "
            "no attribute"
        )
        assert record.getMessage().endswith(
            "it claims nothing more and releases its 1 running tasks"
        )
        assert record.exc_info is not None and record.exc_info[1] is worker.crashed
        # Said while the claimed body still runs, not once the release is done.
        assert harness.started == ["held"] and harness.finished == []
        assert not running.done()
    finally:
        log.removeHandler(errors)
        harness.open("held")
        with pytest.raises(AttributeError):
            await running
    stored = await store.get_task(task_id)
    assert stored is not None and stored.status is TaskStatus.SUCCEEDED
