"""The dispatch worker loop: wake-ups, poll backoff, store errors, shutdown release."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta

import pytest

from aster_forge import BackgroundTaskRecord, TaskExecutionContext, TaskStatus
from aster_forge.runtime import CancellationToken
from aster_forge.tasks import DispatchPollConfig, TaskLaneConfig, TaskStoreBase, TaskWorker
from aster_forge.tasks._dispatch import DispatchWakeSignal
from aster_forge.tasks._rate_limit import TaskRateLimit, rate_window_end
from aster_forge.tasks.errors import TaskDispatchConfigError
from aster_forge.testing import InMemoryTaskStore, ManualClock

from ._dispatch_support import (
    Harness,
    Job,
    Kind,
    Lane,
    ProxyStore,
    enqueue,
    make_config,
    new_task,
    until,
)

SLOW_POLL = DispatchPollConfig(
    base_interval=timedelta(seconds=10), max_interval=timedelta(seconds=60)
)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def store(clock: ManualClock) -> InMemoryTaskStore:
    return InMemoryTaskStore(clock)


def _worker(
    store: TaskStoreBase[BackgroundTaskRecord, str],
    harness: Harness,
    clock: ManualClock,
    *,
    media: int = 2,
    fallback: int = 2,
    wake: DispatchWakeSignal | None = None,
    **options: object,
) -> TaskWorker[Harness]:
    return TaskWorker(
        store,
        lanes=[TaskLaneConfig(Lane.MEDIA, media), TaskLaneConfig(Lane.FALLBACK, fallback)],
        execution=make_config(harness, clock, **options),
        owner="worker-1",
        wake=wake,
    )


def _start(
    worker: TaskWorker[Harness],
    shutdown: CancellationToken,
    clock: ManualClock,
    *,
    poll: DispatchPollConfig = SLOW_POLL,
) -> asyncio.Task[None]:
    return asyncio.create_task(
        worker.run(shutdown, poll=poll, clock=clock), name="test-dispatch-worker"
    )


async def test_wake_makes_an_idle_worker_claim_immediately(
    store: InMemoryTaskStore, clock: ManualClock
) -> None:
    harness = Harness()
    external = DispatchWakeSignal()
    worker = _worker(store, harness, clock, wake=external)
    shutdown = CancellationToken()
    running = _start(worker, shutdown, clock)
    await until(lambda: store.claim_calls == 2)  # the first (empty) drain
    await clock.wait_for_sleepers(1)  # parked on the 10 s poll
    await enqueue(store, new_task(Kind.MAIL, "a"))
    worker.wake()
    await until(lambda: "a" in harness.finished)
    # An external signal (an enqueue hook, a NOTIFY listener) works the same way.
    await until(lambda: worker.in_flight() == 0)
    await clock.wait_for_sleepers(1)
    await enqueue(store, new_task(Kind.RENDER, "b"))
    external.wake()
    await until(lambda: "b" in harness.finished)
    assert clock.monotonic() == 0.0  # no poll interval elapsed
    shutdown.cancel()
    await running
    assert {row.status for row in store.all_tasks()} == {TaskStatus.SUCCEEDED}


async def test_a_wake_during_a_drain_is_not_lost(
    store: InMemoryTaskStore, clock: ManualClock
) -> None:
    signal = DispatchWakeSignal()

    def pending() -> bool:
        return signal.pending

    signal.wake()
    assert pending()
    await signal.wait()  # returns at once and consumes it
    assert not pending()
    waiter = asyncio.create_task(signal.wait(), name="test-wait")
    await asyncio.sleep(0)
    assert not waiter.done()
    signal.wake()
    await waiter
    assert "pending=False" in repr(signal)


async def test_freed_slot_of_a_full_lane_wakes_the_worker(
    store: InMemoryTaskStore, clock: ManualClock
) -> None:
    harness = Harness()
    harness.gate("r0")
    await enqueue(store, new_task(Kind.RENDER, "r0"), new_task(Kind.RENDER, "r1"))
    worker = _worker(store, harness, clock, media=1)
    shutdown = CancellationToken()
    running = _start(worker, shutdown, clock)
    await until(lambda: "r0" in harness.started)
    await clock.wait_for_sleepers(2)  # poll wait + the heartbeat of r0
    assert "r1" not in harness.started
    harness.open("r0")
    await until(lambda: "r1" in harness.finished)
    assert clock.monotonic() == 0.0
    shutdown.cancel()
    await running


async def test_empty_polls_and_store_errors_back_off_then_recover(
    store: InMemoryTaskStore, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    drains: list[float] = []

    class Timed(ProxyStore):
        async def claim_due_for_lane(
            self,
            lane: str,
            limit: int,
            owner: str,
            lease_ttl: timedelta,
            *,
            cluster_limit: int | None = None,
            partition_limit: int | None = None,
            rate_limit: TaskRateLimit | None = None,
            partition_rate_limit: TaskRateLimit | None = None,
        ) -> Sequence[BackgroundTaskRecord]:
            if not drains or drains[-1] != clock.monotonic():
                drains.append(clock.monotonic())
            return await super().claim_due_for_lane(
                lane,
                limit,
                owner,
                lease_ttl,
                cluster_limit=cluster_limit,
                partition_limit=partition_limit,
                rate_limit=rate_limit,
                partition_rate_limit=partition_rate_limit,
            )

    proxy = Timed(store)
    proxy.claim_errors = 3
    harness = Harness()
    worker = _worker(proxy, harness, clock)
    shutdown = CancellationToken()
    poll = DispatchPollConfig(
        base_interval=timedelta(seconds=1),
        max_interval=timedelta(seconds=4),
        error_max_interval=timedelta(seconds=8),
    )
    with caplog.at_level(logging.WARNING, logger="aster_forge.tasks.dispatch"):
        running = _start(worker, shutdown, clock, poll=poll)
        while clock.monotonic() < 20:
            await clock.wait_for_sleepers(1)
            await clock.advance(0.5)
        # errors: wait 2, 4, 8 (capped); then empty polls: 1, 2, 4, 4 (capped)
        assert drains == [0.0, 2.0, 6.0, 14.0, 15.0, 17.0]
        await clock.wait_for_sleepers(1)
        await enqueue(store, new_task(Kind.MAIL, "late"))
        while "late" not in harness.finished:
            await clock.wait_for_sleepers(1)
            await clock.advance(0.5)
        assert drains[-1] == 21.0
        await until(lambda: worker.in_flight() == 0)
        # Work resets the backoff: the next poll is one base interval later.
        while len(drains) < 8:
            await clock.wait_for_sleepers(1)
            await clock.advance(0.5)
        assert drains[-1] == 22.0
    shutdown.cancel()
    await running
    assert len([r for r in caplog.records if "claim failed" in r.getMessage()]) == 3
    assert worker.stats.total().claim_errors == 3


async def test_a_store_that_stages_waiting_tasks_is_asked_once_a_second(
    store: InMemoryTaskStore, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    staged_at: list[float] = []

    class Staging(ProxyStore):
        async def stage_waiting_tasks(self) -> int:
            staged_at.append(clock.monotonic())
            if len(staged_at) == 2:
                raise ConnectionError("database is down")
            return 0

    worker = _worker(Staging(store), Harness(), clock)
    shutdown = CancellationToken()
    poll = DispatchPollConfig(
        base_interval=timedelta(seconds=0.25), max_interval=timedelta(seconds=0.25)
    )
    with caplog.at_level(logging.WARNING, logger="aster_forge.tasks.dispatch"):
        running = _start(worker, shutdown, clock, poll=poll)
        while clock.monotonic() < 3.5:
            await clock.wait_for_sleepers(1)
            await clock.advance(0.25)
        # Drains every 0.25 s; staging at most once a second, and a failure stops nothing.
        assert staged_at == [0.0, 1.0, 2.0, 3.0]
        await clock.wait_for_sleepers(1)
        await enqueue(store, new_task(Kind.MAIL, "after"))
        worker.wake()
        await until(lambda: worker.in_flight() == 0 and store.all_tasks()[0].status.is_terminal)
    shutdown.cancel()
    await running
    assert len([r for r in caplog.records if "claims still find them" in r.getMessage()]) == 1


async def test_shutdown_releases_in_flight_tasks_without_counting(
    store: InMemoryTaskStore, clock: ManualClock
) -> None:
    harness = Harness()

    async def cooperative(ctx: TaskExecutionContext, job: Job) -> int:
        await ctx.cancellation.wait()
        ctx.ensure_active()  # raises the shutdown error
        return 0

    harness.actions.update(c1=cooperative, c2=cooperative)
    harness.gate("stubborn")
    await enqueue(
        store,
        new_task(Kind.RENDER, "c1"),
        new_task(Kind.MAIL, "c2"),
        new_task(Kind.MAIL, "stubborn"),
        new_task(Kind.MAIL, "queued"),
    )
    worker = _worker(
        store, harness, clock, media=1, fallback=2, shutdown_grace=timedelta(seconds=3)
    )
    shutdown = CancellationToken()
    running = _start(worker, shutdown, clock)
    await until(lambda: len(harness.started) == 3)
    shutdown.cancel()
    await until(lambda: "c1" in harness.finished and "c2" in harness.finished)
    # The stubborn body ignores its context: it gets the 3 s grace on the manual clock.
    while not running.done():
        assert "stubborn" not in harness.finished or clock.monotonic() >= 3
        await clock.advance(0.5)
        assert clock.monotonic() <= 5, "the grace period was not honoured"
    await running
    assert clock.monotonic() >= 3
    assert worker.in_flight() == 0
    rows = {row.id: row for row in store.all_tasks()}
    assert all(row.status is TaskStatus.PENDING for row in rows.values())
    assert all(row.attempt == 0 and row.last_error is None for row in rows.values())
    assert "queued" not in harness.started
    assert worker.stats.total().released_on_shutdown == 3
    assert worker.stopping


async def test_cancelling_the_worker_still_releases_and_joins(
    store: InMemoryTaskStore, clock: ManualClock
) -> None:
    harness = Harness()
    harness.gate("g")
    await enqueue(store, new_task(Kind.MAIL, "g"))
    worker = _worker(store, harness, clock)
    running = _start(worker, CancellationToken(), clock)
    await until(lambda: "g" in harness.started)
    await clock.wait_for_sleepers(2)
    running.cancel()
    # The body ignores its context: the default 10 s grace runs on the manual clock.
    while not running.done():
        await clock.advance(1)
        assert clock.monotonic() <= 12, "the worker did not finish after the grace period"
    with pytest.raises(asyncio.CancelledError):
        await running
    (row,) = store.all_tasks()
    assert (row.status, row.attempt) == (TaskStatus.PENDING, 0)
    assert worker.in_flight() == 0


async def test_invalid_payload_fails_and_the_worker_keeps_going(
    store: InMemoryTaskStore, clock: ManualClock
) -> None:
    harness = Harness()
    await enqueue(
        store,
        new_task(Kind.MAIL, "bad", payload='{"name": 5}'),
        new_task(Kind.MAIL, "good"),
    )
    worker = _worker(store, harness, clock)
    shutdown = CancellationToken()
    running = _start(worker, shutdown, clock)
    await until(lambda: "good" in harness.finished and worker.in_flight() == 0)
    shutdown.cancel()
    await running
    bad, good = store.all_tasks()
    assert bad.status is TaskStatus.FAILED and bad.last_error is not None
    assert "mail" in bad.last_error and "'name'" in bad.last_error
    assert good.status is TaskStatus.SUCCEEDED
    stats = worker.stats.lane(Lane.FALLBACK)
    assert (stats.failed_permanently, stats.succeeded) == (1, 1)


async def _spent_media_lane_waits_for_its_window(
    store: InMemoryTaskStore, clock: ManualClock, media: TaskLaneConfig, spent: str
) -> None:
    """Run a worker with ``media`` (whose budget lets two tasks start per 30 s window)
    and a fallback lane polled every second: the media lane claims nothing more until
    the window ends while the fallback's polls go on; then it claims once more and two
    more tasks run."""
    harness = Harness()
    proxy = ProxyStore(store)
    worker = TaskWorker(
        proxy,
        lanes=[media, TaskLaneConfig(Lane.FALLBACK, 1)],
        execution=make_config(harness, clock),
        owner="worker-1",
    )
    every_second = DispatchPollConfig(
        base_interval=timedelta(seconds=1), max_interval=timedelta(seconds=1)
    )
    shutdown = CancellationToken()
    running = _start(worker, shutdown, clock, poll=every_second)
    await until(lambda: len(harness.finished) == 2)
    await clock.wait_for_sleepers(1)
    media_claims = proxy.claim_lanes.count(Lane.MEDIA)
    fallback_claims = proxy.claim_lanes.count(Lane.FALLBACK)
    left = rate_window_end(clock.now(), _RATE_PERIOD) - clock.now()
    for _ in range(int(left.total_seconds()) - 1):
        await clock.advance(1)
        await clock.wait_for_sleepers(1)
    assert proxy.claim_lanes.count(Lane.MEDIA) == media_claims, f"polled {spent}"
    assert proxy.claim_lanes.count(Lane.FALLBACK) > fallback_claims  # the loop kept polling
    assert len(harness.finished) == 2
    await clock.advance(1)  # the window ends: the budget refills
    await until(lambda: len(harness.finished) == 4)
    assert proxy.claim_lanes.count(Lane.MEDIA) == media_claims + 1
    shutdown.cancel()
    await running


_RATE_PERIOD = timedelta(seconds=30)


async def test_a_rate_limited_lane_sleeps_until_its_window_refills(
    store: InMemoryTaskStore, clock: ManualClock
) -> None:
    """A lane whose rate budget is spent claims nothing more until its window ends,
    while the worker's 1 s polls of its other lane go on; then it takes the new budget."""
    await enqueue(store, *(new_task(Kind.RENDER, f"r{i}") for i in range(5)))
    media = TaskLaneConfig(Lane.MEDIA, 5, rate_limit=(2, _RATE_PERIOD))
    await _spent_media_lane_waits_for_its_window(store, clock, media, "a spent budget")


