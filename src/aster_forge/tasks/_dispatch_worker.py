"""The seed's dispatch entry points, as thin wrappers over :class:`TaskWorker`."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, Generic, TypeVar

from ..runtime import CancellationToken, Clock
from ._dispatch import DispatchDrainResult, DispatchPollConfig, DispatchWakeSignal, TaskLaneConfig
from ._dispatch_stats import DispatchStatsRecorder
from ._execution import ClaimedTaskExecutionConfig
from ._lease import TaskLease
from ._worker import TaskWorker
from .errors import TaskDispatchConfigError
from .protocols import DispatchTaskStore

__all__ = ["TaskDispatcher", "drain_dispatcher", "run_dispatch_worker"]

StateT = TypeVar("StateT")


class TaskDispatcher(Generic[StateT]):
    """The seed's dispatcher: lanes and an execution config, bound to a store on first use.

    A compatible entry point over :class:`TaskWorker` (which is what runs): the first
    :func:`drain_dispatcher`, :func:`run_dispatch_worker` or :meth:`claim_lane` call
    binds a worker to its store, and every later call must pass the same store. New code
    builds a :class:`TaskWorker` directly. Lanes may be a subset of the registry's
    (another process may serve the rest), but each must be a registry lane.

    Args:
        lanes: One config per lane (each lane at most once).
        execution: How claimed tasks are executed (its ``lease_ttl`` is the claim TTL).
        owner: The claim owner (default :func:`default_dispatch_owner`).
        stats: The stats recorder (default: a new one).
        wake: The wake signal (default: a new one).
        shared_heartbeat: Accepted for compatibility; there is one heartbeat engine,
            which renews every in-flight lease in one statement per tick.
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
        del shared_heartbeat  # one engine: the option has nothing left to choose
        # Validated now (lanes, registry), bound to a store later.
        self._prototype = TaskWorker.from_config(
            _Unbound(),  # type: ignore[arg-type]
            lanes,
            execution,
            owner=owner,
            stats=stats,
            wake=wake,
            partial_lanes=True,
            batch_completions=batch_completions,
        )
        self._worker: TaskWorker[StateT] | None = None
        self._batch = batch_completions

    def worker_for(self, store: DispatchTaskStore[Any, Any]) -> TaskWorker[StateT]:
        """The worker bound to ``store`` (created by the first call).

        Raises:
            TaskDispatchConfigError: When a different store is passed later.
        """
        if self._worker is None:
            proto = self._prototype
            # The prototype's execution carries its stop token: shutdown() before binding
            # stops the bound worker too.
            self._worker = TaskWorker.from_config(
                store,
                proto.lanes,
                proto.execution,
                owner=proto.owner,
                stats=proto.stats,
                wake=proto.wake_signal,
                partial_lanes=True,
                batch_completions=self._batch,
            )
        elif self._worker.store is not store:
            raise TaskDispatchConfigError(
                "a TaskDispatcher is bound to the first store it was used with"
            )
        return self._worker

    @property
    def _current(self) -> TaskWorker[StateT]:
        return self._worker or self._prototype

    @property
    def lanes(self) -> tuple[TaskLaneConfig, ...]:
        """The lane configs."""
        return self._current.lanes

    @property
    def execution(self) -> ClaimedTaskExecutionConfig[StateT]:
        """The execution config (with the dispatcher's stop token)."""
        return self._current.execution

    @property
    def owner(self) -> str:
        """The claim owner identity."""
        return self._current.owner

    @property
    def stats(self) -> DispatchStatsRecorder:
        """The stats recorder."""
        return self._current.stats

    @property
    def wake_signal(self) -> DispatchWakeSignal:
        """The signal fired when a saturated lane frees a slot (and by :meth:`wake`)."""
        return self._current.wake_signal

    @property
    def stopping(self) -> bool:
        """Whether :meth:`shutdown` was called (no more claims)."""
        return self._current.stopping

    def wake(self) -> None:
        """Wake the dispatch worker (for example after an enqueue in this process)."""
        self._current.wake()

    def in_flight(self, lane: Hashable | None = None) -> int:
        """Tasks executing in ``lane`` (or in every lane)."""
        return self._current.in_flight(lane)

    def free_slots(self, lane: Hashable) -> int:
        """Slots ``lane`` may still claim (limit minus in-flight and reserved)."""
        return self._current.free_slots(lane)

    def running_leases(self) -> list[TaskLease]:
        """The leases of every executing task (for :func:`sweep_task_temp_dirs`)."""
        return self._current.running_leases()

    async def claim_lane(
        self, store: DispatchTaskStore[Any, Any], config: TaskLaneConfig
    ) -> tuple[int, int]:
        """Claim up to the free slots of one lane; see :meth:`TaskWorker.claim_lane`."""
        return await self.worker_for(store).claim_lane(config)

    async def join(self) -> None:
        """Wait until every execution this dispatcher started has finished."""
        await self._current.join()

    async def shutdown(self) -> None:
        """Stop claiming, cancel every running context, wait; see :meth:`TaskWorker.shutdown`."""
        await self._current.shutdown()

    def __repr__(self) -> str:
        return repr(self._current).replace("TaskWorker", "TaskDispatcher", 1)


class _Unbound:
    """The store of a dispatcher that has not been used yet: it is never called."""


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
        wake: An extra wake signal (for example fed by an enqueue hook or a NOTIFY
            listener); the dispatcher's own signal is always watched.
        poll: Poll timing (default :class:`DispatchPollConfig`).
        clock: The clock for poll waits (default: the execution config's clock).
    """
    worker = dispatcher.worker_for(store)
    if wake is not None and wake is not worker.wake_signal:
        wake.forward_to(worker.wake_signal)
    await worker.run(shutdown_token, poll=poll, clock=clock)
