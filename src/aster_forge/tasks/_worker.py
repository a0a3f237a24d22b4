"""TaskWorker: the one object that owns claim -> run -> write for a store and its lanes."""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

from ..runtime import CancellationToken
from ..runtime._internal import Clock, RaceWinner, race, shielded
from ._completion import TaskCompletionBatcher
from ._dispatch import (
    ClaimedTaskOutcome,
    DispatchBackoff,
    DispatchDrainResult,
    DispatchPollConfig,
    DispatchStatsRecorder,
    DispatchWakeSignal,
    TaskLaneConfig,
    default_dispatch_owner,
)
from ._execution import ClaimedTaskExecution, ClaimedTaskExecutionConfig, cancel_executions
from ._heartbeat import SharedTaskHeartbeat, task_heartbeat_interval
from ._lease import TaskLease
from ._rate_limit import rate_window_end
from ._records import TaskCompletion
from ._registry import TaskRegistry
from .errors import TaskDispatchConfigError
from .protocols import DispatchTaskStore

__all__ = ["InFlightTask", "TaskWorker"]

logger = logging.getLogger("aster_forge.tasks.dispatch")

StateT = TypeVar("StateT")
_R = TypeVar("_R")

#: How often a running worker asks its store to stage tasks that came due.
STAGE_INTERVAL_SECONDS = 1.0

#: The weight of the newest sample in a lane's running averages (body time, claim trip).
_AVERAGE_WEIGHT = 0.2


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


async def recorded_claim(
    lane: Hashable,
    call: Awaitable[_R],
    records_of: Callable[[_R], Sequence[Any]],
    stats: DispatchStatsRecorder | None,
    clock: Clock,
) -> _R:
    """Await a claim round trip, recording its count, rescues, latency and queue lag."""
    started = clock.monotonic()
    try:
        result = await call
    except Exception:
        if stats is not None:
            stats.record_claim_error(lane)
        raise
    if stats is not None:
        records = records_of(result)
        latency = max(clock.monotonic() - started, 0.0)
        now = clock.now()
        lag = max(((now - record.run_at).total_seconds() for record in records), default=0.0)
        stats.record_claim(
            lane,
            claimed=len(records),
            rescued=sum(1 for record in records if record.rescued),
            latency_seconds=latency,
            queue_lag_seconds=max(lag, 0.0),
        )
    return result


def _as_records(records: Sequence[Any]) -> Sequence[Any]:
    return records


def _claimed_part(result: tuple[Sequence[bool], Sequence[Any]]) -> Sequence[Any]:
    return result[1]  # mark_tasks_succeeded_and_claim: (success results, claimed records)


