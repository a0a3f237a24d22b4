"""The seed's entry points: thin wrappers over :class:`TaskWorker` and its parts.

Products written against the seed pass the store on every call. Each function here
builds, or reuses, the objects a :class:`TaskWorker` runs on (the worker itself, a
:class:`ClaimedTaskExecution`, the :class:`SharedTaskHeartbeat`), so there is no second
implementation. New code builds a :class:`TaskWorker`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable, Sequence
from datetime import timedelta
from typing import Any, TypeVar

from ..runtime import CancellationToken, Clock, SystemClock, race
from ._dispatch import (
    DispatchDrainResult,
    DispatchPollConfig,
    DispatchStatsRecorder,
    DispatchWakeSignal,
    TaskLaneConfig,
)
from ._execution import (
    ClaimedTaskExecution,
    ClaimedTaskExecutionConfig,
    ClaimedTaskReport,
    cancel_executions,
)
from ._heartbeat import SharedTaskHeartbeat
from ._lease import TaskLeaseGuard
from ._worker import TaskWorker, recorded_claim
from .errors import TaskDispatchConfigError
from .protocols import (
    ClaimedTaskRecord,
    ClaimedTaskStore,
    DispatchTaskStore,
    ExecutableTaskRecord,
    TaskClaimStore,
    TaskHeartbeatStore,
)

__all__ = [
    "TaskDispatcher",
    "claim_due_for_lane",
    "drain_dispatcher",
    "run_claimed_task_batch_with_store",
    "run_claimed_task_with_store",
    "run_dispatch_worker",
    "run_task_heartbeat",
]

StateT = TypeVar("StateT")
TaskT = TypeVar("TaskT", bound=ClaimedTaskRecord[Any])


class TaskDispatcher(TaskWorker[StateT]):
    """The seed's dispatcher: a :class:`TaskWorker` bound to its store on first use.

    :func:`drain_dispatcher`, :func:`run_dispatch_worker` and :meth:`claim_lane` take the
    store per call; the first call binds it and later calls must pass the same store.
    Lanes may be a subset of the registry's (another process may serve the rest). New
    code builds a :class:`TaskWorker` directly.

    Args:
        lanes: One config per lane (each lane at most once).
        execution: How claimed tasks are executed (its ``lease_ttl`` is the claim TTL).
        owner: The claim owner (default :func:`default_dispatch_owner`).
        stats: The stats recorder (default: a new one).
        wake: The wake signal (default: a new one).
        shared_heartbeat: Accepted for compatibility: there is one heartbeat engine.
        batch_completions: Coalesce success writes into ``mark_tasks_succeeded_many``
            when the store has it.

    Raises:
        TaskDispatchConfigError: When no lane is given or a lane repeats.
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
        del shared_heartbeat  # one engine: nothing left to choose
        self._configure(lanes, execution, None, owner, stats, wake, True)
        self._batch = batch_completions
        self._bound = False

    def worker_for(self, store: DispatchTaskStore[Any, Any]) -> TaskWorker[StateT]:
        """Bind ``store`` on first use and return this worker.

        Raises:
            TaskDispatchConfigError: When a different store is passed later.
        """
        if not self._bound:
            self._attach(store)
            self._bound = True
        elif store is not self.store:
            raise TaskDispatchConfigError("a TaskDispatcher is bound to its first store")
        return self

    async def claim_lane(
        self, store: DispatchTaskStore[Any, Any], config: TaskLaneConfig
    ) -> tuple[int, int]:
        """Claim one lane's free slots and start them; returns ``(claimed, requested)``."""
        return await self.worker_for(store)._claim_lane(config)


async def drain_dispatcher(
    store: DispatchTaskStore[Any, Any], dispatcher: TaskDispatcher[Any]
) -> DispatchDrainResult:
    """Claim round-robin until nothing is due or every lane is full; see :meth:`TaskWorker.drain`.

    Returns:
        What was claimed per lane, and which lanes ended full.
    """
    return await dispatcher.worker_for(store).drain()


async def run_dispatch_worker(
    store: DispatchTaskStore[Any, Any],
    dispatcher: TaskDispatcher[Any],
    shutdown_token: CancellationToken,
    *,
    wake: DispatchWakeSignal | None = None,
    poll: DispatchPollConfig | None = None,
    clock: Clock | None = None,
) -> None:
    """Run the dispatch loop until ``shutdown_token`` is cancelled; see :meth:`TaskWorker.run`.

    Args:
        store: Claims, heartbeats and fenced writes.
        dispatcher: Lanes, limits, execution config and stats.
        shutdown_token: Cancel to stop the worker.
        wake: An extra wake signal (an enqueue hook, a NOTIFY listener); the
            dispatcher's own signal is always watched.
        poll: Poll timing (default :class:`DispatchPollConfig`).
        clock: The clock for poll waits (default: the execution config's clock).
    """
    worker = dispatcher.worker_for(store)
    if wake is not None and wake is not worker.wake_signal:
        wake.forward_to(worker.wake_signal)
    await worker.run(shutdown_token, poll=poll, clock=clock)


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
    """Claim up to ``limit`` due tasks of ``lane`` (the seed's claim entry point).

    Calls ``store.claim_due_for_lane`` (each record carries a fresh processing token) and
    records in ``stats`` the claim count, rescued claims (records whose ``rescued`` is
    true), the round trip and the queue lag of the oldest claimed task (``now - run_at``).
    ``limit <= 0`` claims nothing without a round trip.

    Returns:
        The claimed records.
    """
    if limit <= 0:
        return ()
    call = store.claim_due_for_lane(lane, limit, owner, lease_ttl)
    return await recorded_claim(lane, call, lambda records: records, stats, clock or SystemClock())


