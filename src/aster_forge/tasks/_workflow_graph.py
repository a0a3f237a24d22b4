"""Reading a workflow back: the connected graph of a task, for operators.

The admin API, the dashboard and the CLI show a task's workflow (what it waits for,
what waits for it, their states and the edges) through :class:`TaskWorkflowStore`.
Both stores walk the edges the same way, with :func:`walk_workflow`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ._records import TaskCancelOutcome, TaskStatus
from .errors import TaskInvalidValueError

__all__ = [
    "MAX_WORKFLOW_NODES",
    "TaskWorkflowEdge",
    "TaskWorkflowGraph",
    "TaskWorkflowNode",
    "TaskWorkflowStore",
    "cancel_workflow_nodes",
    "check_workflow_limit",
    "walk_workflow",
]

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
