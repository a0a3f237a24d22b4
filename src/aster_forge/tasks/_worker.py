"""TaskWorker: the one object that owns claim -> run -> write for a store and its lanes."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any, Generic, TypeVar

from ..runtime import CancellationToken, Clock, SystemClock, race
from ._completion import TaskCompletionBatcher, supports_batched_success
from ._dispatch import (
    DispatchBackoff,
    DispatchDrainResult,
    DispatchPollConfig,
    DispatchWakeSignal,
    TaskLaneConfig,
    claim_due_for_lane,
    default_dispatch_owner,
)
from ._dispatch_stats import ClaimedTaskOutcome, DispatchStatsRecorder
from ._execution import ClaimedTaskExecution, ClaimedTaskExecutionConfig, task_lease_termination_of
from ._heartbeat import SharedTaskHeartbeat
from ._lease import TaskLease, TaskLeaseTermination
from ._registry import TaskRegistry
from ._retry import TaskErrorClassifier, TaskRetryPolicy
from ._spec import ErasedTaskSpec
from .errors import TaskDispatchConfigError
from .protocols import DispatchTaskStore, TaskTempDirProvider

__all__ = ["InFlightTask", "TaskWorker"]

logger = logging.getLogger("aster_forge.tasks.dispatch")

StateT = TypeVar("StateT")


@dataclass(frozen=True, slots=True)
class InFlightTask:
    """One task a worker is executing right now.

    Attributes:
        task_id: The task.
        kind: The task's kind (as the store returned it).
        lane: The lane it was claimed from.
        attempt: The 1-based number of this execution.
        lease: The claim's lease as last renewed.
    """

    task_id: int
    kind: Any
    lane: Hashable
    attempt: int
    lease: TaskLease


class TaskWorker(Generic[StateT]):
    """Claims due tasks of its lanes from one store, runs them, writes each outcome once.

    Bound once at construction: the store, the registry (or erased specs), the lanes and
    their limits, the lease TTL, the retry policy, poll timing, the shutdown grace, temp
    dirs and the clock. Each lane claims only its own free slots (slots are reserved
    before the claim round trip), lanes are visited round-robin, one heartbeat engine
    renews every in-flight lease in one statement per tick, and successes are batched
    into ``mark_tasks_succeeded_many`` when the store has it (each entry still fenced).
    Stats count what the store applied: a release the store refused is ``lease_lost``.

    Example:
        >>> worker = TaskWorker(store, registry=registry, state=app, lanes=lanes)  # doctest: +SKIP
        >>> await worker.run(shutdown_token)  # doctest: +SKIP

    Args:
        store: Claims, heartbeats and fenced writes.
        state: The application state every task body receives.
        lanes: One config per lane this worker serves.
        registry: The validated registry (its lanes must match ``lanes``).
        specs: Erased specs keyed by kind, instead of a registry.
        lease_ttl: The claim's lease duration; the heartbeat renews every third of it.
        retry_policy: The backoff for retryable failures.
        error_classifier: A product-wide failure classifier (after the spec's own).
        shutdown_grace: How long a body may run on after its context was cancelled.
        temp_dirs: Creates ``ctx.temp_dir()`` lazily; removed after every execution.
        clock: The clock for leases, heartbeats, grace and poll waits.
        poll: Poll timing (default :class:`DispatchPollConfig`).
        owner: The claim owner (default :func:`default_dispatch_owner`).
        stats: The stats recorder (default: a new one).
        partial_lanes: Serve only some of the registry's lanes (other workers serve the
            rest); a config for a lane the registry does not know is still an error.
        batch_completions: Coalesce success writes when the store supports it.

    Raises:
        TaskDispatchConfigError: When no lane is given, a lane repeats, or the lanes do
            not match the registry's.
    """

    def __init__(
        self,
        store: DispatchTaskStore[Any, Any],
        *,
        state: StateT,
        lanes: Sequence[TaskLaneConfig],
        registry: TaskRegistry[StateT, Any, Any] | None = None,
        specs: Mapping[Hashable, ErasedTaskSpec[StateT]] | None = None,
        lease_ttl: timedelta = timedelta(seconds=30),
        retry_policy: TaskRetryPolicy | None = None,
        error_classifier: TaskErrorClassifier | None = None,
        lease_control_of: Callable[
            [BaseException], TaskLeaseTermination | None
        ] = task_lease_termination_of,
        shutdown_grace: timedelta = timedelta(seconds=10),
        temp_dirs: TaskTempDirProvider | None = None,
        clock: Clock | None = None,
        poll: DispatchPollConfig | None = None,
        owner: str | None = None,
        stats: DispatchStatsRecorder | None = None,
        partial_lanes: bool = False,
        batch_completions: bool = True,
    ) -> None:
        execution = ClaimedTaskExecutionConfig(
            state=state,
            registry=registry,
            specs=specs,
            lease_ttl=lease_ttl,
            retry_policy=retry_policy or TaskRetryPolicy(),
            error_classifier=error_classifier,
            lease_control_of=lease_control_of,
            shutdown_grace=shutdown_grace,
            temp_dirs=temp_dirs,
            clock=clock or SystemClock(),
        )
        self._bind(store, lanes, execution, poll, owner, stats, None, partial_lanes)
        self._batch = batch_completions

    @classmethod
    def from_config(
        cls,
        store: DispatchTaskStore[Any, Any],
        lanes: Sequence[TaskLaneConfig],
        execution: ClaimedTaskExecutionConfig[StateT],
        *,
        poll: DispatchPollConfig | None = None,
        owner: str | None = None,
        stats: DispatchStatsRecorder | None = None,
        wake: DispatchWakeSignal | None = None,
        partial_lanes: bool = False,
        batch_completions: bool = True,
    ) -> TaskWorker[StateT]:
        """A worker over an existing :class:`ClaimedTaskExecutionConfig` (the seed's shape).

        The execution config's ``shutdown_token`` (if any) stops the worker too.
        """
        worker: TaskWorker[StateT] = cls.__new__(cls)
        worker._bind(store, lanes, execution, poll, owner, stats, wake, partial_lanes)
        worker._batch = batch_completions
        return worker

    def _bind(
        self,
        store: DispatchTaskStore[Any, Any],
        lanes: Sequence[TaskLaneConfig],
        execution: ClaimedTaskExecutionConfig[StateT],
        poll: DispatchPollConfig | None,
        owner: str | None,
        stats: DispatchStatsRecorder | None,
        wake: DispatchWakeSignal | None,
        partial_lanes: bool,
    ) -> None:
        names = [config.lane for config in lanes]
        if not names:
            raise TaskDispatchConfigError("a task worker needs at least one lane")
        if len(set(names)) != len(names):
            raise TaskDispatchConfigError(f"a lane is configured more than once: {names}")
        if execution.registry is not None:
            _check_lanes(execution.registry, names, partial=partial_lanes)
        self._store = store
        self._lanes = tuple(lanes)
        parent = execution.shutdown_token
        self._stop = parent.child_token() if parent is not None else CancellationToken()
        self._execution = replace(execution, shutdown_token=self._stop)
        self._poll = poll or DispatchPollConfig()
        self._owner = owner or default_dispatch_owner()
        self._stats = stats or DispatchStatsRecorder(names)
        self._wake = wake or DispatchWakeSignal()
        self._in_flight: dict[Hashable, int] = dict.fromkeys(names, 0)
        self._reserved: dict[Hashable, int] = dict.fromkeys(names, 0)
        self._saturated: set[Hashable] = set()
        self._running: dict[int, tuple[Hashable, ClaimedTaskExecution]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._next_lane = 0
        self._heartbeat = SharedTaskHeartbeat(
            store,
            execution.clock,
            execution.lease_ttl,
            late_wake_threshold=execution.heartbeat_late_wake_threshold,
        )
        self._completions: TaskCompletionBatcher | None = None

    @property
    def store(self) -> DispatchTaskStore[Any, Any]:
        """The store this worker claims from and writes to."""
        return self._store

    @property
    def lanes(self) -> tuple[TaskLaneConfig, ...]:
        """The lane configs."""
        return self._lanes

    @property
    def execution(self) -> ClaimedTaskExecutionConfig[StateT]:
        """The execution config (with the worker's stop token)."""
        return self._execution

    @property
    def owner(self) -> str:
        """The claim owner identity."""
        return self._owner

    @property
    def stats(self) -> DispatchStatsRecorder:
        """The stats recorder (outcomes as the store applied them)."""
        return self._stats

    @property
    def wake_signal(self) -> DispatchWakeSignal:
        """The signal that ends an idle wait (fired by :meth:`wake` and freed slots)."""
        return self._wake

    @property
    def stopping(self) -> bool:
        """Whether the worker was told to stop (no more claims)."""
        return self._stop.cancelled

    def wake(self) -> None:
        """Wake the idle worker now (for example after an enqueue in this process)."""
        self._wake.wake()

    def in_flight(self, lane: Hashable | None = None) -> int:
        """Tasks executing in ``lane`` (or in every lane)."""
        return sum(self._in_flight.values()) if lane is None else self._in_flight[lane]

    def in_flight_tasks(self) -> tuple[InFlightTask, ...]:
        """What is executing right now, one entry per task."""
        return tuple(
            InFlightTask(e.task.id, e.task.kind, lane, e.attempt, e.guard.lease)
            for lane, e in self._running.values()
        )

    def running_leases(self) -> list[TaskLease]:
        """The leases of every executing task (for :func:`sweep_task_temp_dirs`)."""
        return [execution.guard.lease for _, execution in self._running.values()]

    def free_slots(self, lane: Hashable) -> int:
        """Slots ``lane`` may still claim (limit minus in-flight and reserved)."""
        limit = self._config_of(lane).max_concurrency
        return max(limit - self._in_flight[lane] - self._reserved[lane], 0)

    def _config_of(self, lane: Hashable) -> TaskLaneConfig:
        for config in self._lanes:
            if config.lane == lane:
                return config
        raise TaskDispatchConfigError(f"lane {lane!r} is not configured in this worker")

    async def run(
        self,
        shutdown_token: CancellationToken,
        *,
        poll: DispatchPollConfig | None = None,
        clock: Clock | None = None,
    ) -> None:
        """Claim and execute until ``shutdown_token`` is cancelled, then stop cleanly.

        Each turn drains (claims round-robin until nothing is due or every lane is full),
        then waits for a wake-up, the poll interval (base after work, growing on empty
        polls and on store errors, see :class:`DispatchPollConfig`) or shutdown. On
        shutdown (or if this coroutine is cancelled) no more tasks are claimed, every
        in-flight context is cancelled, each task is released to pending without
        counting an attempt (fenced, shielded), and every execution is awaited.

        Args:
            shutdown_token: Cancel to stop the worker.
            poll: Poll timing for this run (default: the worker's).
            clock: The clock of the poll waits (default: the worker's).
        """
        clock = clock or self._execution.clock
        backoff = DispatchBackoff(poll or self._poll)
        try:
            while not shutdown_token.cancelled and not self.stopping:
                try:
                    result = await self.drain()
                except Exception as exc:
                    delay = backoff.record_error()
                    logger.warning(
                        "task dispatch claim failed (%s); retrying in %.2fs",
                        type(exc).__name__,
                        delay.total_seconds(),
                        exc_info=exc,
                        extra={"dispatch_owner": self._owner},
                    )
                else:
                    if result.total:
                        delay = backoff.record_work()
                    elif result.saturated:
                        delay = backoff.record_busy()
                    else:
                        delay = backoff.record_empty()
                if shutdown_token.cancelled or self._wake.pending:
                    self._wake.clear()  # a pending wake-up is served by the next drain
                    continue
                await race(
                    self._wake.wait(),
                    seconds=delay.total_seconds(),
                    clock=clock,
                    token=shutdown_token,
                    name="aster-forge:dispatch-wait",
                )
        finally:
            await self.shutdown()

    async def drain(self) -> DispatchDrainResult:
        """Claim round-robin over the lanes until nothing is due or every lane is full.

        A lane whose claim returned fewer tasks than asked has nothing more due and is
        skipped for the rest of the drain. Claimed tasks start executing at once.

        Raises:
            Exception: The first claim error (tasks claimed before it keep running).
        """
        claimed: dict[Hashable, int] = {}
        exhausted: set[Hashable] = set()
        start = self._next_lane % len(self._lanes)
        self._next_lane = start + 1
        order = [*self._lanes[start:], *self._lanes[:start]]
        progress = True
        while progress and not self.stopping:
            progress = False
            for config in order:
                if config.lane in exhausted:
                    continue
                count, requested = await self.claim_lane(config)
                if requested and count < requested:
                    exhausted.add(config.lane)
                if count:
                    claimed[config.lane] = claimed.get(config.lane, 0) + count
                    progress = True
        saturated = frozenset(c.lane for c in self._lanes if self.free_slots(c.lane) == 0)
        return DispatchDrainResult(claimed=claimed, saturated=saturated)

    async def claim_lane(self, config: TaskLaneConfig) -> tuple[int, int]:
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
            records = list(
                await claim_due_for_lane(
                    self._store,
                    lane,
                    requested,
                    self._owner,
                    self._execution.lease_ttl,
                    stats=self._stats,
                    clock=clock,
                )
            )
        finally:
            self._reserved[lane] -= requested
        if len(records) > requested:
            logger.error(
                "the store returned %s tasks for lane %r although %s were asked; releasing "
                "the extra ones",
                len(records),
                lane,
                requested,
            )
            await self._release_extra(records[requested:])
            records = records[:requested]
        for record in records:
            self._start(lane, record, claimed_at)
        if self.free_slots(lane) == 0:
            self._saturated.add(lane)
        return len(records), requested

    def _start(self, lane: Hashable, record: Any, claimed_at: float) -> None:
        if self._completions is None and self._batch and supports_batched_success(self._store):
            self._completions = TaskCompletionBatcher(self._store)
        execution = ClaimedTaskExecution(
            self._store,
            record,
            self._execution,
            heartbeat=self._heartbeat,
            completions=self._completions,
            claimed_at=claimed_at,
        )
        self._in_flight[lane] += 1
        self._stats.record_started(lane)
        self._running[record.id] = (lane, execution)
        task = asyncio.create_task(
            self._execute(lane, execution), name=f"aster-forge:dispatch-task-{record.id}"
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _execute(self, lane: Hashable, execution: ClaimedTaskExecution) -> None:
        try:
            await execution.run()
        except asyncio.CancelledError:
            raise  # the execution wrote (and reported) its release before re-raising
        except Exception:
            logger.exception(
                "executing task #%s failed inside the worker",
                execution.task.id,
                extra={"task_id": execution.task.id},
            )
        finally:
            self._in_flight[lane] -= 1
            self._running.pop(execution.task.id, None)
            report = execution.report
            # Stats say what the store applied; no report means nothing was written.
            outcome = report.outcome if report is not None else ClaimedTaskOutcome.STORE_ERROR
            self._stats.record_outcome(lane, outcome)
            if lane in self._saturated:
                # A full lane just freed a slot: more work may be waiting for it.
                self._saturated.discard(lane)
                self._wake.wake()

    async def _release_extra(self, records: Sequence[Any]) -> None:
        for record in records:
            if record.processing_token is None or record.lease_expires_at is None:
                continue
            lease = TaskLease(record.id, record.processing_token, record.lease_expires_at)
            try:
                await self._store.release_task_for_shutdown(lease)
            except Exception:
                logger.exception("releasing over-claimed task #%s failed", record.id)

    async def join(self) -> None:
        """Wait until every execution this worker started has finished."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        if self._completions is not None:
            await self._completions.join()
        await self._heartbeat.join()

    async def shutdown(self) -> None:
        """Stop claiming, cancel every running context, and wait for the executions.

        Each execution gives its body ``shutdown_grace`` (on the injected clock) to stop,
        then cancels it, and releases the task to pending without counting an attempt
        (fenced). If the caller is cancelled while waiting, the executions are cancelled
        (they still release, shielded) and awaited before the cancellation propagates.
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
            f"{c.lane!r}: {self._in_flight[c.lane]}/{c.max_concurrency}" for c in self._lanes
        )
        return f"TaskWorker(owner={self._owner!r}, in_flight={{{lanes}}})"


def _check_lanes(
    registry: TaskRegistry[Any, Any, Any], configured: list[Hashable], *, partial: bool
) -> None:
    unknown = [lane for lane in configured if lane not in set(registry.lanes())]
    if unknown:
        raise TaskDispatchConfigError(
            f"lane config for a lane the task registry does not know: {unknown!r}"
        )
    used = dict.fromkeys(registry.lane_of(kind) for kind in registry.kinds())
    missing = [lane for lane in used if lane not in configured]
    if missing and not partial:
        raise TaskDispatchConfigError(
            f"registered lanes without a lane config: {missing!r} "
            "(configure them, or pass partial_lanes=True when another worker serves them)"
        )
