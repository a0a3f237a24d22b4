"""The heartbeat engine, driven by a manual clock."""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta

import pytest

from aster_forge.runtime import CancellationToken
from aster_forge.tasks import SharedTaskHeartbeat, TaskLease, TaskLeaseGuard
from aster_forge.tasks._heartbeat import task_heartbeat_interval
from aster_forge.tasks._lease import TaskLeaseTermination
from aster_forge.testing import ManualClock

from ._dispatch_support import until
from .fakes import FakeHeartbeatStore

TTL = timedelta(seconds=30)


class StarvedClock:
    """A manual clock whose monotonic reading can jump ahead, as if the loop stalled."""

    def __init__(self, inner: ManualClock) -> None:
        self.inner = inner
        self.lag = 0.0

    def now(self) -> datetime:
        return self.inner.now()

    def monotonic(self) -> float:
        return self.inner.monotonic() + self.lag

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


def _setup(
    clock: ManualClock, shutdown: CancellationToken | None = None
) -> tuple[FakeHeartbeatStore, TaskLeaseGuard]:
    store = FakeHeartbeatStore(clock, owner_token="tok")
    guard = TaskLeaseGuard(
        TaskLease(5, "tok", clock.now() + TTL), TTL, clock=clock, shutdown_token=shutdown
    )
    return store, guard


def _renewing(store: FakeHeartbeatStore, guard: TaskLeaseGuard) -> SharedTaskHeartbeat:
    """A heartbeat engine renewing just ``guard`` (on the guard's clock and TTL)."""
    engine = SharedTaskHeartbeat(store, guard.clock, guard.lease_ttl)
    engine.register(guard)
    return engine


async def _stop(engine: SharedTaskHeartbeat, guard: TaskLeaseGuard) -> None:
    """Stop renewing ``guard`` and wait for the engine's loop to end."""
    engine.unregister(guard)
    await engine.join()


def test_interval_is_a_third_of_the_ttl_with_a_floor() -> None:
    assert task_heartbeat_interval(TTL) == timedelta(seconds=10)
    assert task_heartbeat_interval(timedelta(milliseconds=3)) == timedelta(milliseconds=10)


async def test_renews_every_third_of_the_ttl_until_stopped() -> None:
    clock = ManualClock()
    store, guard = _setup(clock)
    engine = _renewing(store, guard)
    for expected in (1, 2, 3):
        await clock.wait_for_sleepers(1)
        await clock.advance(10)
        assert store.calls == expected
    assert guard.lease.expires_at == clock.now() + TTL
    assert guard.deadline == clock.monotonic() + 30
    for _ in range(10):  # far past the original expiry: the renewals keep it alive
        await clock.wait_for_sleepers(1)
        await clock.advance(10)
    assert store.calls == 13
    guard.ensure_active()
    await _stop(engine, guard)
    assert not guard.lease_lost


async def test_fence_failure_marks_the_lease_lost_at_once() -> None:
    clock = ManualClock()
    store, guard = _setup(clock)
    store.owner_token = "new-owner"
    engine = _renewing(store, guard)
    await clock.wait_for_sleepers(1)
    await clock.advance(10)
    await engine.join()  # the loop ends by itself
    assert store.calls == 1
    assert guard.termination is TaskLeaseTermination.LOST
    assert guard.token.cancelled