async def run_claimed_task_with_store(
    store: ClaimedTaskStore,
    task: ExecutableTaskRecord[Any],
    config: ClaimedTaskExecutionConfig[StateT],
    *,
    claimed_at: float | None = None,
) -> ClaimedTaskReport:
    """Run one claimed task through its whole lifecycle (the seed's single-task entry point).

    One :class:`ClaimedTaskExecution` with a heartbeat engine of its own writes exactly
    one fenced outcome (see its contract): success; retry (RETRYABLE with attempts left:
    pending after the policy's delay, attempt counted); failed (PERMANENT or MANUAL, or
    no attempts left); cancelled; snoozed; release when the worker stops (attempt not
    counted). A lost lease writes nothing; a cancelled caller still gets the release
    written (shielded). The temp dir is removed after every outcome.

    Args:
        store: The heartbeat and execution store.
        task: The claimed record.
        config: The execution configuration.
        claimed_at: ``config.clock.monotonic()`` read before the claim was sent.

    Raises:
        TaskInvalidValueError: When the record carries no processing token or expiry.
    """
    (report,) = await run_claimed_task_batch_with_store(
        store, [task], config, claimed_at=claimed_at
    )
    return report


async def run_claimed_task_batch_with_store(
    store: ClaimedTaskStore,
    tasks: Sequence[ExecutableTaskRecord[Any]],
    config: ClaimedTaskExecutionConfig[StateT],
    *,
    claimed_at: float | None = None,
) -> list[ClaimedTaskReport]:
    """Execute claimed tasks concurrently, one heartbeat engine for the batch.

    See :func:`run_claimed_task_with_store`; every record is checked to be claimed
    before any body starts.

    Args:
        store: The heartbeat and execution store.
        tasks: Records returned by a lane claim (each with its processing token).
        config: The execution configuration.
        claimed_at: ``config.clock.monotonic()`` read before the claim was sent (the
            local lease deadline starts there); default: now.

    Returns:
        One report per task, in input order.

    Raises:
        TaskInvalidValueError: When a record carries no processing token or expiry.
    """
    heartbeat = SharedTaskHeartbeat(
        store,
        config.clock,
        config.lease_ttl,
        late_wake_threshold=config.heartbeat_late_wake_threshold,
    )
    executions = [
        ClaimedTaskExecution(store, task, config, heartbeat=heartbeat, claimed_at=claimed_at)
        for task in tasks
    ]
    runs = [execution.start() for execution in executions]
    try:
        await asyncio.gather(*(execution.settled() for execution in executions))
    except asyncio.CancelledError:
        await cancel_executions(executions)  # stop the bodies (abandoning stubborn ones)
        raise
    finally:
        await heartbeat.join()
    reports: list[ClaimedTaskReport] = []
    for e, run in zip(executions, runs, strict=True):
        report = e.report if e.abandoned else run.result()  # a run's own error is raised
        assert report is not None  # written, refused, or (abandoned) nothing written
        reports.append(report)
    return reports


async def run_task_heartbeat(
    store: TaskHeartbeatStore,
    guard: TaskLeaseGuard,
    *,
    stop: CancellationToken,
    late_wake_threshold: timedelta | None = None,
) -> None:
    """Renew one guard's lease until ``stop`` is cancelled or the lease is lost.

    The seed's per-task entry point: a :class:`SharedTaskHeartbeat` with this one guard,
    so the contract is the engine's (renewal every ``lease_ttl / 3``, a fenced-out
    renewal marks the lease lost, failures retried until the safety deadline, a renewal
    in flight when ``stop`` is cancelled is abandoned). Worker shutdown does not end it.
    It never raises for store failures.

    Args:
        store: The heartbeat store.
        guard: The lease guard shared with the task's context (holds the clock and TTL).
        stop: Cancel to end the loop (the executor does so when the body finished).
        late_wake_threshold: How late a tick may be before a warning (default: half an
            interval).
    """
    engine = SharedTaskHeartbeat(
        store, guard.clock, guard.lease_ttl, late_wake_threshold=late_wake_threshold
    )
    engine.register(guard)
    try:
        await race(engine.join(), token=stop, name="aster-forge:task-heartbeat-stop")
    finally:
        engine.unregister(guard)
        await engine.join()
