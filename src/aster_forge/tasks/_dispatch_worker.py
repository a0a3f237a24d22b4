"""The seed's dispatch entry points: thin wrappers over :class:`TaskWorker`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from ..runtime import CancellationToken, Clock
from ._dispatch import (
    DispatchDrainResult,
    DispatchPollConfig,
    DispatchStatsRecorder,
    DispatchWakeSignal,
    TaskLaneConfig,
)
from ._execution import ClaimedTaskExecutionConfig
from ._worker import TaskWorker
from .errors import TaskDispatchConfigError
from .protocols import DispatchTaskStore

__all__ = ["TaskDispatcher", "drain_dispatcher", "run_dispatch_worker"]

StateT = TypeVar("StateT")


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