class TaskWorker(Generic[StateT]):
    """Claims due tasks of its lanes from one store, runs them, writes each outcome once.

    Bound once: the store, the lanes and their limits, poll timing and (through
    ``execution``) the registry, state, lease TTL, retry policy, shutdown grace, temp
    dirs and clock. Each lane claims only its free slots (reserved before the round
    trip), lanes are visited round-robin, one heartbeat engine renews every in-flight
    lease in one statement per tick, and successes are batched into
    ``mark_tasks_succeeded_many`` when the store has it (each entry still fenced). Stats
    count what the store applied: a release the store refused is ``lease_lost``.

    Example:
        >>> worker = TaskWorker(store, lanes=lanes, execution=config)  # doctest: +SKIP
        >>> await worker.run(shutdown_token)  # doctest: +SKIP

    Args:
        store: Claims, heartbeats and fenced writes.
        lanes: One config per lane this worker serves.
        execution: How claimed tasks run (its ``shutdown_token``, if any, stops the worker).
        poll: Poll timing (default :class:`DispatchPollConfig`).
        owner: The claim owner (default :func:`default_dispatch_owner`).
        stats: The stats recorder (default: a new one).
        wake: The wake signal (default: a new one).
        partial_lanes: Serve only some of the registry's lanes (other workers serve the
            rest); a config for a lane the registry does not know is still an error.
        batch_completions: Coalesce success writes when the store supports it.

    Attributes:
        lanes: The lane configs.
        execution: The execution config (with the worker's stop token).
        owner: The claim owner identity.
        stats: The stats recorder (outcomes as the store applied them).
        wake_signal: Ends an idle wait (fired by :meth:`wake` and by freed slots).

    Raises:
        TaskDispatchConfigError: When no lane is given, a lane repeats, or (with a
            registry) a registry lane has no config or a config names an unknown lane.
    """

    def __init__(
        self,
        store: DispatchTaskStore[Any, Any],
        *,
        lanes: Sequence[TaskLaneConfig],
        execution: ClaimedTaskExecutionConfig[StateT],
        poll: DispatchPollConfig | None = None,
        owner: str | None = None,
        stats: DispatchStatsRecorder | None = None,
        wake: DispatchWakeSignal | None = None,
        partial_lanes: bool = False,
        batch_completions: bool = True,
    ) -> None:
        names = [config.lane for config in lanes]
        if not names:
            raise TaskDispatchConfigError("a task worker needs at least one lane")
        if len(set(names)) != len(names):
            raise TaskDispatchConfigError(f"a lane is configured more than once: {names}")
        if execution.registry is not None:
            _check_lanes(execution.registry, names, partial=partial_lanes)
        parent = execution.shutdown_token
        self._stop = parent.child_token() if parent is not None else CancellationToken()
        self._store = store
        self.lanes = tuple(lanes)
        self.execution = replace(execution, shutdown_token=self._stop)
        # Executions get their own tokens, which the worker cancels when it stops: no
        # child registration (a weak reference) per claimed task.
        self._run_config = replace(execution, shutdown_token=None)
        self.owner = owner or default_dispatch_owner()
        self.stats = stats or DispatchStatsRecorder(names)
        self.wake_signal = wake or DispatchWakeSignal()
        self._poll = poll or DispatchPollConfig()
        self._configs = {config.lane: config for config in lanes}
        self._in_flight: dict[Hashable, int] = dict.fromkeys(names, 0)
        self._reserved: dict[Hashable, int] = dict.fromkeys(names, 0)
        self._saturated: set[Hashable] = set()
        # Rate-limited lanes whose last claim came back short: the monotonic time
        # their window refills. No claim of theirs runs before it, unless woken.
        self._refills: dict[Hashable, float] = {}
        self._handed_over: set[int] = set()
        # Claimed tasks waiting for a slot (their leases renewed meanwhile), the tasks
        # whose slot was freed when their body returned (success still being written),
        # and each lane's average body time, which bounds how many may wait.
        self._waiting: dict[Hashable, deque[ClaimedTaskExecution]] = {n: deque() for n in names}
        self._released: set[int] = set()
        self._released_in: dict[Hashable, int] = dict.fromkeys(names, 0)
        self._body_seconds: dict[Hashable, float | None] = dict.fromkeys(names)
        self._claim_seconds: dict[Hashable, float | None] = dict.fromkeys(names)
        self._heartbeat_seconds = task_heartbeat_interval(execution.lease_ttl).total_seconds()
        # Claim round trips on the wire: join() waits for them and for what they bring.
        self._claiming = 0
        self._landed: asyncio.Event | None = None
        self._running: dict[int, tuple[Hashable, ClaimedTaskExecution]] = {}
        self._tasks: dict[asyncio.Task[Any], ClaimedTaskExecution] = {}
        self._next_lane = 0
        self._heartbeat = SharedTaskHeartbeat(
            store,
            execution.clock,
            execution.lease_ttl,
            late_wake_threshold=execution.heartbeat_late_wake_threshold,
        )
        self._completions: TaskCompletionBatcher | None = None
        if batch_completions:
            # A store that claims in the success statement refills the freed slots there.
            write = self._succeed_and_refill if store.claims_with_success else None
            self._completions = TaskCompletionBatcher(
                store, write=write, max_in_flight=store.success_writes_in_flight
            )
        self._let_go: Callable[[], None] | None = None
        # Bound once, and one copy of the context for the done callbacks (the run's, see
        # run()): per execution, a bound method and a context copy are objects the
        # garbage collector tracks while the task runs.
        self._on_finished = self._finish
        self._on_done = self._finished
        self._callback_context = contextvars.copy_context()
        self._stop.add_cancel_callback(self._stop_running)
        self._crashed: BaseException | None = None

    @property
    def store(self) -> DispatchTaskStore[Any, Any]:
        """The store this worker claims from and writes to."""
        return self._store

    @property
    def stopping(self) -> bool:
        """Whether the worker was told to stop (no more claims)."""
        return self._stop.cancelled

    @property
    def crashed(self) -> BaseException | None:
        """What crashed :meth:`run`'s loop, set before it releases its tasks (else ``None``)."""
        return self._crashed

    def wake(self) -> None:
        """Wake the idle worker now (for example after an enqueue in this process)."""
        self.wake_signal.wake()

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
        """Bodies ``lane`` may still start (limit minus running, waiting and reserved)."""
        config = self._configs.get(lane)
        if config is None:
            raise TaskDispatchConfigError(f"lane {lane!r} is not configured in this worker")
        taken = self._in_flight[lane] + len(self._waiting[lane]) + self._reserved[lane]
        return max(config.max_concurrency - taken, 0)

    def waiting(self, lane: Hashable | None = None) -> int:
        """Claimed tasks of ``lane`` (or of every lane) waiting for a slot."""
        if lane is None:
            return sum(len(queue) for queue in self._waiting.values())
        return len(self._waiting[lane])

    def _ahead(self, lane: Hashable) -> int:
        """How many of ``lane``'s tasks may wait for a slot: none while its bodies are
        shorter than a claim's round trip (the success statement refills the slots as
        fast), else as many as it starts within one heartbeat interval, at most its limit.
        """
        body, trip = self._body_seconds[lane], self._claim_seconds[lane]
        if body is None or trip is None or body <= trip:
            return 0
        limit = self._configs[lane].max_concurrency
        return min(limit, int(limit * self._heartbeat_seconds / body))

    def _room(self, lane: Hashable) -> int:
        """How many tasks a claim of ``lane`` may bring: free slots plus :meth:`_ahead`."""
        limit = self._configs[lane].max_concurrency
        taken = self._in_flight[lane] + len(self._waiting[lane]) + self._reserved[lane]
        return max(limit + self._ahead(lane) - taken, 0)

    async def run(
        self,
        shutdown_token: CancellationToken,
        *,
        poll: DispatchPollConfig | None = None,
        clock: Clock | None = None,
    ) -> None:
        """Claim and execute until ``shutdown_token`` is cancelled, then stop cleanly.

        Each turn drains, then waits for a wake-up, the poll interval (base after work,
        growing on empty polls and on store errors, see :class:`DispatchPollConfig`) or
        shutdown. At most once a second (on ``clock``) a turn first calls the store's
        ``stage_waiting_tasks`` when it has one (PostgreSQL: see
        ``background_tasks_table``'s ``waiting``); a failure there is logged, and
        claims still find every due task. On shutdown (or cancellation) nothing more is claimed and
        :meth:`shutdown` releases and awaits every execution. An error that escapes the
        loop itself (claim errors do not: they are retried) is logged at ERROR and set as
        :attr:`crashed` at once; then the executions are released and it is raised.

        Args:
            shutdown_token: Cancel to stop the worker.
            poll: Poll timing for this run (default: the worker's).
            clock: The clock of the poll waits (default: the worker's).
        """
        clock = clock or self.execution.clock
        backoff = DispatchBackoff(poll or self._poll)
        self._callback_context = contextvars.copy_context()
        staged_at: float | None = None
        try:
            while not shutdown_token.cancelled and not self.stopping:
                if staged_at is None or clock.monotonic() - staged_at >= STAGE_INTERVAL_SECONDS:
                    staged_at = clock.monotonic()
                    await self._stage_waiting()
                try:
                    result = await self.drain()
                except Exception as exc:
                    delay = backoff.record_error()
                    logger.warning(
                        "task dispatch claim failed (%s); retrying in %.2fs",
                        type(exc).__name__,
                        delay.total_seconds(),
                        exc_info=exc,
                        extra={"dispatch_owner": self.owner},
                    )
                else:
                    if result.total:
                        delay = backoff.record_work()
                    elif result.saturated:
                        delay = backoff.record_busy()
                    else:
                        delay = backoff.record_empty()
                if shutdown_token.cancelled or self.wake_signal.pending:
                    self.wake_signal.clear()  # a pending wake-up is served by the next drain
                    self._refills.clear()  # new work may be due: one claim checks the budget
                    continue
                winner = await race(
                    self.wake_signal.wait(),
                    seconds=self._until_refill(delay.total_seconds()),
                    clock=clock,
                    token=shutdown_token,
                    name="aster-forge:dispatch-wait",
                )
                if winner is RaceWinner.DONE:
                    self._refills.clear()
        except Exception as exc:
            # Said now: releasing the running tasks below may take their whole grace.
            self._crashed = exc
            logger.error(
                "the task worker's loop crashed (%s: %s); it claims nothing more and "
                "releases its %s running tasks",
                type(exc).__name__,
                exc,
                len(self._running),
                exc_info=exc,
                extra={"dispatch_owner": self.owner},
            )
            raise
        finally:
            await self.shutdown()

    def _until_refill(self, seconds: float) -> float:
        """The wait: ``seconds``, cut short when a rate-limited lane refills first."""
        if not self._refills:
            return seconds
        refill = min(self._refills.values()) - self.execution.clock.monotonic()
        return max(min(seconds, refill), 0.0)

    def _rate_waiting(self, config: TaskLaneConfig) -> bool:
        """Whether ``config``'s lane is rate limited and its window has not refilled."""
        refill = self._refills.get(config.lane)
        if refill is None:
            return False
        if self.execution.clock.monotonic() < refill:
            return True
        del self._refills[config.lane]
        return False

    def _note_rate(self, config: TaskLaneConfig, claimed: int, requested: int) -> None:
        """After a short claim of a rate-limited lane, wait for its next window (the
        earliest of the lane's and its partitions'): the budget may be spent, and
        polling before the refill would claim nothing."""
        rates = [r for r in (config.rate_limit, config.partition_rate_limit) if r is not None]
        if not rates or claimed >= requested:
            return
        clock = self.execution.clock
        now = clock.now()
        left = min(rate_window_end(now, period) for _, period in rates) - now
        self._refills[config.lane] = clock.monotonic() + left.total_seconds()

    async def _stage_waiting(self) -> None:
        try:
            await self._store.stage_waiting_tasks()
        except Exception as exc:
            logger.warning(
                "moving tasks that came due into the claim index failed (%s); "
                "claims still find them",
                type(exc).__name__,
                exc_info=exc,
                extra={"dispatch_owner": self.owner},
            )

    async def drain(self) -> DispatchDrainResult:
        """Claim round-robin over the lanes until nothing is due or every lane is full.

        A lane whose claim returned fewer tasks than asked has nothing more due and is
        skipped for the rest of the drain. Claimed tasks start executing at once.

        Raises:
            Exception: The first claim error (tasks claimed before it keep running).
        """
        claimed: dict[Hashable, int] = {}
        exhausted: set[Hashable] = set()
        start = self._next_lane % len(self.lanes)
        self._next_lane = start + 1
        order = [*self.lanes[start:], *self.lanes[:start]]
        progress = True
        while progress and not self.stopping:
            progress = False
            for config in order:
                if config.lane in exhausted:
                    continue
                count, requested = await self._claim_lane(config)
                if requested and count < requested:
                    exhausted.add(config.lane)
                if count:
                    claimed[config.lane] = claimed.get(config.lane, 0) + count
                    progress = True
        saturated = frozenset(c.lane for c in self.lanes if self._room(c.lane) == 0)
        return DispatchDrainResult(claimed=claimed, saturated=saturated)

    async def _claim_lane(self, config: TaskLaneConfig) -> tuple[int, int]:
        """Claim up to the lane's room and start what was claimed (the rest waits).

        Returns ``(claimed, requested)``; ``requested`` is 0 when the lane was full.
        """
        lane = config.lane
        requested = self._room(lane)
        if config.claim_batch is not None:
            requested = min(requested, config.claim_batch)
        if requested <= 0 or self.stopping or self._rate_waiting(config):
            return 0, 0
        self._reserved[lane] += requested
        self._claiming += 1
        clock = self.execution.clock
        claimed_at = clock.monotonic()
        try:
            try:
                call = self._store.claim_due_for_lane(
                    lane,
                    requested,
                    self.owner,
                    self.execution.lease_ttl,
                    cluster_limit=config.cluster_limit,
                    partition_limit=config.partition_limit,
                    rate_limit=config.rate_limit,
                    partition_rate_limit=config.partition_rate_limit,
                )
                records = await recorded_claim(lane, call, _as_records, self.stats, clock)
            finally:
                self._reserved[lane] -= requested
            self._note_rate(config, len(records), requested)
            self._learn(self._claim_seconds, lane, clock.monotonic() - claimed_at)
            count = await self._start_claimed(lane, records, requested, claimed_at)
        finally:
            self._claim_landed()
        if self._room(lane) == 0:
            self._saturated.add(lane)
        return count, requested

    def _claim_landed(self) -> None:
        self._claiming -= 1
        if not self._claiming and self._landed is not None:
            self._landed.set()
            self._landed = None

    def _execution(self, lane: Hashable, record: Any, claimed_at: float) -> ClaimedTaskExecution:
        return ClaimedTaskExecution(
            self._store,
            record,
            self._run_config,
            heartbeat=self._heartbeat,
            completions=self._completions,
            claimed_at=claimed_at,
            on_finished=self._on_finished,
            lane=lane,
        )

    def _hold(self, lane: Hashable, record: Any, claimed_at: float) -> None:
        """Keep a claimed task until a slot frees; the heartbeat renews its lease."""
        execution = self._execution(lane, record, claimed_at)
        self._heartbeat.register(execution.guard)
        self._waiting[lane].append(execution)

    def _start_waiting(self, lane: Hashable) -> None:
        """Start waiting tasks while ``lane`` has free slots (no round trip)."""
        queue, limit = self._waiting[lane], self._configs[lane].max_concurrency
        while queue and self._in_flight[lane] < limit and not self.stopping:
            execution = queue.popleft()
            if execution.guard.lease_lost:  # renewal refused while it waited
                self._heartbeat.unregister(execution.guard)
                self.stats.record_outcome(lane, ClaimedTaskOutcome.LEASE_LOST)
                continue
            self._launch(lane, execution)

    def _start(self, lane: Hashable, record: Any, claimed_at: float) -> None:
        self._launch(lane, self._execution(lane, record, claimed_at))

    def _launch(self, lane: Hashable, execution: ClaimedTaskExecution) -> None:
        record = execution.task
        self._in_flight[lane] += 1
        self.stats.record_started(lane)
        if not self._running and self._let_go is None:
            self._let_go = self._store.keep_connection()
        self._running[record.id] = (lane, execution)
        if self.stopping:
            execution.guard.token.cancel()  # claimed while stopping: released after its grace
        task = execution.start()
        self._tasks[task] = execution
        task.add_done_callback(self._on_done, context=self._callback_context)

    async def _release_waiting(self) -> None:
        """Give back the claimed tasks that never started (fenced, no attempt counted)."""
        for lane, queue in self._waiting.items():
            while queue:
                execution = queue.popleft()
                self._heartbeat.unregister(execution.guard)
                try:
                    released = await self._store.release_task_for_shutdown(execution.guard.lease)
                except Exception:
                    logger.exception("releasing waiting task #%s failed", execution.task.id)
                    outcome = ClaimedTaskOutcome.STORE_ERROR
                else:
                    outcome = (
                        ClaimedTaskOutcome.RELEASED if released else ClaimedTaskOutcome.LEASE_LOST
                    )
                self.stats.record_outcome(lane, outcome)

    def _stop_running(self) -> None:
        for _, execution in list(self._running.values()):
            execution.guard.token.cancel()

    def _finished(self, task: asyncio.Task[Any]) -> None:
        execution = self._tasks.pop(task, None)
        error = None if task.cancelled() else task.exception()
        if error is not None and not isinstance(error, KeyboardInterrupt | SystemExit):
            logger.error(
                "executing task #%s failed inside the worker",
                task.get_name().rsplit("-", 1)[-1],
                exc_info=error,
            )
        if execution is None:
            return
        if not execution.detached:
            self._finish(execution)
            return
        # The body returned and its success is queued (finished by its write). Where
        # bodies outlast a claim's round trip its slot is free now, while at most as
        # many of the lane's successes as it has slots wait for their write (a lane holds
        # at most three times its limit in leases: bodies, tasks waiting for a slot,
        # successes being written); shorter bodies keep it until the success statement
        # that also claims their successors returns.
        entry = self._running.get(execution.task.id)
        if entry is None or execution.task.id in self._handed_over:
            return  # its write freed the slot already, or passes it to a task it claims
        lane = entry[0]
        self._learn_body_time(lane, execution)
        if self._ahead(lane) and self._released_in[lane] < self._configs[lane].max_concurrency:
            self._released.add(execution.task.id)
            self._released_in[lane] += 1
            self._free(lane)

    def _learn_body_time(self, lane: Hashable, execution: ClaimedTaskExecution) -> None:
        # The body's own time: the wait for the loop to start it grows with a burst's
        # size, and would pass a burst of instant bodies off as slow ones.
        if execution.body_seconds is not None:
            self._learn(self._body_seconds, lane, execution.body_seconds)

    @staticmethod
    def _learn(averages: dict[Hashable, float | None], lane: Hashable, took: float) -> None:
        took = max(took, 1e-6)
        average = averages[lane]
        averages[lane] = took if average is None else average + _AVERAGE_WEIGHT * (took - average)

    def _finish(self, execution: ClaimedTaskExecution) -> None:
        """Free the slot of a finished (or abandoned) execution and record its outcome."""
        task_id = execution.task.id
        entry = self._running.pop(task_id, None)
        if entry is None:
            return  # already accounted (abandoned earlier)
        if not self._running and self._let_go is not None:
            self._let_go()
            self._let_go = None
        lane = entry[0]
        if execution.abandoned:
            self._tasks = {t: e for t, e in self._tasks.items() if e is not execution}
        # Stats say what the store applied; no outcome means nothing was written.
        self.stats.record_outcome(lane, execution.outcome or ClaimedTaskOutcome.STORE_ERROR)
        if task_id in self._released:
            self._released.discard(task_id)  # its slot was freed when its body returned
            self._released_in[lane] -= 1
        elif task_id in self._handed_over:
            self._handed_over.discard(task_id)  # its slot went to a task claimed with it
        else:
            if not execution.detached:
                self._learn_body_time(lane, execution)
            self._free(lane)

    def _free(self, lane: Hashable) -> None:
        self._in_flight[lane] -= 1
        self._start_waiting(lane)
        self._wake_if_freed(lane)

    def _wake_if_freed(self, lane: Hashable) -> None:
        if lane in self._saturated and self._room(lane) > 0:
            # A full lane just freed a slot: more work may be waiting for it.
            self._saturated.discard(lane)
            self.wake_signal.wake()

    async def _succeed_and_refill(self, completions: list[TaskCompletion]) -> Sequence[bool]:
        """Write successes and claim the slots they free, in one store call.

        The lane most of the batch ran in is refilled: its room, plus the slots the
        batch's tasks in it still hold (a slot is normally freed when the body returns),
        which pass straight to the tasks claimed with them once the statement returned.
        """
        store = self._store
        lanes = [
            self._running[c.lease.task_id][0]
            for c in completions
            if c.lease.task_id in self._running
        ]
        if not lanes or self.stopping:
            results: Sequence[bool] = await store.mark_tasks_succeeded_many(completions)
            return results
        lane = max(dict.fromkeys(lanes), key=lanes.count)
        config = self._configs[lane]
        held = [
            c.lease.task_id
            for c in completions
            if c.lease.task_id not in self._released
            and c.lease.task_id not in self._handed_over
            and self._running.get(c.lease.task_id, (None,))[0] == lane
        ]
        limit = self._room(lane) + len(held)
        # Marked now, so a body's early release cannot free these slots a second time.
        self._handed_over.update(held)
        if config.claim_batch is not None:
            limit = min(limit, config.claim_batch)
        if self._rate_waiting(config):
            limit = 0  # only the successes: the window's budget is spent
        self._reserved[lane] += limit
        clock = self.execution.clock
        claimed_at = clock.monotonic()
        try:
            call = store.mark_tasks_succeeded_and_claim(
                completions,
                lane,
                limit,
                self.owner,
                self.execution.lease_ttl,
                cluster_limit=config.cluster_limit,
                partition_limit=config.partition_limit,
                rate_limit=config.rate_limit,
                partition_rate_limit=config.partition_rate_limit,
            )
            results, records = await recorded_claim(lane, call, _claimed_part, self.stats, clock)
            if limit > 0:
                self._note_rate(config, len(records), limit)
        except BaseException:
            self._handed_over.difference_update(held)  # their writes free the slots
            raise
        finally:
            self._reserved[lane] -= limit
        self._in_flight[lane] -= len(held)  # their slots pass to the tasks just claimed
        await self._start_claimed(lane, records, limit, claimed_at)
        for touched in dict.fromkeys(lanes):
            if self._room(touched) == 0:
                self._saturated.add(touched)
            else:
                self._wake_if_freed(touched)
        return results

    async def _start_claimed(
        self, lane: Hashable, records: Sequence[Any], limit: int, claimed_at: float
    ) -> int:
        """Start the claimed ``records`` of ``lane``; how many started (at most ``limit``).

        Records beyond ``limit`` (a store that ignored it) are released unrun.
        """
        extra = records[limit:]
        if extra:
            logger.error(
                "the store returned %s tasks for lane %r although %s were asked; "
                "releasing the extra ones",
                len(records),
                lane,
                limit,
            )
        unrun = list(extra)
        slots = self._configs[lane].max_concurrency
        self._start_waiting(lane)  # slots handed over by a success go to those first
        for record in records[:limit]:
            if self._in_flight[lane] < slots and not self._waiting[lane]:
                self._start(lane, record, claimed_at)
            elif self.stopping:
                unrun.append(record)  # claimed while stopping, and no slot: never started
            else:
                self._hold(lane, record, claimed_at)
        for record in unrun:
            if record.processing_token is None or record.lease_expires_at is None:
                continue
            lease = TaskLease(record.id, record.processing_token, record.lease_expires_at)
            try:
                await self._store.release_task_for_shutdown(lease)
            except Exception:
                logger.exception("releasing unstarted task #%s failed", record.id)
        return min(len(records), limit)

    async def join(self) -> None:
        """Wait until every execution this worker started has finished (or was abandoned).

        A claim on the wire (a drain running beside this call) is waited for, and so
        are the tasks it brings, and those a success statement claimed with it.
        """
        while True:
            while self._tasks:
                await asyncio.gather(*(e.settled() for e in list(self._tasks.values())))
                await asyncio.sleep(0)  # the finished tasks' callbacks free their slots
            if self._claiming:
                self._landed = self._landed or asyncio.Event()
                await self._landed.wait()
                continue
            if self._completions is not None:
                await self._completions.join()
            if not self._tasks and not self._claiming:
                break
        await self._heartbeat.join()

    async def shutdown(self) -> None:
        """Stop claiming, cancel every running context, and wait for the executions.

        Each execution gives its body ``shutdown_grace`` (on the injected clock) to stop,
        then cancels it, and releases the task to pending without counting an attempt
        (fenced). If the caller is cancelled while waiting, the bodies are cancelled at
        once (the releases are still written, shielded; a body ignoring it is abandoned)
        and awaited before the cancellation propagates.
        """
        self._stop.cancel()
        await shielded(self._release_waiting(), name="aster-forge:release-waiting")
        try:
            await self.join()
        except asyncio.CancelledError:
            await cancel_executions(list(self._tasks.values()))
            raise
        finally:
            if self._let_go is not None:  # nothing of ours runs on it any more
                self._let_go()
                self._let_go = None

    def __repr__(self) -> str:
        lanes = ", ".join(
            f"{c.lane!r}: {self._in_flight[c.lane]}/{c.max_concurrency}" for c in self.lanes
        )
        return f"{type(self).__name__}(owner={self.owner!r}, in_flight={{{lanes}}})"


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