async def test_a_spent_partition_rate_sleeps_until_the_partitions_refill(
    store: InMemoryTaskStore, clock: ManualClock
) -> None:
    """Each partition's budget spent (one start per window each), the lane claims
    nothing more until the window ends, while the other lane's polls go on; then each
    partition starts one more."""
    await enqueue(
        store,
        *(
            replace(new_task(Kind.RENDER, f"{tenant}{i}"), partition=tenant)
            for tenant in ("a", "b")
            for i in range(3)
        ),
    )
    media = TaskLaneConfig(Lane.MEDIA, 5, partition_rate_limit=(1, _RATE_PERIOD))
    await _spent_media_lane_waits_for_its_window(store, clock, media, "spent partitions")


def _rated_worker(
    store: TaskStoreBase[BackgroundTaskRecord, str],
    harness: Harness,
    clock: ManualClock,
    rate: tuple[int, timedelta],
) -> TaskWorker[Harness]:
    return TaskWorker(
        store,
        lanes=[
            TaskLaneConfig(Lane.MEDIA, 5, rate_limit=rate),
            TaskLaneConfig(Lane.FALLBACK, 1),
        ],
        execution=make_config(harness, clock),
        owner="worker-1",
    )


async def test_a_spent_rate_ends_a_long_poll_wait_at_the_refill(
    store: InMemoryTaskStore, clock: ManualClock
) -> None:
    """With a 60 s poll, the worker still wakes when the 30 s window refills."""
    harness = Harness()
    period = timedelta(seconds=30)
    await enqueue(store, *(new_task(Kind.RENDER, f"r{i}") for i in range(4)))
    worker = _rated_worker(store, harness, clock, (2, period))
    slow = DispatchPollConfig(
        base_interval=timedelta(seconds=60), max_interval=timedelta(seconds=60)
    )
    shutdown = CancellationToken()
    running = _start(worker, shutdown, clock, poll=slow)
    await until(lambda: len(harness.finished) == 2)
    await clock.wait_for_sleepers(1)
    await clock.advance(rate_window_end(clock.now(), period) - clock.now())
    await until(lambda: len(harness.finished) == 4)
    assert clock.monotonic() == period.total_seconds()
    shutdown.cancel()
    await running


