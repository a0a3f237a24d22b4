"""Lane dispatch: limits, no starvation, round-robin, stats, backoff, over-claim defence."""

from __future__ import annotations

import random
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pytest

from aster_forge import BackgroundTaskRecord, TaskStatus
from aster_forge.tasks import (
    ClaimedTaskOutcome,
    DispatchPollConfig,
    DispatchStatsRecorder,
    TaskLaneConfig,
    TaskStoreBase,
    TaskWorker,
)
from aster_forge.tasks._dispatch import (
    DispatchBackoff,
    DispatchStats,
    default_dispatch_owner,
    effective_dispatch_base_interval,
)
from aster_forge.tasks._rate_limit import TaskRateLimit
from aster_forge.tasks.errors import TaskDispatchConfigError
from aster_forge.testing import InMemoryTaskStore, ManualClock

from ._dispatch_support import (
    Harness,
    Kind,
    Lane,
    ProxyStore,
    enqueue,
    make_config,
    new_task,
    until,
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
    media: int,
    fallback: int,
    **lane_options: Any,
) -> TaskWorker[Harness]:
    return TaskWorker(
        store,
        lanes=[
            TaskLaneConfig(Lane.MEDIA, media, **lane_options),
            TaskLaneConfig(Lane.FALLBACK, fallback, **lane_options),
        ],
        execution=make_config(harness, clock),
        owner="worker-1",
    )


async def test_lane_limits_are_never_exceeded(store: InMemoryTaskStore, clock: ManualClock) -> None:
    harness = Harness()
    renders = [f"r{i}" for i in range(10)]
    mails = [f"m{i}" for i in range(10)]
    harness.gate(*renders, *mails)
    await enqueue(store, *(new_task(Kind.RENDER, n) for n in renders))
    await enqueue(store, *(new_task(Kind.MAIL, n) for n in mails))
    worker = _worker(store, harness, clock, media=2, fallback=3)

    result = await worker.drain()
    assert result.claimed == {Lane.MEDIA: 2, Lane.FALLBACK: 3}
    assert result.saturated == {Lane.MEDIA, Lane.FALLBACK}
    await until(lambda: len(harness.started) == 5)
    # A second drain with every lane full claims nothing and makes no round trip.
    calls = store.claim_calls
    assert (await worker.drain()).total == 0
    assert store.claim_calls == calls

    rng = random.Random(7)
    while len(harness.finished) < 20:
        # Every claimed task has entered its body before we pick one to finish.
        await until(lambda: len(harness.started) - len(harness.finished) == worker.in_flight())
        running = [n for n in harness.started if n not in harness.finished]
        harness.open(rng.choice(running))
        done = len(harness.finished)
        await until(lambda done=done: len(harness.finished) > done)  # type: ignore[misc]
        await worker.drain()
        assert worker.in_flight(Lane.MEDIA) <= 2
        assert worker.in_flight(Lane.FALLBACK) <= 3
        assert harness.running["media"] <= 2 and harness.running["fallback"] <= 3
    await worker.join()
    assert harness.max_running == {"media": 2, "fallback": 3}
    assert sorted(harness.started) == sorted(renders + mails)  # each exactly once
    assert {row.status for row in store.all_tasks()} == {TaskStatus.SUCCEEDED}
    total = worker.stats.total()
    assert (total.claimed, total.succeeded, total.in_flight) == (20, 20, 0)


async def test_a_busy_lane_never_starves_another(
    store: InMemoryTaskStore, clock: ManualClock
) -> None:
    harness = Harness()
    renders = [f"r{i}" for i in range(5)]
    harness.gate(*renders)  # the media lane is stuck on long renders
    await enqueue(store, *(new_task(Kind.RENDER, n) for n in renders))
    mails = [f"m{i}" for i in range(6)]
    await enqueue(store, *(new_task(Kind.MAIL, n) for n in mails))
    worker = _worker(store, harness, clock, media=1, fallback=2)
    while len([n for n in harness.finished if n.startswith("m")]) < 6:
        await worker.drain()
        # A slot frees when the body returns; the task is done once its success is written.
        await until(lambda: all(t.lane != Lane.FALLBACK for t in worker.in_flight_tasks()))
    assert harness.started.count("r0") == 1
    assert [n for n in harness.started if n.startswith("r")] == ["r0"]
    assert worker.in_flight(Lane.MEDIA) == 1
    assert worker.stats.lane(Lane.FALLBACK).succeeded == 6
    harness.open(*renders)
    await worker.shutdown()


