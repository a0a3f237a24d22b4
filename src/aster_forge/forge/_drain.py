"""``forge.drain()``: run every due task inline and report what happened (product tests)."""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..tasks import (
    ClaimedTaskExecutionConfig,
    ClaimedTaskOutcome,
    DispatchStatsRecorder,
    TaskLaneConfig,
    TaskWorker,
)
from ..tasks._internal import default_dispatch_owner

if TYPE_CHECKING:
    from ._app import Forge

__all__ = ["DrainedTask", "ForgeDrainResult", "drain_forge"]


@dataclass(frozen=True, slots=True)
class DrainedTask:
    """One execution :meth:`Forge.drain` ran.

    Attributes:
        task_id: The task's id.
        task: The task's wire name.
        outcome: How the execution ended (succeeded, retried, failed, ...).
        attempt: The 1-based number of this execution.
        error: The error text written to the row (``None`` when none was).
        result_json: The stored result JSON after the execution (``None``: none).
    """

    task_id: int
    task: str
    outcome: ClaimedTaskOutcome
    attempt: int
    error: str | None
    result_json: str | None


@dataclass(frozen=True, slots=True)
class ForgeDrainResult:
    """What one :meth:`Forge.drain` ran, in execution order.

    Attributes:
        tasks: Every execution, in order (a task retried within the drain appears twice).
    """

    tasks: tuple[DrainedTask, ...]

    def __iter__(self) -> Iterator[DrainedTask]:
        return iter(self.tasks)

    def __len__(self) -> int:
        return len(self.tasks)

    def count(self, outcome: ClaimedTaskOutcome) -> int:
        """How many executions ended with ``outcome``."""
        return sum(1 for task in self.tasks if task.outcome is outcome)

    @property
    def succeeded(self) -> int:
        """How many executions succeeded."""
        return self.count(ClaimedTaskOutcome.SUCCEEDED)

    @property
    def failed(self) -> int:
        """How many executions failed for good."""
        return self.count(ClaimedTaskOutcome.FAILED)

    @property
    def retried(self) -> int:
        """How many executions failed and were scheduled to retry."""
        return self.count(ClaimedTaskOutcome.RETRIED)

    def of(self, task: str) -> tuple[DrainedTask, ...]:
        """The executions of the task named ``task``."""
        return tuple(item for item in self.tasks if item.task == task)


#: The outcomes whose write stores the failure's text in the row.
_WRITES_ERROR = frozenset({ClaimedTaskOutcome.FAILED, ClaimedTaskOutcome.RETRIED})


class _Outcomes(DispatchStatsRecorder):
    """A worker's stats that also keep each execution's outcome, in order."""

    __slots__ = ("ended",)

    def __init__(self) -> None:
        super().__init__()
        self.ended: list[ClaimedTaskOutcome] = []

    def record_outcome(self, lane: Hashable, outcome: ClaimedTaskOutcome) -> None:
        super().record_outcome(lane, outcome)
        self.ended.append(outcome)


async def drain_forge(forge: Forge, *, max_tasks: int) -> ForgeDrainResult:
    """Claim and run due tasks one at a time, lane by lane, until none is due.

    Each task is claimed and run by a :class:`TaskWorker` with one slot in its lane:
    fenced writes, retries, steps, exactly as a running worker would, only one task
    at a time. A retried task runs again in the same drain only if its backoff has
    already passed.

    The forge's declared resources are opened for the drain and closed after it, as
    a worker's runtime does, unless the forge already has a state (``state=``, or the
    resources of a running worker).
    """
    async with AsyncExitStack() as resources:
        factory = forge.resources_factory
        if factory is not None and forge.state_or_none is None:
            # Registered first, so it runs last: the state is forgotten once closed.
            resources.callback(forge.clear_state)
            forge.state = await resources.enter_async_context(factory())
        return await _drain(forge, max_tasks=max_tasks)


async def _drain(forge: Forge, *, max_tasks: int) -> ForgeDrainResult:
    registry = forge.registry
    settings = forge.worker_settings
    store = forge.backend.task_store
    config = ClaimedTaskExecutionConfig(
        state=forge,
        registry=registry,
        lease_ttl=settings.task_lease_ttl,
        retry_policy=settings.retry,
        redact_errors=settings.redact_errors,
    )
    owner = default_dispatch_owner()
    ran: list[DrainedTask] = []
    progress = True
    while progress and len(ran) < max_tasks:
        progress = False
        for lane in forge.lanes:
            outcomes = _Outcomes()
            worker = TaskWorker(
                store,
                lanes=[TaskLaneConfig(lane, 1)],
                execution=config,
                owner=owner,
                stats=outcomes,
                partial_lanes=True,
                batch_completions=False,  # a success claims nothing with it
            )
            try:
                await worker.drain()
                started = worker.in_flight_tasks()  # a drain returns before its task runs
                await worker.join()
            finally:
                await worker.shutdown()
            for task, outcome in zip(started, outcomes.ended, strict=True):
                stored = await store.get_task(task.task_id)
                ran.append(
                    DrainedTask(
                        task_id=task.task_id,
                        task=task.kind,
                        outcome=outcome,
                        attempt=task.attempt,
                        error=(
                            stored.last_error
                            if stored is not None and outcome in _WRITES_ERROR
                            else None
                        ),
                        result_json=None if stored is None else stored.result_json,
                    )
                )
                progress = True
    return ForgeDrainResult(tuple(ran))
