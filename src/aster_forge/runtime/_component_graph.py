"""Dependency-graph helpers for the component registry: ordering and cycle detection."""

from __future__ import annotations

import heapq
import logging
from collections.abc import Iterable, Mapping, Sequence

__all__ = ["find_cycle", "topological_order"]

logger = logging.getLogger("aster_forge.runtime")


def topological_order(nodes: list[str], preds: Mapping[str, Iterable[str]]) -> tuple[str, ...]:
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
    white, grey, black = 0, 1, 2
    color = dict.fromkeys(graph, white)
    stack: list[str] = []

    def visit(node: str) -> tuple[str, ...]:
        color[node] = grey
        stack.append(node)
        for dep in graph[node]:
            if dep not in graph:
                continue
            if color[dep] == grey:
                return tuple(stack[stack.index(dep) :])
            if color[dep] == white and (found := visit(dep)):
                return found
        stack.pop()
        color[node] = black
        return ()

    for node in graph:
        if color[node] == white and (found := visit(node)):
            return found
    return ()
