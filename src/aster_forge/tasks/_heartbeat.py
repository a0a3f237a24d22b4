"""The heartbeat loop that keeps a claimed task's lease alive while its body runs."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

from ..runtime import CancellationToken, Clock, sleep_or_cancelled
from ._lease import TaskLeaseGuard
from .protocols import TaskHeartbeatStore

__all__ = ["run_task_heartbeat", "task_heartbeat_interval"]

logger = logging.getLogger("aster_forge.tasks.heartbeat")

_MIN_INTERVAL = 0.01


def task_heartbeat_interval(lease_ttl: timedelta) -> timedelta:
    """The renewal interval for ``lease_ttl``: a third of it, at least 10 ms."""
    return max(lease_ttl / 3, timedelta(seconds=_MIN_INTERVAL))


async def run_task_heartbeat(
    store: TaskHeartbeatStore,
    guard: TaskLeaseGuard,
    *,
    stop: CancellationToken,
    late_wake_threshold: timedelta | None = None,
) -> None:
    """Renew ``guard``'s lease every ``lease_ttl / 3`` until stopped or the lease is lost.

    * A renewal returning ``None`` (fence failed) marks the lease lost and cancels the
      guard's token at once; the loop ends.
    * A renewal that raises is logged and retried (sooner than a full interval) until the
      safety deadline passes; then the lease is marked renewal-timed-out (lost).
    * A renewal still running at the safety deadline is abandoned and counts as a timeout.
    * Waking more than ``late_wake_threshold`` after the planned tick (the event loop was
      starved) logs a warning.
    * Worker shutdown does *not* stop the loop: the lease stays alive until the executor
      has released the task and sets ``stop``.

    The loop never raises for store failures; it returns when ``stop`` is cancelled or
    the guard reports the lease lost.

    Args:
        store: The heartbeat store.
        guard: The lease guard shared with the task's context (holds the clock and TTL).
        stop: Cancel to end the loop (the executor does so when the body finished).
        late_wake_threshold: How late a tick may be before a warning (default: half an
            interval).
    """
    clock = guard.clock
    interval = task_heartbeat_interval(guard.lease_ttl).total_seconds()
    retry_interval = max(interval / 3, _MIN_INTERVAL)
    threshold = (
        late_wake_threshold.total_seconds() if late_wake_threshold is not None else interval / 2
    )
    next_due = clock.monotonic() + interval
    while not stop.cancelled and not _lost(guard):
        if await sleep_or_cancelled(clock, stop, next_due - clock.monotonic()):
            return
        if _lost(guard):
            # Lost elsewhere (a fenced step update failed): nothing left to renew.
            return
        started = clock.monotonic()
        late = started - next_due
        if late > threshold:
            logger.warning(
                "task heartbeat woke %.3fs late for task #%s (event loop starved?)",
                late,
                guard.lease.task_id,
                extra={"task_id": guard.lease.task_id, "late_seconds": late},
            )
        outcome = await _renew_once(store, guard, clock, stop, started)
        if outcome is _Outcome.DONE:
            return
        if outcome is _Outcome.RENEWED:
            next_due = started + interval
        else:
            # Retry sooner after a failure, but wake no later than the deadline, where an
            # unrenewed lease is declared timed out.
            next_due = min(started + retry_interval, guard.deadline)


def _lost(guard: TaskLeaseGuard) -> bool:
    # A call, not a property read, so type narrowing does not survive the awaits above.
    return guard.lease_lost


class _Outcome:
    RENEWED = object()
    FAILED = object()
    DONE = object()


async def _renew_once(
    store: TaskHeartbeatStore,
    guard: TaskLeaseGuard,
    clock: Clock,
    stop: CancellationToken,
    started: float,
) -> object:
    lease = guard.lease
    budget = guard.deadline - started
    if budget <= 0:
        guard.mark_renewal_timed_out()
        logger.warning(
            "task lease for task #%s passed its deadline before renewal; stopping the task",
            lease.task_id,
            extra={"task_id": lease.task_id},
        )
        return _Outcome.DONE
    renewal = asyncio.create_task(
        store.renew_task_lease(lease, guard.lease_ttl),
        name=f"aster-forge:renew-task-{lease.task_id}",
    )
    timer = asyncio.create_task(clock.sleep(budget), name="aster-forge:renew-deadline")
    stopper = asyncio.create_task(stop.wait(), name="aster-forge:renew-stop")
    try:
        await asyncio.wait({renewal, timer, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for helper in (renewal, timer, stopper):
            if not helper.done():
                helper.cancel()
        await asyncio.gather(renewal, timer, stopper, return_exceptions=True)
    if not renewal.cancelled() and renewal.exception() is None:
        renewed = renewal.result()
        if renewed is None:
            guard.mark_lost()
            logger.info(
                "task lease lost for task #%s (fence failed); stopping the outdated worker",
                lease.task_id,
                extra={"task_id": lease.task_id},
            )
            return _Outcome.DONE
        guard.record_renewed(renewed, renewal_started_at=started)
        return _Outcome.RENEWED
    if stop.cancelled:
        return _Outcome.DONE
    if renewal.cancelled():
        guard.mark_renewal_timed_out()
        logger.warning(
            "task lease renewal for task #%s did not complete before the lease would expire",
            lease.task_id,
            extra={"task_id": lease.task_id},
        )
        return _Outcome.DONE
    error = renewal.exception()
    if guard.remaining() <= 0:
        guard.mark_renewal_timed_out()
        logger.warning(
            "task lease renewal for task #%s kept failing until the lease expired (%s)",
            lease.task_id,
            type(error).__name__,
            extra={"task_id": lease.task_id},
        )
        return _Outcome.DONE
    logger.warning(
        "task lease renewal for task #%s failed (%s); retrying",
        lease.task_id,
        type(error).__name__,
        exc_info=error,
        extra={"task_id": lease.task_id},
    )
    return _Outcome.FAILED
