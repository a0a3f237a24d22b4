"""Lane dispatch: per-lane concurrency limits, fenced claims, round-robin drain, backoff."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any, Generic, TypeVar

from ..runtime import CancellationToken, Clock, SystemClock
from ._completion import TaskCompletionBatcher, supports_batched_success
from ._dispatch_stats import ClaimedTaskOutcome, DispatchStatsRecorder
from ._execution import ClaimedTaskExecutionConfig, run_claimed_task_with_store
from ._heartbeat import SharedTaskHeartbeat
from ._lease import TaskLease
from .errors import TaskDispatchConfigError
from .protocols import ClaimedTaskRecord, ClaimedTaskStore, DispatchTaskStore, TaskClaimStore

__all__ = [
    "DispatchBackoff",
    "DispatchDrainResult",
    "DispatchPollConfig",
    "DispatchWakeSignal",
    "TaskDispatcher",
    "TaskLaneConfig",
    "claim_due_for_lane",
    "default_dispatch_owner",
    "drain_dispatcher",
    "effective_dispatch_base_interval",
]

logger = logging.getLogger("aster_forge.tasks.dispatch")

StateT = TypeVar("StateT")
TaskT = TypeVar("TaskT", bound=ClaimedTaskRecord[Any])

_MIN_BASE_INTERVAL = timedelta(seconds=1)


def effective_dispatch_base_interval(interval: timedelta) -> timedelta:
    """The poll interval actually used: zero is clamped to 1 s so a worker never hot-spins.

    Non-zero sub-second intervals are kept (fast tests and in-memory polling are legal).

    Raises:
        TaskDispatchConfigError: When ``interval`` is negative.
    """
    if interval < timedelta(0):
        raise TaskDispatchConfigError(f"dispatch poll interval must not be negative: {interval}")
    return _MIN_BASE_INTERVAL if interval == timedelta(0) else interval


def default_dispatch_owner() -> str:
    """A claim owner unique per process start: ``<host>:<pid>:<random>``.

    The random part keeps a restarted pod with the same host name and pid from being
    mistaken for the process that died.
    """
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


@dataclass(frozen=True, slots=True)
class TaskLaneConfig:
    """One lane's concurrency limit.

    Attributes:
        lane: The product's lane value (normally a lane enum member).
        max_concurrency: The most tasks of this lane executing at once (>= 1).
        claim_batch: The most tasks one claim round trip may take (default: all free slots).
    """

    lane: Hashable
    max_concurrency: int
    claim_batch: int | None = None

    def __post_init__(self) -> None:
        if self.max_concurrency < 1:
            raise TaskDispatchConfigError(
                f"lane {self.lane!r}: max_concurrency must be >= 1, got {self.max_concurrency}"
            )
        if self.claim_batch is not None and self.claim_batch < 1:
            raise TaskDispatchConfigError(
                f"lane {self.lane!r}: claim_batch must be >= 1, got {self.claim_batch}"
            )


@dataclass(frozen=True, slots=True)
class DispatchPollConfig:
    """Poll timing of a dispatch worker.

    Attributes:
        base_interval: The poll interval while work is found (0 is clamped to 1 s).
        max_interval: The cap of the backoff on empty polls.
        error_max_interval: The cap of the backoff on store errors.
        multiplier: The growth per consecutive empty poll or error (>= 1).
    """

    base_interval: timedelta = timedelta(seconds=1)
    max_interval: timedelta = timedelta(seconds=10)
    error_max_interval: timedelta = timedelta(seconds=60)
    multiplier: float = 2.0

    def __post_init__(self) -> None:
        base = effective_dispatch_base_interval(self.base_interval)
        if self.max_interval < base or self.error_max_interval < base:
            raise TaskDispatchConfigError(
                "dispatch max_interval and error_max_interval must be >= the base interval"
            )
        if not self.multiplier >= 1.0:
            raise TaskDispatchConfigError("dispatch backoff multiplier must be >= 1")


@dataclass(slots=True)
class DispatchBackoff:
    """The poll delay after each drain: base after work, growing on empty polls and errors.

    Both streaks reset as soon as a drain claims something.
    """

    config: DispatchPollConfig = field(default_factory=DispatchPollConfig)
    empty_streak: int = 0
    error_streak: int = 0

    def _grown(self, streak: int, cap: timedelta) -> timedelta:
        base = effective_dispatch_base_interval(self.config.base_interval).total_seconds()
        # Float seconds with a bounded exponent: a long streak saturates at the cap.
        seconds = base * self.config.multiplier ** min(streak, 64)
        return cap if seconds >= cap.total_seconds() else timedelta(seconds=seconds)

    def record_work(self) -> timedelta:
        """A drain claimed tasks: reset both streaks and return the base interval."""
        self.empty_streak = 0
        self.error_streak = 0
        return effective_dispatch_base_interval(self.config.base_interval)

    def record_busy(self) -> timedelta:
        """Every lane with due work was full: wait the base interval (completions wake us)."""
        self.error_streak = 0
        return effective_dispatch_base_interval(self.config.base_interval)

    def record_empty(self) -> timedelta:
        """Nothing was due: back off (base, x multiplier, ... capped at ``max_interval``)."""
        self.error_streak = 0
        delay = self._grown(self.empty_streak, self.config.max_interval)
        self.empty_streak += 1
        return delay

    def record_error(self) -> timedelta:
        """A claim raised: back off up to ``error_max_interval``."""
        delay = self._grown(self.error_streak + 1, self.config.error_max_interval)
        self.error_streak += 1
        return delay


class DispatchWakeSignal:
    """A coalescing wake-up for an idle dispatch worker (no lost wake-ups).

    :meth:`wake` is synchronous and must be called on the worker's event loop (from
    another thread use ``loop.call_soon_threadsafe(signal.wake)``). A wake while the worker
    is busy is remembered and ends its next wait at once.
    """

    __slots__ = ("_pending", "_waiters")

    def __init__(self) -> None:
        """Create an un-signalled wake signal (binds to no event loop)."""
        self._pending = False
        self._waiters: list[asyncio.Future[None]] = []

    @property
    def pending(self) -> bool:
        """Whether a wake-up is waiting to be consumed."""
        return self._pending

    def wake(self) -> None:
        """Wake the waiting worker now, or make its next wait return at once."""
        self._pending = True
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def wait(self) -> None:
        """Wait for a wake-up and consume it."""
        if not self._pending:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
        self._pending = False

    def __repr__(self) -> str:
        return f"DispatchWakeSignal(pending={self._pending})"


async def claim_due_for_lane(
    store: TaskClaimStore[TaskT, Any],
    lane: Hashable,
    limit: int,
    owner: str,
    lease_ttl: timedelta,
    *,
    stats: DispatchStatsRecorder | None = None,
    clock: Clock | None = None,
) -> Sequence[TaskT]:
    """Claim up to ``limit`` due tasks of ``lane``, recording latency and stats.

    Calls ``store.claim_due_for_lane`` (each returned record carries a fresh processing
    token, see :class:`~aster_forge.tasks.TaskClaimStore`) and records the claim count,
    rescued claims (records whose ``rescued`` attribute is true), the round trip and the
    queue lag of the oldest claimed task (``now - run_at``).

    Args:
        store: The claim store.
        lane: The lane to claim from.
        limit: The most tasks to claim; ``<= 0`` claims nothing without a round trip.
        owner: The claiming worker's identity.
        lease_ttl: The lease duration of the claim.
        stats: Where to record the claim (optional).
        clock: The clock for latency and lag (default :class:`SystemClock`).

    Returns:
        The claimed records.
    """
    if limit <= 0:
        return ()
    clock = clock or SystemClock()
    started = clock.monotonic()
    try:
        records = await store.claim_due_for_lane(lane, limit, owner, lease_ttl)
    except Exception:
        if stats is not None:
            stats.record_claim_error(lane)
        raise
    if stats is not None:
        latency = max(clock.monotonic() - started, 0.0)
        now = clock.now()
        lag = max(((now - record.run_at).total_seconds() for record in records), default=0.0)
        stats.record_claim(
            lane,
            claimed=len(records),
            rescued=sum(1 for record in records if getattr(record, "rescued", False)),
            latency_seconds=latency,
            queue_lag_seconds=max(lag, 0.0),
        )
    return records


@dataclass(frozen=True, slots=True)
class DispatchDrainResult:
    """What one :func:`drain_dispatcher` call claimed.

    Attributes:
        claimed: Tasks claimed per lane (lanes that claimed nothing are omitted).
        saturated: Lanes that ended the drain with every slot busy.
    """

    claimed: dict[Hashable, int]
    saturated: frozenset[Hashable]

    @property
    def total(self) -> int:
        """Tasks claimed over every lane."""
        return sum(self.claimed.values())


class TaskDispatcher(Generic[StateT]):
    """Per-lane in-flight accounting and the executions it started.

    Each lane claims only its own free slots (``max_concurrency - in flight``), so a lane's
    limit is never exceeded and a busy lane never takes another lane's slots; lanes are
    visited round-robin, starting one lane later on each drain. Slots are reserved
    *before* the claim round trip, so concurrent drains cannot over-claim.

    The dispatcher owns a stop token: each execution's context is cancelled through it
    on :meth:`shutdown` (and through ``execution.shutdown_token`` if one was given).

    Throughput: per store, one shared heartbeat renews the leases of every in-flight
    task in one statement per tick (``renew_task_leases_many`` when the store has it),
    and successes are coalesced into ``mark_tasks_succeeded_many`` calls while a write
    is in flight (each entry still fenced by its own token, each task's outcome
    reported only once stored). Both can be switched off.
    """

    def __init__(
        self,
        lanes: Sequence[TaskLaneConfig],
        execution: ClaimedTaskExecutionConfig[StateT],
        *,
        owner: str | None = None,
        stats: DispatchStatsRecorder | None = None,
        wake: DispatchWakeSignal | None = None,
        shared_heartbeat: bool = True,
        batch_completions: bool = True,
    ) -> None:
        """Create a dispatcher.

        Args:
            lanes: One config per lane (each lane at most once).
            execution: How claimed tasks are executed (its ``lease_ttl`` is the claim TTL).
            owner: The claim owner (default :func:`default_dispatch_owner`).
            stats: The stats recorder (default: a new one).
            wake: The signal a freed slot of a saturated lane fires (default: a new one).
            shared_heartbeat: Renew all in-flight leases from one loop (batched) instead
                of one heartbeat task per task.
            batch_completions: Coalesce success writes into
                ``mark_tasks_succeeded_many`` when the store has it.

        Raises:
            TaskDispatchConfigError: When no lane is given or a lane repeats.
        """
        if not lanes:
            raise TaskDispatchConfigError("a task dispatcher needs at least one lane")
        seen = [config.lane for config in lanes]
        if len(set(seen)) != len(seen):
            raise TaskDispatchConfigError(f"a lane is configured more than once: {seen}")
        self._lanes = tuple(lanes)
        parent = execution.shutdown_token
        self._stop = parent.child_token() if parent is not None else CancellationToken()
        self._execution = replace(execution, shutdown_token=self._stop)
        self._owner = owner or default_dispatch_owner()
        self._stats = stats or DispatchStatsRecorder(seen)
        self._wake = wake or DispatchWakeSignal()
        self._in_flight: dict[Hashable, int] = dict.fromkeys(seen, 0)
        self._reserved: dict[Hashable, int] = dict.fromkeys(seen, 0)
        self._saturated: set[Hashable] = set()
        self._leases: dict[int, TaskLease] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._next_lane = 0
        self._shared_heartbeat = shared_heartbeat
        self._batch_completions = batch_completions
        # Per store (by identity; the store is kept referenced): heartbeat and batcher.
        self._helpers: dict[
            int, tuple[object, SharedTaskHeartbeat | None, TaskCompletionBatcher | None]
        ] = {}

    @property
    def lanes(self) -> tuple[TaskLaneConfig, ...]:
        """The lane configs."""
        return self._lanes

    @property
    def execution(self) -> ClaimedTaskExecutionConfig[StateT]:
        """The execution config (with the dispatcher's stop token)."""
        return self._execution

    @property
    def owner(self) -> str:
        """The claim owner identity."""
        return self._owner

    @property
    def stats(self) -> DispatchStatsRecorder:
        """The stats recorder."""
        return self._stats

    @property
    def wake_signal(self) -> DispatchWakeSignal:
        """The signal fired when a saturated lane frees a slot (and by :meth:`wake`)."""
        return self._wake

    @property
    def stopping(self) -> bool:
        """Whether :meth:`shutdown` was called (no more claims)."""
        return self._stop.cancelled

    def wake(self) -> None:
        """Wake the dispatch worker (for example after an enqueue in this process)."""
        self._wake.wake()

    def in_flight(self, lane: Hashable | None = None) -> int:
        """Tasks executing in ``lane`` (or in every lane)."""
        if lane is None:
            return sum(self._in_flight.values())
        return self._in_flight[lane]

    def free_slots(self, lane: Hashable) -> int:
        """Slots ``lane`` may still claim (limit minus in-flight and reserved)."""
        config = self._config_of(lane)
        return max(config.max_concurrency - self._in_flight[lane] - self._reserved[lane], 0)

    def running_leases(self) -> list[TaskLease]:
        """The leases of every executing task (for :func:`sweep_task_temp_dirs`)."""
        return list(self._leases.values())

    def _config_of(self, lane: Hashable) -> TaskLaneConfig:
        for config in self._lanes:
            if config.lane == lane:
                return config
        raise TaskDispatchConfigError(f"lane {lane!r} is not configured in this dispatcher")

    def _round_robin(self) -> list[TaskLaneConfig]:
        start = self._next_lane % len(self._lanes)
        self._next_lane = start + 1
        return [*self._lanes[start:], *self._lanes[:start]]

    async def claim_lane(
        self, store: DispatchTaskStore[Any, Any], config: TaskLaneConfig
    ) -> tuple[int, int]:
        """Claim up to the free slots of one lane and start executing what was claimed.

        Returns:
            ``(claimed, requested)``; ``requested`` is 0 when the lane was full.

        Raises:
            Exception: Whatever the store's claim raised (stats record the error).
        """
        lane = config.lane
        requested = self.free_slots(lane)
        if config.claim_batch is not None:
            requested = min(requested, config.claim_batch)
        if requested <= 0 or self.stopping:
            return 0, 0
        self._reserved[lane] += requested
        clock = self._execution.clock
        claimed_at = clock.monotonic()
        try:
            records = await claim_due_for_lane(
                store,
                lane,
                requested,
                self._owner,
                self._execution.lease_ttl,
                stats=self._stats,
                clock=clock,
            )
        finally:
            self._reserved[lane] -= requested
        records = list(records)
        if len(records) > requested:
            extra = records[requested:]
            records = records[:requested]
            logger.error(
                "the store returned %s tasks for lane %r although %s were asked; releasing "
                "the extra ones",
                len(extra) + requested,
                lane,
                requested,
            )
            await _release_extra(store, extra)
        for record in records:
            self._start(store, lane, record, claimed_at)
        if self.free_slots(lane) == 0:
            self._saturated.add(lane)
        return len(records), requested

    def _helpers_for(
        self, store: ClaimedTaskStore
    ) -> tuple[SharedTaskHeartbeat | None, TaskCompletionBatcher | None]:
        entry = self._helpers.get(id(store))
        if entry is None or entry[0] is not store:
            heartbeat = (
                SharedTaskHeartbeat(store, self._execution.clock, self._execution.lease_ttl)
                if self._shared_heartbeat
                else None
            )
            batcher = (
                TaskCompletionBatcher(store)
                if self._batch_completions and supports_batched_success(store)
                else None
            )
            entry = self._helpers[id(store)] = (store, heartbeat, batcher)
        return entry[1], entry[2]

    def _start(
        self, store: ClaimedTaskStore, lane: Hashable, record: Any, claimed_at: float
    ) -> None:
        self._in_flight[lane] += 1
        self._stats.record_started(lane)
        if record.processing_token is not None and record.lease_expires_at is not None:
            self._leases[record.id] = TaskLease(
                record.id, record.processing_token, record.lease_expires_at
            )
        task = asyncio.create_task(
            self._execute(store, lane, record, claimed_at),
            name=f"aster-forge:dispatch-task-{record.id}",
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _execute(
        self, store: ClaimedTaskStore, lane: Hashable, record: Any, claimed_at: float
    ) -> None:
        outcome = ClaimedTaskOutcome.STORE_ERROR
        heartbeat, completions = self._helpers_for(store)
        try:
            report = await run_claimed_task_with_store(
                store,
                record,
                self._execution,
                claimed_at=claimed_at,
                heartbeat=heartbeat,
                completions=completions,
            )
            outcome = report.outcome
        except asyncio.CancelledError:
            # run_claimed_task_with_store released the task (fenced) before re-raising.
            outcome = ClaimedTaskOutcome.RELEASED
            raise
        except Exception:
            logger.exception(
                "executing task #%s failed inside the dispatcher",
                record.id,
                extra={"task_id": record.id},
            )
        finally:
            self._in_flight[lane] -= 1
            self._leases.pop(record.id, None)
            self._stats.record_outcome(lane, outcome)
            if lane in self._saturated:
                # A full lane just freed a slot: more work may be waiting for it.
                self._saturated.discard(lane)
                self._wake.wake()

    async def join(self) -> None:
        """Wait until every execution this dispatcher started has finished."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        for _, heartbeat, batcher in list(self._helpers.values()):
            if batcher is not None:
                await batcher.join()
            if heartbeat is not None:
                await heartbeat.join()

    async def shutdown(self) -> None:
        """Stop claiming, cancel every running context, and wait for the executions.

        Each execution gives its body ``shutdown_grace`` to stop, cancels it if needed,
        then releases the task to pending without counting an attempt (fenced). If the
        caller is cancelled while waiting, the executions are cancelled (they still
        release, shielded) and awaited before the cancellation propagates.
        """
        self._stop.cancel()
        try:
            await self.join()
        except asyncio.CancelledError:
            pending = list(self._tasks)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending)
            raise

    def __repr__(self) -> str:
        lanes = ", ".join(
            f"{config.lane!r}: {self._in_flight[config.lane]}/{config.max_concurrency}"
            for config in self._lanes
        )
        return f"TaskDispatcher(owner={self._owner!r}, in_flight={{{lanes}}})"


async def _release_extra(store: ClaimedTaskStore, records: Sequence[Any]) -> None:
    for record in records:
        if record.processing_token is None or record.lease_expires_at is None:
            continue
        lease = TaskLease(record.id, record.processing_token, record.lease_expires_at)
        try:
            await store.release_task_for_shutdown(lease)
        except Exception:
            logger.exception("releasing over-claimed task #%s failed", record.id)


async def drain_dispatcher(
    store: DispatchTaskStore[Any, Any], dispatcher: TaskDispatcher[Any]
) -> DispatchDrainResult:
    """Claim round-robin over the lanes until nothing is due or every lane is full.

    Each round visits every lane that still has free slots and had a full claim last
    time; a lane whose claim returned fewer tasks than asked has nothing more due and
    is skipped for the rest of the drain. Claimed tasks start executing at once.

    Returns:
        What was claimed per lane, and which lanes ended full.

    Raises:
        Exception: The first claim error (tasks claimed before it keep running).
    """
    claimed: dict[Hashable, int] = {}
    exhausted: set[Hashable] = set()
    order = dispatcher._round_robin()
    progress = True
    while progress and not dispatcher.stopping:
        progress = False
        for config in order:
            if config.lane in exhausted:
                continue
            count, requested = await dispatcher.claim_lane(store, config)
            if requested == 0:
                continue
            if count < requested:
                exhausted.add(config.lane)
            if count:
                claimed[config.lane] = claimed.get(config.lane, 0) + count
                progress = True
    saturated = frozenset(
        config.lane for config in dispatcher.lanes if dispatcher.free_slots(config.lane) == 0
    )
    return DispatchDrainResult(claimed=claimed, saturated=saturated)
