"""The component dependency graph: a stable topological order and cycle detection."""

from __future__ import annotations

import heapq
import logging
from collections.abc import Iterable, Mapping, Sequence

__all__ = [
    "find_cycle",
    "missing_dependencies",
    "shutdown_order",
    "startup_order",
    "topological_order",
]

logger = logging.getLogger("aster_forge.runtime")


def topological_order(nodes: list[str], preds: Mapping[str, Iterable[str]]) -> tuple[str, ...]:
    """Order ``nodes`` so each comes after its ``preds``; ties keep the input order."""
    index = {name: i for i, name in enumerate(nodes)}
    remaining = {name: set(preds[name]) for name in nodes}
    followers: dict[str, list[str]] = {name: [] for name in nodes}
    for name, before in remaining.items():
        for dep in before:
            followers[dep].append(name)
    ready = [(index[n], n) for n in nodes if not remaining[n]]
    heapq.heapify(ready)
    order: list[str] = []
    while ready:
        _, name = heapq.heappop(ready)
        order.append(name)
        for follower in followers[name]:
            remaining[follower].discard(name)
            if not remaining[follower]:
                heapq.heappush(ready, (index[follower], follower))
    if len(order) < len(nodes):
        # A cycle (validate() would have refused it): keep going in registration order.
        rest = [n for n in nodes if n not in set(order)]
        logger.error("component dependency cycle among %s", ", ".join(rest))
        order.extend(rest)
    return tuple(order)


def find_cycle(graph: Mapping[str, Sequence[str]]) -> tuple[str, ...]:
    """Return one dependency cycle (in dependency order), or ``()`` when there is none.

    Iterative depth-first search, so long dependency chains cannot hit the recursion limit.
    Edges to nodes outside ``graph`` are ignored (they are reported as missing elsewhere).
    """
    done: set[str] = set()
    for root in graph:
        if root in done:
            continue
        path: list[str] = [root]
        on_path = {root}
        iterators = [iter(graph[root])]
        while iterators:
            dep = next(iterators[-1], None)
            if dep is None:
                finished = path.pop()
                on_path.discard(finished)
                done.add(finished)
                iterators.pop()
                continue
            if dep not in graph or dep in done:
                continue
            if dep in on_path:
                return tuple(path[path.index(dep) :])
            path.append(dep)
            on_path.add(dep)
            iterators.append(iter(graph[dep]))
    return ()


def missing_dependencies(graph: Mapping[str, Sequence[str]]) -> tuple[tuple[str, str], ...]:
    """Return every ``(node, dependency)`` whose dependency is not a node of ``graph``."""
    return tuple((name, dep) for name, deps in graph.items() for dep in deps if dep not in graph)


def shutdown_order(graph: Mapping[str, Sequence[str]]) -> tuple[str, ...]:
    """Order nodes so each comes after its dependencies (ties keep the input order)."""
    preds = {name: {d for d in deps if d in graph} for name, deps in graph.items()}
    return topological_order(list(graph), preds)


def startup_order(graph: Mapping[str, Sequence[str]]) -> tuple[str, ...]:
    """Order nodes so each comes before its dependencies (ties keep the input order)."""
    preds: dict[str, set[str]] = {name: set() for name in graph}
    for name, deps in graph.items():
        for dep in deps:
            if dep in preds:
                preds[dep].add(name)
    return topological_order(list(graph), preds)