async def test_lanes_are_claimed_round_robin(store: InMemoryTaskStore, clock: ManualClock) -> None:
    proxy = ProxyStore(store)
    harness = Harness()
    names = [f"r{i}" for i in range(3)] + [f"m{i}" for i in range(3)]
    harness.gate(*names)
    await enqueue(store, *(new_task(Kind.RENDER, f"r{i}") for i in range(3)))
    await enqueue(store, *(new_task(Kind.MAIL, f"m{i}") for i in range(3)))
    worker = _worker(proxy, harness, clock, media=3, fallback=3, claim_batch=1)
    await worker.drain()
    assert proxy.claim_lanes == ["media", "fallback"] * 3
    harness.open("r0", "m0")
    await until(lambda: worker.in_flight() == 4)
    proxy.claim_lanes.clear()
    await worker.drain()
    # The next drain starts one lane later.
    assert proxy.claim_lanes == ["fallback", "media"]
    harness.open(*names)
    await worker.shutdown()


async def test_claims_record_latency_lag_and_rescues(
    store: InMemoryTaskStore, clock: ManualClock
) -> None:
    class SlowClaim(ProxyStore):
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
            await clock.advance(0.25)
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

    stats = DispatchStatsRecorder()
    harness = Harness()
    harness.gate("a", "b")
    slow = SlowClaim(store)
    config = make_config(harness, clock, lease_ttl=timedelta(seconds=2))
    first = TaskWorker(
        slow,
        lanes=[TaskLaneConfig(Lane.FALLBACK, 1)],
        execution=config,
        stats=stats,
        partial_lanes=True,
    )
    a, b = await enqueue(store, new_task(Kind.MAIL, "a"), new_task(Kind.MAIL, "b"))
    await clock.advance(5)
    assert (await first.drain()).claimed == {Lane.FALLBACK: 1}
    lane = stats.lane(Lane.FALLBACK)
    assert lane.claimed == 1 and lane.claim_calls == 1 and lane.rescued == 0
    assert lane.last_claim_latency_seconds == pytest.approx(0.25)
    assert lane.queue_lag_seconds == pytest.approx(5.25)
    # The first worker loses its database: its lease expires and the next claim rescues it.
    slow.renew_error = ConnectionError("database is down")
    await clock.advance(3)
    second = TaskWorker(
        store,
        lanes=[TaskLaneConfig(Lane.FALLBACK, 5)],
        execution=config,
        stats=stats,
        partial_lanes=True,
    )
    assert (await second.drain()).claimed == {Lane.FALLBACK: 2}
    assert [task.task_id for task in second.in_flight_tasks()] == [a, b]
    lane = stats.lane(Lane.FALLBACK)
    assert (lane.claimed, lane.rescued, lane.claim_calls) == (3, 1, 2)
    assert lane.claim_latency_seconds_max == pytest.approx(0.25)
    harness.open("a", "b")
    await first.shutdown()
    await second.shutdown()


async def test_claim_errors_are_counted_and_raised(
    store: InMemoryTaskStore, clock: ManualClock
) -> None:
    proxy = ProxyStore(store)
    proxy.claim_errors = 1
    stats = DispatchStatsRecorder()
    worker = TaskWorker(
        proxy,
        lanes=[TaskLaneConfig(Lane.MEDIA, 1)],
        execution=make_config(Harness(), clock),
        stats=stats,
        partial_lanes=True,
    )
    with pytest.raises(ConnectionError):
        await worker.drain()
    lane = stats.lane(Lane.MEDIA)
    assert (lane.claim_calls, lane.claim_errors, lane.claim_latency_seconds_mean) == (1, 1, 0.0)


async def test_over_claiming_store_is_contained(
    store: InMemoryTaskStore, clock: ManualClock
) -> None:
    proxy = ProxyStore(store)
    proxy.extra_claims = 2
    harness = Harness()
    names = [f"r{i}" for i in range(4)]
    harness.gate(*names)
    await enqueue(store, *(new_task(Kind.RENDER, n) for n in names))
    worker = _worker(proxy, harness, clock, media=1, fallback=1)
    await worker.drain()
    assert worker.in_flight(Lane.MEDIA) == 1
    statuses = [row.status for row in store.all_tasks()]
    assert statuses.count(TaskStatus.RUNNING) == 1
    assert all(row.attempt == 0 for row in store.all_tasks())
    harness.open(*names)
    await worker.shutdown()


