"""The heartbeat loop that keeps a claimed task's lease alive while its body runs."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

from ..runtime import CancellationToken, Clock, sleep_or_cancelled
from ._lease import TaskLease, TaskLeaseGuard
from .protocols import TaskHeartbeatStore

__all__ = ["SharedTaskHeartbeat", "run_task_heartbeat", "task_heartbeat_interval"]

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


class _Entry:
    __slots__ = ("guard", "next_due")

    def __init__(self, guard: TaskLeaseGuard, next_due: float) -> None:
        self.guard = guard
        self.next_due = next_due


class SharedTaskHeartbeat:
    """One heartbeat loop renewing the leases of every registered task, batched.

    The per-task contract of :func:`run_task_heartbeat` holds for each registered guard
    (renewal every ``lease_ttl / 3`` from its claim or last renewal, a fenced-out
    renewal marks that lease lost and cancels its token at once, failures retry sooner,
    the safety deadline turns into a renewal timeout), but leases due within half an
    interval of each other are renewed together in one store call
    (``renew_task_leases_many`` when the store has it, otherwise one
    ``renew_task_lease`` per lease, concurrently). The loop task exists only while at
    least one guard is registered. All guards must share one ``lease_ttl``.

    Args:
        store: The heartbeat store.
        clock: The clock the loop sleeps on.
        lease_ttl: The lease duration of every registered guard.
    """

    def __init__(self, store: TaskHeartbeatStore, clock: Clock, lease_ttl: timedelta) -> None:
        self._store = store
        self._clock = clock
        self._ttl = lease_ttl
        self._interval = task_heartbeat_interval(lease_ttl).total_seconds()
        self._retry = max(self._interval / 3, _MIN_INTERVAL)
        self._entries: dict[int, _Entry] = {}
        self._loops: set[asyncio.Task[None]] = set()
        self._idle: CancellationToken | None = None

    def __len__(self) -> int:
        return len(self._entries)

    def register(self, guard: TaskLeaseGuard) -> None:
        """Start renewing ``guard``'s lease (first renewal one interval after its claim)."""
        first = guard.deadline - guard.lease_ttl.total_seconds() + self._interval
        self._entries[id(guard)] = _Entry(guard, first)
        if self._idle is None or self._idle.cancelled:
            # The previous loop (if any) was told to end; it may still be finishing a
            # renewal, so a fresh loop with its own idle token takes over.
            self._idle = CancellationToken()
            task = asyncio.create_task(self._run(self._idle), name="aster-forge:task-heartbeat")
            self._loops.add(task)
            task.add_done_callback(self._loops.discard)

    def unregister(self, guard: TaskLeaseGuard) -> None:
        """Stop renewing ``guard`` (results of a renewal in flight are ignored)."""
        self._entries.pop(id(guard), None)
        if not self._entries and self._idle is not None:
            self._idle.cancel()

    async def join(self) -> None:
        """Wait for the loop task to end (it ends once no guard is registered)."""
        while self._loops:
            await asyncio.gather(*list(self._loops), return_exceptions=True)

    async def _run(self, idle: CancellationToken) -> None:
        clock = self._clock
        while self._entries and not idle.cancelled:
            wake_at = min(entry.next_due for entry in self._entries.values())
            if await sleep_or_cancelled(clock, idle, wake_at - clock.monotonic()):
                return
            started = clock.monotonic()
            horizon = started + self._interval / 2
            due = [e for e in self._entries.values() if e.next_due <= horizon]
            due = [e for e in due if not e.guard.lease_lost]
            for entry in due:
                late = started - entry.next_due
                if late > self._interval / 2:
                    logger.warning(
                        "task heartbeat woke %.3fs late for task #%s (event loop starved?)",
                        late,
                        entry.guard.lease.task_id,
                        extra={"task_id": entry.guard.lease.task_id, "late_seconds": late},
                    )
            self._drop_lost()
            if due:
                await self._renew(due, started)

    def _drop_lost(self) -> None:
        for key in [k for k, e in self._entries.items() if e.guard.lease_lost]:
            # Lost elsewhere (a fenced step update failed): nothing left to renew.
            del self._entries[key]

    async def _renew(self, due: list[_Entry], started: float) -> None:
        expired = [e for e in due if e.guard.deadline - started <= 0]
        for entry in expired:
            entry.guard.mark_renewal_timed_out()
            logger.warning(
                "task lease for task #%s passed its deadline before renewal; stopping the task",
                entry.guard.lease.task_id,
                extra={"task_id": entry.guard.lease.task_id},
            )
        due = [e for e in due if e not in expired]
        self._drop_lost()
        if not due:
            return
        budget = min(e.guard.deadline for e in due) - started
        leases = [e.guard.lease for e in due]
        renewal = asyncio.create_task(
            _renew_leases(self._store, leases, self._ttl), name="aster-forge:renew-task-leases"
        )
        timer = asyncio.create_task(self._clock.sleep(budget), name="aster-forge:renew-deadline")
        try:
            await asyncio.wait({renewal, timer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for helper in (renewal, timer):
                if not helper.done():
                    helper.cancel()
            await asyncio.gather(renewal, timer, return_exceptions=True)
        if renewal.cancelled():
            self._after_failure(due, started, None)
            return
        error = renewal.exception()
        if error is not None:
            if not isinstance(error, Exception):
                raise error
            self._after_failure(due, started, error)
            return
        results = renewal.result()
        for entry, renewed in zip(due, results, strict=True):
            if self._entries.get(id(entry.guard)) is not entry:
                continue  # finished meanwhile: its final write decides, not this renewal
            guard = entry.guard
            if renewed is None:
                guard.mark_lost()
                logger.info(
                    "task lease lost for task #%s (fence failed); stopping the outdated worker",
                    guard.lease.task_id,
                    extra={"task_id": guard.lease.task_id},
                )
                del self._entries[id(guard)]
                continue
            guard.record_renewed(renewed, renewal_started_at=started)
            entry.next_due = started + self._interval

    def _after_failure(self, due: list[_Entry], started: float, error: Exception | None) -> None:
        for entry in due:
            if self._entries.get(id(entry.guard)) is not entry:
                continue
            guard = entry.guard
            if guard.remaining() <= 0:
                guard.mark_renewal_timed_out()
                logger.warning(
                    "task lease renewal for task #%s did not succeed before the lease would expire",
                    guard.lease.task_id,
                    extra={"task_id": guard.lease.task_id},
                )
                del self._entries[id(guard)]
                continue
            logger.warning(
                "task lease renewal for task #%s failed (%s); retrying",
                guard.lease.task_id,
                "timeout" if error is None else type(error).__name__,
                exc_info=error,
                extra={"task_id": guard.lease.task_id},
            )
            entry.next_due = min(started + self._retry, guard.deadline)


async def _renew_leases(
    store: TaskHeartbeatStore, leases: list[TaskLease], ttl: timedelta
) -> list[TaskLease | None]:
    many = getattr(store, "renew_task_leases_many", None)
    if many is not None:
        return list(await many(leases, ttl))
    if len(leases) == 1:
        return [await store.renew_task_lease(leases[0], ttl)]
    return list(await asyncio.gather(*(store.renew_task_lease(lease, ttl) for lease in leases)))
