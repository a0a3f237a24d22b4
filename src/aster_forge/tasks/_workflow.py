"""Workflows: the dependency edges of a workflow, what they decide, and its graph read back.

The admin API, the dashboard and the CLI show a task's workflow (what it waits for,
what waits for it, their states and the edges) through :class:`TaskWorkflowStore`;
both stores walk the edges the same way, with :func:`walk_workflow`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from graphlib import CycleError, TopologicalSorter
from typing import Protocol, runtime_checkable

from ._records import NewTask, TaskCancelOutcome, TaskStatus
from .errors import TaskEnqueueValueError, TaskInvalidValueError

__all__ = [
    "MAX_WORKFLOW_NODES",
    "TaskDependency",
    "TaskWorkflowEdge",
    "TaskWorkflowGraph",
    "TaskWorkflowNode",
    "TaskWorkflowStore",
    "cancel_workflow_nodes",
    "check_workflow_limit",
    "walk_workflow",
]

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


# --- reading a workflow back: the graph operators see ---

MAX_WORKFLOW_NODES = 10_000
"""The most nodes one :meth:`TaskWorkflowStore.workflow_graph` call reads."""


@dataclass(frozen=True, slots=True)
class TaskWorkflowNode:
    """One task of a workflow graph.

    Attributes:
        id: The task id.
        kind: Its kind (wire value).
        lane: Its lane (wire value).
        status: Its status.
        waiting: Pending and not yet due because a dependency has not finished.
    """

    id: int
    kind: str
    lane: str
    status: TaskStatus
    waiting: bool


@dataclass(frozen=True, slots=True)
class TaskWorkflowEdge:
    """One edge: ``task_id`` waits for ``depends_on``.

    Attributes:
        depends_on: The dependency.
        task_id: The dependent.
        run_anyway: The dependent runs even when the dependency fails or is cancelled.
    """

    depends_on: int
    task_id: int
    run_anyway: bool


@dataclass(frozen=True, slots=True)
class TaskWorkflowGraph:
    """The tasks connected to one task through dependencies, and their edges.

    Attributes:
        task_id: The task asked about.
        nodes: The connected tasks (the task itself included), by id.
        edges: The edges between them, by ``(depends_on, task_id)``.
        truncated: More tasks are connected than the limit let the read take.
    """

    task_id: int
    nodes: tuple[TaskWorkflowNode, ...]
    edges: tuple[TaskWorkflowEdge, ...]
    truncated: bool

    def dependencies(self, task_id: int) -> list[int]:
        """The ids ``task_id`` waits for, within the graph."""
        return [edge.depends_on for edge in self.edges if edge.task_id == task_id]

    def dependents(self, task_id: int) -> list[int]:
        """The ids that wait for ``task_id``, within the graph."""
        return [edge.task_id for edge in self.edges if edge.depends_on == task_id]


@runtime_checkable
class TaskWorkflowStore(Protocol):
    """A task store that reads workflows back (the admin API and CLI use it when present)."""

    async def workflow_graph(self, task_id: int, *, limit: int = 500) -> TaskWorkflowGraph | None:
        """The tasks connected to ``task_id`` by dependency edges in either direction.

        Walks outwards from the task, nearest first, and stops at ``limit`` nodes
        (``truncated`` then says so). A task without dependencies is a graph of one.

        Returns:
            The graph, or ``None`` when the task does not exist.

        Raises:
            TaskInvalidValueError: ``limit`` outside ``1..MAX_WORKFLOW_NODES``.
        """
        ...


class _Cancels(Protocol):
    async def cancel_task(self, task_id: int) -> TaskCancelOutcome: ...


async def cancel_workflow_nodes(
    store: _Cancels, graph: TaskWorkflowGraph
) -> tuple[list[int], list[int]]:
    """Cancel every unfinished task of ``graph``: (cancelled, asked to stop), by id.

    Pending tasks end cancelled; running ones are asked to stop. Dependents go first,
    so a dependency that ends meanwhile releases nothing.
    """
    cancelled: list[int] = []
    requested: list[int] = []
    for node in sorted(graph.nodes, key=lambda n: n.id, reverse=True):
        if node.status.is_terminal:
            continue
        outcome = await store.cancel_task(node.id)
        if outcome is TaskCancelOutcome.CANCELLED:
            cancelled.append(node.id)
        elif outcome is TaskCancelOutcome.CANCEL_REQUESTED:
            requested.append(node.id)
    return sorted(cancelled), sorted(requested)


def check_workflow_limit(limit: int) -> None:
    """Refuse a node limit outside ``1..MAX_WORKFLOW_NODES``.

    Raises:
        TaskInvalidValueError: The limit is out of range (or not an int).
    """
    if (
        isinstance(limit, bool)
        or not isinstance(limit, int)
        or not 1 <= limit <= MAX_WORKFLOW_NODES
    ):
        raise TaskInvalidValueError(
            f"workflow limit must be an int in 1..{MAX_WORKFLOW_NODES}, got {limit!r}"
        )


async def walk_workflow(
    start: int,
    edges_of: Callable[[list[int]], Awaitable[Iterable[TaskWorkflowEdge]]],
    *,
    limit: int,
) -> tuple[list[int], list[TaskWorkflowEdge], bool]:
    """Walk the edges outwards from ``start``, breadth first, up to ``limit`` ids.

    Args:
        start: The task to start from.
        edges_of: The edges touching any of the given ids (either end).
        limit: The most ids to collect.

    Returns:
        The ids collected (sorted), the edges between them, and whether more were
        connected than ``limit``.
    """
    seen = {start}
    frontier = [start]
    edges: dict[tuple[int, int], TaskWorkflowEdge] = {}
    truncated = False
    while frontier:
        found: set[int] = set()
        for edge in await edges_of(frontier):
            edges[(edge.depends_on, edge.task_id)] = edge
            found.update((edge.depends_on, edge.task_id))
        fresh = sorted(found - seen)
        room = limit - len(seen)
        if len(fresh) > room:
            truncated = True
            fresh = fresh[:room]
        seen.update(fresh)
        frontier = fresh
    kept = [edge for key, edge in sorted(edges.items()) if key[0] in seen and key[1] in seen]
    return sorted(seen), kept, truncated