async def test_a_wake_lets_a_rate_limited_lane_start_new_work_at_once(
    store: InMemoryTaskStore, clock: ManualClock
) -> None:
    """A short claim that left budget (the queue was empty) does not hold back a task
    enqueued next: the enqueue's wake-up claims it without waiting for the window."""
    harness = Harness()
    await enqueue(store, new_task(Kind.RENDER, "first"))
    worker = _rated_worker(store, harness, clock, (5, timedelta(seconds=30)))
    shutdown = CancellationToken()
    running = _start(worker, shutdown, clock)
    await until(lambda: "first" in harness.finished)
    await clock.wait_for_sleepers(1)
    await enqueue(store, new_task(Kind.RENDER, "second"))
    worker.wake()
    await until(lambda: "second" in harness.finished)
    assert clock.monotonic() == 0.0
    shutdown.cancel()
    await running


@pytest.mark.parametrize("bad", [(0, timedelta(seconds=1)), (1, timedelta(0)), 3])
def test_a_bad_partition_rate_limit_is_a_config_error(bad: object) -> None:
    with pytest.raises(TaskDispatchConfigError, match=r"lane .*: partition_rate_limit"):
        TaskLaneConfig(Lane.MEDIA, 1, partition_rate_limit=bad)  # type: ignore[arg-type]
