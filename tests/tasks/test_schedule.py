"""The scheduled catalog runner on an in-memory store and a manual clock."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta

import pytest

from aster_forge.runtime import CancellationToken
from aster_forge.tasks import IntervalSchedule, ScheduledTaskOutcome, scheduled_task_dedupe_key
from aster_forge.tasks._scheduled import (
    SCHEDULED_TASK_RAISED,
    run_scheduled_claim_renewal_loop,
    run_scheduled_periodic_task,
)
from aster_forge.tasks._schedules import (
    ScheduledPeriodicTask,
    ScheduledTaskRunStatus,
    scheduled_claim_renew_interval,
)
from aster_forge.tasks.errors import (
    PeriodicTaskConfigError,
    ScheduledTaskValueError,
    TaskDedupeKeyError,
)
from aster_forge.testing import InMemoryScheduledTaskStore, ManualClock

from ._schedule_support import Body, FlakyStore, start_runner, until

NS = "shop"
T0 = datetime(2030, 1, 1, tzinfo=UTC)


def _task(
    owner: str = "a",
    *,
    every: timedelta = timedelta(seconds=10),
    claim_ttl: timedelta = timedelta(seconds=30),
) -> ScheduledPeriodicTask:
    return ScheduledPeriodicTask(
        namespace=NS,
        name="cleanup",
        owner_id=owner,
        schedule=IntervalSchedule(every=every),
        claim_ttl=claim_ttl,
    )


def test_renew_interval_is_a_third_with_a_10ms_floor() -> None:
    assert scheduled_claim_renew_interval(timedelta(seconds=120)) == timedelta(seconds=40)
    assert scheduled_claim_renew_interval(timedelta(seconds=3)) == timedelta(seconds=1)
    assert scheduled_claim_renew_interval(timedelta(milliseconds=15)) == timedelta(milliseconds=10)
    assert scheduled_claim_renew_interval(timedelta(microseconds=1)) == timedelta(milliseconds=10)
    with pytest.raises(ScheduledTaskValueError):
        scheduled_claim_renew_interval(timedelta(0))


def test_next_run_is_the_first_grid_point_after_the_claim() -> None:
    hour = timedelta(hours=1)
    hourly = IntervalSchedule(every=hour)
    assert hourly.following_run_at(T0, T0 + timedelta(seconds=2)) == T0 + hour
    assert hourly.following_run_at(T0, T0) == T0 + hour
    # Missed for 5 hours: one run now, the next one on the following grid point.
    assert hourly.following_run_at(T0, T0 + 5 * hour + timedelta(minutes=1)) == T0 + 6 * hour
    # Saturates instead of overflowing.
    far = IntervalSchedule(every=timedelta(days=3_000_000)).following_run_at(T0, T0)
    assert far.year == 9999


def test_task_validation() -> None:
    with pytest.raises(ScheduledTaskValueError):
        _task(owner="")
    with pytest.raises(ScheduledTaskValueError):
        _task(claim_ttl=timedelta(0))
    with pytest.raises(PeriodicTaskConfigError):
        _task(every=timedelta(seconds=-1))
    with pytest.raises(TaskDedupeKeyError):
        ScheduledPeriodicTask(
            namespace="n" * 65,
            name="x",
            owner_id="a",
            schedule=IntervalSchedule(every=timedelta(seconds=1)),
        )


async def test_runs_each_grid_firing_once_with_its_dedupe_key() -> None:
    clock = ManualClock(T0)
    store = InMemoryScheduledTaskStore(clock)
    body = Body(clock)
    token = CancellationToken()
    runner = start_runner(store, _task(), body, token, clock)
    await until(lambda: len(body.recorded) == 1)
    for n in range(2, 5):
        await clock.wait_for_sleepers(1)
        await clock.advance(10)
        await until(lambda n=n: len(body.recorded) == n)  # type: ignore[misc]
    expected = [
        scheduled_task_dedupe_key(NS, "cleanup", T0 + i * timedelta(seconds=10)) for i in range(4)
    ]
    assert [r.dedupe_key for r in body.runs] == expected
    assert [r.scheduled_at for r in body.runs] == [T0 + i * timedelta(seconds=10) for i in range(4)]
    record = await store.get_scheduled_task(NS, "cleanup")
    assert record is not None
    assert record.run_count == 4 and record.claimed_by is None
    assert record.next_run_at == T0 + timedelta(seconds=40)
    assert record.last_run_status is ScheduledTaskRunStatus.SUCCEEDED
    assert [o for _, o, _ in body.recorded] == ["done"] * 4
    token.cancel()
    await asyncio.wait_for(runner, 5)


async def test_two_instances_run_each_firing_exactly_once() -> None:
    clock = ManualClock(T0)
    store = InMemoryScheduledTaskStore(clock)
    body = Body(clock)
    token = CancellationToken()
    runners = [start_runner(store, _task(owner), body, token, clock) for owner in ("a", "b")]
    await until(lambda: len(body.runs) == 1)
    for _ in range(20):
        await clock.wait_for_sleepers(2)
        await clock.advance(1)
    await until(lambda: len(body.runs) == 3)
    assert len(set(body.keys())) == len(body.keys()) == 3
    assert {r.task.owner_id for r in body.runs} <= {"a", "b"}
    token.cancel()
    await asyncio.wait_for(asyncio.gather(*runners), 5)


async def test_body_outliving_claim_ttl_is_not_run_elsewhere_thanks_to_renewal() -> None:
    clock = ManualClock(T0)
    store = FlakyStore(InMemoryScheduledTaskStore(clock))
    slow = Body(clock, seconds=100)  # claim_ttl is 30 s
    other = Body(clock)
    token = CancellationToken()
    first = start_runner(store, _task("a"), slow, token, clock)
    await slow.started.wait()
    second = start_runner(store, _task("b"), other, token, clock)
    for _ in range(99):
        await clock.advance(1)
    token.cancel()  # stop both loops once this firing completes
    await clock.advance(1)
    await until(lambda: len(slow.finished) == 1)
    await asyncio.wait_for(asyncio.gather(first, second), 5)
    assert other.runs == []  # never re-claimed while "a" renewed
    assert store.renewals >= 9  # every 10 s during 100 s
    record = await store.get_scheduled_task(NS, "cleanup")
    assert record is not None and record.run_count == 1
    # The 100 s run covered 10 grid points: the next firing is the first one after the claim.
    assert record.next_run_at == T0 + timedelta(seconds=10)


async def test_crash_mid_body_lets_another_instance_rerun_the_same_firing_after_ttl() -> None:
    clock = ManualClock(T0)
    store = InMemoryScheduledTaskStore(clock)
    crashed = Body(clock, seconds=1000)
    survivor = Body(clock)
    token = CancellationToken()
    first = start_runner(store, _task("a"), crashed, token, clock)
    await crashed.started.wait()
    first.cancel()  # the process died: no renewal, no completion
    with pytest.raises(asyncio.CancelledError):
        await first
    second = start_runner(store, _task("b"), survivor, token, clock)
    await clock.wait_for_sleepers(1)
    await clock.advance(29)
    await asyncio.sleep(0)
    assert survivor.runs == []
    for _ in range(3):
        await clock.advance(1)
    await until(lambda: len(survivor.runs) == 1)
    # Same firing, same dedupe key: the product's unique key absorbs the re-run.
    assert survivor.keys() == crashed.keys()
    token.cancel()
    await asyncio.wait_for(second, 5)


async def test_renewal_false_stops_renewing_but_never_cancels_the_body(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = ManualClock(T0)
    store = FlakyStore(InMemoryScheduledTaskStore(clock))
    store.renew_results = [False]
    body = Body(clock, seconds=50)
    token = CancellationToken()
    runner = start_runner(store, _task(), body, token, clock)
    await body.started.wait()
    for _ in range(50):
        await clock.advance(1)
    await until(lambda: len(body.finished) >= 1)
    assert store.renewals == 1  # stopped after False
    assert any("no longer ours" in r.getMessage() for r in caplog.records)
    token.cancel()
    await asyncio.wait_for(runner, 5)


async def test_completion_after_takeover_is_refused_by_the_ownership_check(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = ManualClock(T0)
    inner = InMemoryScheduledTaskStore(clock)
    store = FlakyStore(inner)
    store.renew_results = [False]  # renewal "lost": the claim expires and b takes over
    slow = Body(clock, seconds=45)
    other = Body(clock, seconds=1000)
    token = CancellationToken()
    first = start_runner(store, _task("a"), slow, token, clock)
    await slow.started.wait()
    second = start_runner(inner, _task("b"), other, token, clock)
    for _ in range(45):
        await clock.advance(1)
    await until(lambda: len(slow.finished) == 1)
    assert other.keys() == slow.keys()  # b re-claimed the expired firing
    record = await inner.get_scheduled_task(NS, "cleanup")
    assert record is not None and record.claimed_by == "b" and record.run_count == 0
    assert any("claimed by another runtime" in r.getMessage() for r in caplog.records)
    token.cancel()
    first.cancel()
    second.cancel()
    await asyncio.gather(first, second, return_exceptions=True)


async def test_renewal_errors_are_logged_at_warning_and_retried_next_tick(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = ManualClock(T0)
    store = FlakyStore(InMemoryScheduledTaskStore(clock))
    store.renew_results = [OSError("db blip"), OSError("db blip")]
    body = Body(clock, seconds=45)
    token = CancellationToken()
    runner = start_runner(store, _task(), body, token, clock)
    await body.started.wait()
    for _ in range(45):
        await clock.advance(1)
    await until(lambda: len(body.finished) >= 1)
    assert store.renewals == 4  # two failures, then renewals resumed
    warnings = [r for r in caplog.records if "renewal failed" in r.getMessage()]
    assert len(warnings) == 2 and all(r.levelno == logging.WARNING for r in warnings)
    token.cancel()
    await asyncio.wait_for(runner, 5)
    record = await store.get_scheduled_task(NS, "cleanup")
    # The 45 s run, then the catch-up firing due at completion (T0 + 10 s), ran once each.
    assert record is not None and record.run_count == len(body.finished) == 2


async def test_missed_firings_while_everyone_was_down_run_once() -> None:
    clock = ManualClock(T0)
    store = InMemoryScheduledTaskStore(clock)
    await store.ensure_scheduled_task(NS, "cleanup", IntervalSchedule(every=timedelta(seconds=10)))
    await clock.advance(95)  # 10 firings missed
    body = Body(clock)
    token = CancellationToken()
    runner = start_runner(store, _task(), body, token, clock)
    await until(lambda: len(body.runs) == 1)
    await clock.wait_for_sleepers(1)
    await clock.advance(4.9)
    assert len(body.runs) == 1
    await clock.advance(0.1)
    await until(lambda: len(body.runs) == 2)
    assert [r.scheduled_at for r in body.runs] == [T0, T0 + timedelta(seconds=100)]
    token.cancel()
    await asyncio.wait_for(runner, 5)


async def test_body_exception_records_the_product_outcome_and_fixed_catalog_text(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = ManualClock(T0)
    store = InMemoryScheduledTaskStore(clock)
    body = Body(clock, fail=True)
    token = CancellationToken()
    runner = start_runner(store, _task(), body, token, clock)
    await until(lambda: len(body.recorded) == 1)
    token.cancel()
    await asyncio.wait_for(runner, 5)
    assert body.recorded[0][1] == "failed:RuntimeError"
    record = await store.get_scheduled_task(NS, "cleanup")
    assert record is not None
    assert record.last_run_status is ScheduledTaskRunStatus.FAILED
    assert record.last_run_error == SCHEDULED_TASK_RAISED  # never the exception message
    assert any(r.levelno == logging.ERROR for r in caplog.records)


class _ProductOutcome:
    def __init__(self, ok: bool) -> None:
        self.ok = ok

    def scheduled_task_outcome(self) -> ScheduledTaskOutcome:
        return ScheduledTaskOutcome.succeeded() if self.ok else ScheduledTaskOutcome.failed("quota")


@pytest.mark.parametrize(
    ("outcome", "status", "error"),
    [
        (ScheduledTaskOutcome.failed("product says no"), "failed", "product says no"),
        (_ProductOutcome(False), "failed", "quota"),
        (_ProductOutcome(True), "succeeded", None),
        ("anything else", "succeeded", None),
    ],
)
async def test_catalog_outcome_follows_the_product_outcome(
    outcome: object, status: str, error: str | None
) -> None:
    clock = ManualClock(T0)
    store = InMemoryScheduledTaskStore(clock)
    body = Body(clock, outcome=outcome, seconds=2)
    token = CancellationToken()
    runner = start_runner(store, _task(), body, token, clock)
    await body.started.wait()
    await clock.advance(2)
    await until(lambda: len(body.recorded) == 1)
    token.cancel()
    await asyncio.wait_for(runner, 5)
    record = await store.get_scheduled_task(NS, "cleanup")
    assert record is not None
    assert record.last_run_status == status and record.last_run_error == error
    assert record.last_run_duration == timedelta(seconds=2)


async def test_store_errors_are_retried() -> None:
    clock = ManualClock(T0)
    store = FlakyStore(InMemoryScheduledTaskStore(clock))
    store.ensure_errors = [OSError("down")]
    store.claim_errors = [OSError("down")]
    store.complete_errors = [OSError("blip")]
    body = Body(clock)
    token = CancellationToken()
    runner = start_runner(store, _task(), body, token, clock)
    for _ in range(2):  # ensure fails, then claim fails: each retried after 5 s
        await clock.wait_for_sleepers(1)
        await clock.advance(5)
    await until(lambda: len(body.recorded) == 1)
    await clock.wait_for_sleepers(1)
    await clock.advance(1)  # the completion retry
    await clock.wait_for_sleepers(1)
    record = await store.get_scheduled_task(NS, "cleanup")
    assert record is not None and record.run_count == 1 and len(body.runs) == 1
    assert record.next_run_at == T0 + timedelta(seconds=15)  # created at +5 s
    token.cancel()
    await asyncio.wait_for(runner, 5)


async def test_shutdown_does_not_interrupt_a_running_body() -> None:
    clock = ManualClock(T0)
    store = InMemoryScheduledTaskStore(clock)
    body = Body(clock, seconds=5)
    token = CancellationToken()
    runner = start_runner(store, _task(), body, token, clock)
    await body.started.wait()
    token.cancel()
    assert body.runs[0].shutdown_token.cancelled  # the body can see the stop
    await clock.advance(5)
    await asyncio.wait_for(runner, 5)
    assert len(body.finished) == 1
    record = await store.get_scheduled_task(NS, "cleanup")
    assert record is not None and record.run_count == 1


async def test_renewal_loop_returns_true_when_stopped() -> None:
    clock = ManualClock(T0)
    store = InMemoryScheduledTaskStore(clock)
    await store.ensure_scheduled_task(NS, "x", IntervalSchedule(every=timedelta(seconds=1)))
    claim = await store.claim_scheduled_task(NS, "x", "a", timedelta(seconds=3))
    assert claim is not None
    stop = CancellationToken()
    loop = asyncio.create_task(
        run_scheduled_claim_renewal_loop(store, claim, timedelta(seconds=3), stop, clock=clock)
    )
    await clock.wait_for_sleepers(1)
    await clock.advance(1)
    await clock.wait_for_sleepers(1)
    record = await store.get_scheduled_task(NS, "x")
    assert record is not None and record.claim_expires_at == T0 + timedelta(seconds=4)
    stop.cancel()
    assert await asyncio.wait_for(loop, 5) is True


async def test_hooks_must_be_callable() -> None:
    store = InMemoryScheduledTaskStore()
    with pytest.raises(PeriodicTaskConfigError, match="record_outcome"):
        await run_scheduled_periodic_task(
            store,
            _task(),
            Body(ManualClock()),
            record_outcome=3,  # type: ignore[arg-type]
            shutdown_token=CancellationToken(),
        )
    with pytest.raises(PeriodicTaskConfigError, match="fn is not callable"):
        await run_scheduled_periodic_task(
            store,
            _task(),
            None,  # type: ignore[arg-type]
            shutdown_token=CancellationToken(),
        )