async def test_errors_are_retried_until_the_lease_would_expire(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = ManualClock()
    store, guard = _setup(clock)
    store.fail_with = ConnectionError("db down: password=hunter2")
    engine = _renewing(store, guard)
    await clock.wait_for_sleepers(1)
    for _ in range(29):
        await clock.advance(1)
    alive_before_expiry = not guard.lease_lost and not guard.token.cancelled
    assert alive_before_expiry
    calls_before_expiry = store.calls
    assert calls_before_expiry >= 3  # retried sooner than a full interval
    await clock.advance(1)
    await engine.join()
    assert guard.termination is TaskLeaseTermination.RENEWAL_TIMED_OUT
    assert guard.token.cancelled
    assert "ConnectionError" in caplog.text and "hunter2" not in caplog.messages[-1]


async def test_recovering_store_keeps_the_lease() -> None:
    clock = ManualClock()
    store, guard = _setup(clock)
    store.fail_with = ConnectionError("blip")
    engine = _renewing(store, guard)
    await clock.wait_for_sleepers(1)
    await clock.advance(10)
    assert store.calls == 1
    store.fail_with = None
    await clock.advance(4)
    assert store.calls == 2 and guard.deadline == pytest.approx(10 + 10 / 3 + 30)
    await _stop(engine, guard)
    assert guard.termination is None


async def test_a_renewal_that_cannot_finish_in_time_is_a_timeout() -> None:
    clock = ManualClock()
    store, guard = _setup(clock)
    store.hang = asyncio.Event()
    engine = _renewing(store, guard)
    await clock.wait_for_sleepers(1)
    await clock.advance(10)  # renewal starts and hangs
    await clock.advance(19)
    assert not guard.lease_lost
    await clock.advance(1)  # the lease would expire now
    await engine.join()
    assert guard.termination is TaskLeaseTermination.RENEWAL_TIMED_OUT
    assert store.cancelled_renewals == 1


async def test_shutdown_does_not_stop_renewals_but_unregistering_does() -> None:
    clock = ManualClock()
    shutdown = CancellationToken()
    store, guard = _setup(clock, shutdown)
    engine = _renewing(store, guard)
    shutdown.cancel()
    await clock.wait_for_sleepers(1)
    await clock.advance(10)
    assert store.calls == 1  # still renewing while the executor releases the task
    store.hang = asyncio.Event()
    await clock.advance(10)
    await _stop(engine, guard)  # stop while a renewal is in flight: abandoned quietly
    assert store.cancelled_renewals == 1
    assert guard.termination is TaskLeaseTermination.SHUTDOWN_REQUESTED


async def test_late_wake_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    inner = ManualClock()
    clock = StarvedClock(inner)
    store = FakeHeartbeatStore(inner, owner_token="tok")
    guard = TaskLeaseGuard(TaskLease(5, "tok", inner.now() + TTL), TTL, clock=clock)
    engine = _renewing(store, guard)
    await inner.wait_for_sleepers(1)
    with caplog.at_level(logging.WARNING, logger="aster_forge.tasks.heartbeat"):
        await inner.advance(10)
        assert "late" not in caplog.text
        await inner.wait_for_sleepers(1)
        clock.lag = 7.0  # the loop was starved for 7 s before this tick ran
        await inner.advance(10)
    assert "woke 7.000s late for task #5" in caplog.text
    assert store.calls == 2 and not guard.lease_lost
    await _stop(engine, guard)


async def test_one_tick_renews_every_lease_and_a_refusal_stops_only_its_own() -> None:
    # A store with only the single renewal: the engine renews the leases due in
    # one tick concurrently, one call each; the lease another claim took over is lost,
    # the other one lives on.
    clock = ManualClock()
    store = FakeHeartbeatStore(clock, owner_token="tok")
    kept = TaskLeaseGuard(TaskLease(1, "tok", clock.now() + TTL), TTL, clock=clock)
    taken = TaskLeaseGuard(TaskLease(2, "stale", clock.now() + TTL), TTL, clock=clock)
    engine = SharedTaskHeartbeat(store, clock, TTL)
    engine.register(kept)
    engine.register(taken)
    await clock.wait_for_sleepers(1)
    await clock.advance(10)
    await until(lambda: len(engine) == 1)
    assert store.calls == 2
    assert taken.termination is TaskLeaseTermination.LOST and taken.token.cancelled
    assert kept.termination is None and kept.deadline == clock.monotonic() + 30
    await clock.wait_for_sleepers(1)
    await clock.advance(10)
    assert store.calls == 3  # only the kept lease is renewed from now on
    engine.unregister(kept)
    await engine.join()


async def test_a_lease_lost_elsewhere_is_not_renewed_again() -> None:
    # A fenced step update found the lease lost: the next tick drops it unrenewed.
    clock = ManualClock()
    store, guard = _setup(clock)
    engine = SharedTaskHeartbeat(store, clock, TTL)
    engine.register(guard)
    await clock.wait_for_sleepers(1)
    guard.mark_lost()
    await clock.advance(10)
    await until(lambda: len(engine) == 0)
    assert store.calls == 0
    await engine.join()  # nothing left to renew: the loop ended by itself
