"""Task dependencies: the edges of a workflow and what finished dependencies decide."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from graphlib import CycleError, TopologicalSorter

from ._records import NewTask, TaskStatus
from .errors import TaskEnqueueValueError

__all__ = ["TaskDependency"]

_ENDED_BADLY = (TaskStatus.FAILED, TaskStatus.CANCELLED)


@dataclass(frozen=True, slots=True)
class TaskDependency:
    """One edge of a workflow: ``tasks[task]`` waits for ``tasks[on]`` (indexes of one call).

    Attributes:
        task: The index of the waiting task (the dependent).
        on: The index of the task it waits for (the dependency).
        run_anyway: The dependent still runs when this dependency ends failed or
            cancelled; by default such an ending cancels the dependent (and, in turn,
            its own dependents that do not run anyway).
    """

    task: int
    on: int
    run_anyway: bool = False

    @staticmethod
    def checked(
        tasks: Sequence[NewTask], dependencies: Sequence[TaskDependency]
    ) -> list[TaskDependency]:
        """The distinct edges of a workflow, after checking they form a DAG over ``tasks``.

        Raises:
            TaskEnqueueValueError: On an empty workflow, an index out of range, a task
                waiting for itself, the same edge given twice with different
                ``run_anyway``, a cycle, or a task with a dedupe key (a workflow's tasks
                are always new rows).
        """
        if not tasks:
            raise TaskEnqueueValueError("a workflow needs at least one task")
        count = len(tasks)
        for index, task in enumerate(tasks):
            if task.dedupe_key is not None:
                raise TaskEnqueueValueError(
                    f"workflow task {index} ({task.kind}) has a dedupe key: "
                    "a workflow writes new rows only; drop the key"
                )
        edges: dict[tuple[int, int], TaskDependency] = {}
        graph: dict[int, set[int]] = {index: set() for index in range(count)}
        for dep in dependencies:
            if not isinstance(dep, TaskDependency):
                raise TaskEnqueueValueError(
                    f"dependencies hold TaskDependency, got {type(dep).__name__}"
                )
            for name, index in (("task", dep.task), ("on", dep.on)):
                if not 0 <= index < count:
                    raise TaskEnqueueValueError(
                        f"TaskDependency.{name}={index} is not an index of the {count} tasks"
                    )
            if dep.task == dep.on:
                raise TaskEnqueueValueError(f"task {dep.task} cannot wait for itself")
            anyway = bool(dep.run_anyway)
            seen = edges.get((dep.task, dep.on))
            if seen is not None and seen.run_anyway is not anyway:
                raise TaskEnqueueValueError(
                    f"task {dep.task} waits for task {dep.on} twice with different run_anyway"
                )
            edges[(dep.task, dep.on)] = TaskDependency(dep.task, dep.on, run_anyway=anyway)
            graph[dep.task].add(dep.on)
        try:
            tuple(TopologicalSorter(graph).static_order())
        except CycleError as exc:
            cycle = " -> ".join(str(index) for index in exc.args[1])
            raise TaskEnqueueValueError(f"the dependencies form a cycle: {cycle}") from None
        return list(edges.values())

    @staticmethod
    def decide(dependencies: Iterable[tuple[TaskStatus, bool]]) -> TaskStatus | None:
        """What a waiting task becomes, from each dependency's status and ``run_anyway``.

        ``CANCELLED`` as soon as one dependency ended failed or cancelled without
        ``run_anyway`` (its siblings need not finish); ``PENDING`` (due now) once every
        dependency has finished; ``None`` (still waiting) before.
        """
        finished = True
        for status, run_anyway in dependencies:
            if status in _ENDED_BADLY:
                if not run_anyway:
                    return TaskStatus.CANCELLED
            elif status is not TaskStatus.SUCCEEDED:
                finished = False
        return TaskStatus.PENDING if finished else None
