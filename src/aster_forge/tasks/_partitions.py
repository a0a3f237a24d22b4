"""The fair claim order across partitions, as every task store takes it.

A lane with a ``partition_limit`` ranks its due tasks within each partition (by
priority, then run time, then id) and claims by rank: every partition's first task,
then every partition's second, and so on, so a partition with many queued tasks never
starves one with a few. A partition already running ``partition_limit`` tasks of the
lane gets no turn; tasks without a partition take their turns as one group and are
never capped. Under a partition rate limit a partition also gets no more turns than
the starts it has left in the window. The database stores compute the same order in SQL
(``row_number() OVER (PARTITION BY partition_key ...)``); the in-memory store uses
:func:`fair_pick`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ._records import MAX_TASK_CLAIM_LIMIT, BackgroundTaskRecord

__all__ = ["fair_pick"]


def fair_pick(
    due: Iterable[BackgroundTaskRecord],
    running: Mapping[str, int],
    *,
    partition_limit: int | None,
    limit: int,
    budget_left: Mapping[str, int] | None = None,
) -> list[BackgroundTaskRecord]:
    """The up to ``limit`` tasks of ``due`` a partitioned claim takes, in claim order.

    Args:
        due: The lane's due pending tasks (any order).
        running: How many tasks of the lane run per partition.
        partition_limit: The most tasks of one partition running at once (``None``:
            not capped).
        limit: The most tasks to take.
        budget_left: Under a partition rate limit, the starts each partition has left
            in the window (a partition not in it has ``MAX_TASK_CLAIM_LIMIT``).
    """
    turns: dict[str | None, int] = {}
    ranked: list[tuple[int, BackgroundTaskRecord]] = []
    for row in sorted(due, key=lambda r: (-r.priority, r.run_at, r.id)):
        key = row.partition_key
        turn = turns.get(key, 0) + 1
        turns[key] = turn
        if key is None:
            ranked.append((turn, row))
            continue
        room = MAX_TASK_CLAIM_LIMIT
        if partition_limit is not None:
            room = partition_limit - running.get(key, 0)
        if budget_left is not None:
            room = min(room, budget_left.get(key, MAX_TASK_CLAIM_LIMIT))
        if turn <= room:
            ranked.append((turn, row))
    ranked.sort(key=lambda item: (item[0], -item[1].priority, item[1].run_at, item[1].id))
    return [row for _, row in ranked[: max(0, limit)]]
