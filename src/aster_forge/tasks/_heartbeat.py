"""The heartbeat engine: one loop renews every in-flight lease, one statement per tick."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from ..runtime import CancellationToken
from ..runtime._internal import Clock, RaceWinner, race
from ._lease import TaskLease, TaskLeaseGuard
from .protocols import TaskHeartbeatStore

__all__ = ["SharedTaskHeartbeat", "task_heartbeat_interval"]

logger = logging.getLogger("aster_forge.tasks.heartbeat")

_MIN_INTERVAL = 0.01


def task_heartbeat_interval(lease_ttl: timedelta) -> timedelta:
    """The renewal interval for ``lease_ttl``: a third of it, at least 10 ms."""
    return max(lease_ttl / 3, timedelta(seconds=_MIN_INTERVAL))


@dataclass(slots=True)
class _Entry:
    guard: TaskLeaseGuard
    next_due: float


class SharedTaskHeartbeat:
    """One heartbeat loop renewing the leases of every registered task, batched.

    For each registered guard: renewal every ``lease_ttl / 3`` from its claim or last
    renewal; a fenced-out renewal marks *that* lease lost and cancels its token at once;
    a failed or slow renewal is retried sooner, and the safety deadline turns into a
    renewal timeout; waking later than ``late_wake_threshold`` after the planned tick
    (a starved event loop) logs a warning. Leases due within half an interval of each
    other are renewed together in one store call (``renew_task_leases_many`` when the
    store has it, otherwise one ``renew_task_lease`` per lease, concurrently). Worker
    shutdown does not stop renewals: a lease stays alive until its execution
    unregisters it. The loop task exists only while a guard is registered; all guards
    share one ``lease_ttl``.

    Args:
        store: The heartbeat store.
        clock: The clock the loop sleeps on.
        lease_ttl: The lease duration of every registered guard.
        late_wake_threshold: How late a tick may be before a warning (default: half an
            interval).
    """

    def __init__(
        self,
        store: TaskHeartbeatStore,
        clock: Clock,
        lease_ttl: timedelta,
        *,
        late_wake_threshold: timedelta | None = None,
    ) -> None:
        self._store = store
        self._clock = clock
        self._ttl = lease_ttl
        self._interval = task_heartbeat_interval(lease_ttl).total_seconds()
        self._retry = max(self._interval / 3, _MIN_INTERVAL)
        self._late = (
            late_wake_threshold.total_seconds()
            if late_wake_threshold is not None
            else self._interval / 2
        )
        self._entries: dict[int, _Entry] = {}
        self._loops: set[asyncio.Task[None]] = set()
        self._idle: CancellationToken | None = None
        self._idle_check = False

    def __len__(self) -> int:
        return len(self._entries)

    def register(self, guard: TaskLeaseGuard) -> None:
        """Start renewing ``guard``'s lease (first renewal one interval after its claim)."""
        first = guard.deadline - guard.lease_ttl.total_seconds() + self._interval
        self._entries[id(guard)] = _Entry(guard, first)
        if self._idle is None or self._idle.cancelled:
            # The previous loop (if any) was told to end; a fresh loop with its own idle
            # token takes over.
            self._idle = CancellationToken()
            task = asyncio.create_task(self._run(self._idle), name="aster-forge:task-heartbeat")
            self._loops.add(task)
            task.add_done_callback(self._loops.discard)

    def unregister(self, guard: TaskLeaseGuard) -> None:
        """Stop renewing ``guard`` (results of a renewal in flight are ignored).

        The loop ends one loop turn after its last guard left, unless one registered
        meanwhile: a worker's next tasks (claimed with the last ones' successes) start
        in that turn and keep the loop instead of starting a new one.
        """
        self._entries.pop(id(guard), None)
        if not self._entries and self._idle is not None and not self._idle_check:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                self._idle.cancel()  # no loop to wait a turn on
                return
            self._idle_check = True
            loop.call_soon(self._end_if_idle)

    def _end_if_idle(self) -> None:
        self._idle_check = False
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
            winner = await race(
                seconds=wake_at - clock.monotonic(),
                clock=clock,
                token=idle,
                name="aster-forge:heartbeat-tick",
            )
            if winner is RaceWinner.TOKEN:
                return
            started = clock.monotonic()
            self._drop_lost()
            due = [e for e in self._entries.values() if e.next_due <= started + self._interval / 2]
            for entry in due:
                late = started - entry.next_due
                if late > self._late:
                    task_id = entry.guard.lease.task_id
                    logger.warning(
                        "task heartbeat woke %.3fs late for task #%s (event loop starved?)",
                        late,
                        task_id,
                        extra={"task_id": task_id, "late_seconds": late},
                    )
            if due:
                await self._renew(due, started, idle)

    def _drop_lost(self) -> None:
        for key in [k for k, e in self._entries.items() if e.guard.lease_lost]:
            # Lost elsewhere (a fenced step update failed): nothing left to renew.
            del self._entries[key]

    def _current(self, entry: _Entry) -> bool:
        # An execution that finished meanwhile decides by its final write, not this renewal.
        return self._entries.get(id(entry.guard)) is entry

    async def _renew(self, due: list[_Entry], started: float, idle: CancellationToken) -> None:
        for entry in due:
            if entry.guard.deadline - started <= 0:
                self._time_out(entry, "passed its deadline before renewal")
        due = [e for e in due if self._current(e)]
        if not due:
            return
        renewal = asyncio.create_task(
            _renew_leases(self._store, [e.guard.lease for e in due], self._ttl),
            name="aster-forge:renew-task-leases",
        )
        winner = await race(
            renewal,
            seconds=min(e.guard.deadline for e in due) - started,
            clock=self._clock,
            token=idle,
            cancel_loser=True,
            name="aster-forge:renew-deadline",
        )
        if winner is RaceWinner.TOKEN:
            return  # nobody left to renew for
        error = renewal.exception() if winner is RaceWinner.DONE else None
        if error is not None and not isinstance(error, Exception):
            raise error
        results = renewal.result() if winner is RaceWinner.DONE and error is None else None
        for index, entry in enumerate(due):
            if not self._current(entry):
                continue
            if results is None:
                self._retry_later(entry, started, error)
            else:
                self._apply(entry, started, results[index])

    def _apply(self, entry: _Entry, started: float, renewed: TaskLease | None) -> None:
        """The one place a store's renewal answer for one lease is handled."""
        guard = entry.guard
        if renewed is None:
            guard.mark_lost()
            logger.info(
                "task lease lost for task #%s (fence failed); stopping the outdated worker",
                guard.lease.task_id,
                extra={"task_id": guard.lease.task_id},
            )
            del self._entries[id(guard)]
            return
        guard.record_renewed(renewed, renewal_started_at=started)
        entry.next_due = started + self._interval

    def _retry_later(self, entry: _Entry, started: float, error: Exception | None) -> None:
        guard = entry.guard
        if guard.remaining() <= 0:
            self._time_out(entry, "did not renew before the lease would expire")
            return
        logger.warning(
            "task lease renewal for task #%s failed (%s); retrying",
            guard.lease.task_id,
            "timeout" if error is None else type(error).__name__,
            exc_info=error,
            extra={"task_id": guard.lease.task_id},
        )
        entry.next_due = min(started + self._retry, guard.deadline)

    def _time_out(self, entry: _Entry, why: str) -> None:
        entry.guard.mark_renewal_timed_out()
        logger.warning(
            "task lease for task #%s %s; stopping the task",
            entry.guard.lease.task_id,
            why,
            extra={"task_id": entry.guard.lease.task_id},
        )
        self._entries.pop(id(entry.guard), None)


async def _renew_leases(
    store: TaskHeartbeatStore, leases: list[TaskLease], ttl: timedelta
) -> Sequence[TaskLease | None]:
    return await store.renew_task_leases_many(leases, ttl)
