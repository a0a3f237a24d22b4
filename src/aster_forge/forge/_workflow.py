"""Workflows on a forge: steps that wait for other steps, written in one transaction."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..tasks import NewTask, TaskDependency
from ..tasks._internal import (
    BackgroundTaskRecord,
    EnqueueResult,
    TaskCancelOutcome,
    TaskExecutionContext,
)
from ..tasks.errors import TaskEnqueueValueError

if TYPE_CHECKING:
    from ._backend import ForgeBackend
    from ._task import ForgeTask

__all__ = ["ForgeStep", "ForgeWorkflows"]


@dataclass(frozen=True, slots=True, eq=False)
class ForgeStep:
    """One task of a workflow, made by :meth:`ForgeTask.step` and written by
    :meth:`Forge.workflow <ForgeWorkflows.workflow>`.

    Compared by identity: the same payload twice is two steps.

    Attributes:
        task: The declared task it runs.
        request: The validated task request (payload encoded, options set).
        after: The steps it waits for.
        run_anyway: The steps of ``after`` whose failure or cancel does not cancel this
            one (it runs once they have all finished, however they ended).
    """

    task: ForgeTask
    request: NewTask
    after: tuple[ForgeStep, ...] = ()
    run_anyway: frozenset[ForgeStep] = frozenset()


def _ordered(steps: Iterable[ForgeStep]) -> list[ForgeStep]:
    """``steps`` and every step they wait for, each once, each after its dependencies
    (in ``after`` order): the ids the store gives them follow that order."""
    done: dict[ForgeStep, None] = {}
    stack: list[tuple[ForgeStep, bool]] = [(step, False) for step in reversed(list(steps))]
    while stack:
        step, expanded = stack.pop()
        if not isinstance(step, ForgeStep):
            raise TaskEnqueueValueError(
                f"a workflow is made of ForgeStep (from task.step(...)), got {type(step).__name__}"
            )
        if step in done:
            continue
        if expanded:
            done[step] = None
            continue
        stack.append((step, True))
        stack.extend((dep, False) for dep in reversed(step.after) if dep not in done)
    return list(done)


class ForgeWorkflows:
    """Writing workflows and reading a step's dependencies; mixed into :class:`Forge`."""

    _backend: ForgeBackend
    _tasks: dict[str, ForgeTask]

    if TYPE_CHECKING:  # defined by ForgeOperations and Forge

        def _decoded_result(self, record: BackgroundTaskRecord) -> Any: ...

        def _wake_workers(self) -> None: ...

    async def workflow(self, steps: Iterable[ForgeStep]) -> dict[ForgeStep, EnqueueResult]:
        """Write ``steps``, and every step they wait for, with their edges in one transaction.

        A step becomes due once every step of its ``after`` has finished: a dependency
        that ends failed or cancelled cancels it (and what waits for it) unless the step
        named it in ``run_anyway``. Nothing is written when the graph is refused.

        Args:
            steps: The steps (the ones they wait for are written too).

        Returns:
            What each step's enqueue returned, by step: await a step's result with
            ``await forge.result(made[step])``; cancel the workflow by cancelling each.

        Raises:
            TaskEnqueueValueError: The steps form a cycle, or a step has a dedupe key.
        """
        ordered = _ordered(steps)
        index = {step: position for position, step in enumerate(ordered)}
        dependencies = [
            TaskDependency(index[step], index[dep], run_anyway=dep in step.run_anyway)
            for step in ordered
            for dep in step.after
        ]
        backend = self._backend
        if not backend.tables_ready:
            await backend.create_tables_once()
        results = await backend.task_store.enqueue_workflow(
            [step.request for step in ordered], dependencies
        )
        self._wake_workers()
        return dict(zip(ordered, results, strict=True))

    async def dependency_records(self, ctx: TaskExecutionContext) -> list[BackgroundTaskRecord]:
        """The stored rows of the tasks the running task waited for, by id.

        Each carries its outcome (``status``, ``result_json``, ``last_error``): what a
        batch callback reads of its members.
        """
        return list(await self._backend.task_store.dependency_records(ctx.task_id))

    async def dependency_results(self, ctx: TaskExecutionContext) -> list[Any]:
        """The results of the tasks the running task waited for, by id, each decoded as
        its task's declared return type.

        Raises:
            ForgeTaskFailedError: A dependency did not succeed (it was in ``run_anyway``);
                read :meth:`dependency_records` for every outcome instead.
        """
        records = await self.dependency_records(ctx)
        return [self._decoded_result(record) for record in records]

    async def cancel_workflow(self, made: dict[ForgeStep, EnqueueResult]) -> int:
        """Cancel every step of a workflow that has not finished.

        A pending step ends cancelled at once; a running one is asked to stop (its body
        sees it at the next heartbeat). Steps waiting for a cancelled one end cancelled
        with it, unless they run anyway.

        Returns:
            How many steps this call cancelled or asked to stop (not those a cancelled
            dependency had already cancelled, nor those already finished).
        """
        store = self._backend.task_store
        stopped = (TaskCancelOutcome.CANCELLED, TaskCancelOutcome.CANCEL_REQUESTED)
        cancelled = 0
        for result in made.values():
            if await store.cancel_task(result.task_id) in stopped:
                cancelled += 1
        return cancelled