async def test_outcomes_are_counted_per_lane(store: InMemoryTaskStore, clock: ManualClock) -> None:
    from aster_forge import ClassifiedTaskError, TaskExecutionContext, TaskRetryClass

    from ._dispatch_support import Job

    harness = Harness()

    async def permanent(ctx: TaskExecutionContext, job: Job) -> int:
        raise ClassifiedTaskError("no", TaskRetryClass.PERMANENT)

    async def retry(ctx: TaskExecutionContext, job: Job) -> int:
        raise ClassifiedTaskError("later")

    harness.actions.update(p=permanent, t=retry)
    await enqueue(store, *(new_task(Kind.MAIL, n) for n in ("ok", "p", "t")))
    await enqueue(store, new_task(Kind.RENDER, "ok2"))
    worker = _worker(store, harness, clock, media=4, fallback=4)
    await worker.drain()
    await worker.join()
    fallback = worker.stats.lane(Lane.FALLBACK)
    assert (fallback.succeeded, fallback.failed_permanently, fallback.retried) == (1, 1, 1)
    assert fallback.finished == 3
    total = worker.stats.total()
    assert (total.claimed, total.succeeded, total.finished) == (4, 2, 4)
    assert set(worker.stats.lanes()) == {Lane.MEDIA, Lane.FALLBACK}


def test_stats_combine_sums_and_takes_maxima() -> None:
    a = DispatchStats(claimed=2, claim_latency_seconds_max=0.5, queue_lag_seconds=3.0)
    b = DispatchStats(claimed=3, claim_latency_seconds_max=0.2, queue_lag_seconds=7.0)
    total = DispatchStats.combine([a, b])
    assert (total.claimed, total.claim_latency_seconds_max, total.queue_lag_seconds) == (
        5,
        0.5,
        7.0,
    )
    recorder = DispatchStatsRecorder()
    recorder.record_started("x")
    recorder.record_outcome("x", ClaimedTaskOutcome.RELEASED)
    assert recorder.lane("x").released_on_shutdown == 1
    assert recorder.lane("never") == DispatchStats()


def test_effective_base_interval_clamps_zero() -> None:
    assert effective_dispatch_base_interval(timedelta(0)) == timedelta(seconds=1)
    assert effective_dispatch_base_interval(timedelta(milliseconds=50)) == timedelta(
        milliseconds=50
    )
    with pytest.raises(TaskDispatchConfigError):
        effective_dispatch_base_interval(timedelta(seconds=-1))


def test_backoff_grows_on_empty_polls_and_errors_and_resets_on_work() -> None:
    backoff = DispatchBackoff(
        DispatchPollConfig(
            base_interval=timedelta(0),
            max_interval=timedelta(seconds=10),
            error_max_interval=timedelta(seconds=20),
        )
    )
    assert [backoff.record_empty().total_seconds() for _ in range(6)] == [1, 2, 4, 8, 10, 10]
    assert backoff.record_work() == timedelta(seconds=1)
    assert [backoff.record_error().total_seconds() for _ in range(6)] == [2, 4, 8, 16, 20, 20]
    assert backoff.record_busy() == timedelta(seconds=1)
    assert backoff.record_empty() == timedelta(seconds=1)
    # A very long streak saturates at the cap instead of overflowing.
    for _ in range(500):
        backoff.record_error()
    assert backoff.record_error() == timedelta(seconds=20)


def test_configuration_errors() -> None:
    with pytest.raises(TaskDispatchConfigError):
        TaskLaneConfig(Lane.MEDIA, 0)
    with pytest.raises(TaskDispatchConfigError):
        TaskLaneConfig(Lane.MEDIA, 1, claim_batch=0)
    with pytest.raises(TaskDispatchConfigError):
        DispatchPollConfig(base_interval=timedelta(seconds=5), max_interval=timedelta(seconds=1))
    with pytest.raises(TaskDispatchConfigError):
        DispatchPollConfig(multiplier=0.5)
    clock = ManualClock()
    config = make_config(Harness(), clock)
    store = InMemoryTaskStore(clock)
    with pytest.raises(TaskDispatchConfigError):
        TaskWorker(store, lanes=[], execution=config)
    with pytest.raises(TaskDispatchConfigError):
        TaskWorker(
            store,
            lanes=[TaskLaneConfig(Lane.MEDIA, 1), TaskLaneConfig(Lane.MEDIA, 2)],
            execution=config,
        )
    worker = TaskWorker(
        store, lanes=[TaskLaneConfig(Lane.MEDIA, 1)], execution=config, partial_lanes=True
    )
    with pytest.raises(TaskDispatchConfigError):
        worker.free_slots(Lane.FALLBACK)
    assert "media" in repr(worker).lower()


def test_default_owner_is_unique_per_call() -> None:
    first, second = default_dispatch_owner(), default_dispatch_owner()
    assert first != second
    assert first.rsplit(":", 1)[0] == second.rsplit(":", 1)[0]
