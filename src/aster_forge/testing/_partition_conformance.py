"""Conformance checks of a task store's partitioned claims (``partition_limit``)."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, ClassVar

from ..tasks import BackgroundTaskStore, NewTask, TaskInvalidValueError
from ..tasks._internal import BackgroundTaskRecord, TaskCompletion, TaskStatus
from ._task_control_conformance import LONG, lease_of

__all__ = ["PartitionChecks"]


class PartitionChecks:
    """The partition checks :class:`~aster_forge.testing.TaskStoreConformance` runs.

    Mixed into the suite, which provides ``_make_store``, ``_lane`` and ``_expire``.
    """

    if TYPE_CHECKING:
        _make_store: Callable[[], BackgroundTaskStore]
        short_ttl: timedelta
        contenders: int

        @staticmethod
        def _lane() -> str:
            """A fresh lane name."""

        async def _expire(self) -> None:
            """Advance past the short TTL."""

    PARTITION_CHECKS: ClassVar[tuple[str, ...]] = (
        "check_partition_limit_caps_each_partition",
        "check_partitioned_claims_take_partitions_in_turn",
        "check_concurrent_claims_never_exceed_the_partition_limit",
        "check_invalid_partition_limit_is_rejected",
    )

    async def _running_per_partition(
        self, store: BackgroundTaskStore, lane: str
    ) -> Counter[str | None]:
        page = await store.list_tasks(status=TaskStatus.RUNNING, lane=lane, limit=1000)
        return Counter(record.partition_key for record in page.items)

    async def check_partition_limit_caps_each_partition(self) -> None:
        """Each partition runs at most ``partition_limit`` tasks across store instances;
        tasks without a partition are not capped; a written success frees its slot."""
        first, second, lane = self._make_store(), self._make_store(), self._lane()
        tasks = [NewTask("k", lane, partition=p) for p in ("a", "a", "a", "b", "b")]
        await first.enqueue_many([*tasks, NewTask("k", lane), NewTask("k", lane)])
        claimed = await first.claim_due_for_lane(lane, 10, "worker-a", LONG, partition_limit=1)
        got = Counter(r.partition_key for r in claimed)
        assert got == {"a": 1, "b": 1, None: 2}, f"claimed per partition: {dict(got)}"
        none = await second.claim_due_for_lane(lane, 10, "worker-b", LONG, partition_limit=1)
        assert none == [], "another instance claimed past the partition limit"
        done = next(r for r in claimed if r.partition_key == "a")
        written, more = await first.mark_tasks_succeeded_and_claim(
            [TaskCompletion(lease_of(done), None, None)],
            lane,
            10,
            "worker-a",
            LONG,
            partition_limit=1,
        )
        assert list(written) == [True]
        assert [r.partition_key for r in more] == ["a"], "the success freed one slot of a"
        running = await self._running_per_partition(first, lane)
        assert running == {"a": 1, "b": 1, None: 2}, f"running: {dict(running)}"
        two = await second.claim_due_for_lane(lane, 10, "worker-b", LONG, partition_limit=2)
        assert sorted(r.partition_key or "" for r in two) == ["a", "b"], (
            "a limit of 2: one more each"
        )

    async def check_partitioned_claims_take_partitions_in_turn(self) -> None:
        """A partition with many due tasks does not starve one with few: the claim takes
        each partition's first task, then each one's second, by priority within each."""
        store, lane = self._make_store(), self._lane()
        big = [NewTask("k", lane, partition="big", priority=5) for _ in range(30)]
        small = [NewTask("k", lane, partition="small", priority=n) for n in range(3)]
        await store.enqueue_many([*big, *small])
        claimed = await store.claim_due_for_lane(lane, 4, "w", LONG, partition_limit=100)
        # Returned in the usual claim order; which tasks were taken is the check.
        taken = Counter((r.partition_key, r.priority) for r in claimed)
        assert taken == {("big", 5): 2, ("small", 2): 1, ("small", 1): 1}, dict(taken)
        rest = await store.claim_due_for_lane(lane, 3, "w", LONG, partition_limit=100)
        taken = Counter((r.partition_key, r.priority) for r in rest)
        assert taken == {("big", 5): 2, ("small", 0): 1}, f"small's last turn: {dict(taken)}"

    async def check_concurrent_claims_never_exceed_the_partition_limit(self) -> None:
        """Racing claimers (separate store instances) never run more than the limit of a
        partition in all."""
        lane, cap = self._lane(), 2
        tasks = [NewTask("k", lane, partition=f"p{n % 3}") for n in range(45)]
        await self._make_store().enqueue_many(tasks)
        stores = [self._make_store() for _ in range(self.contenders)]

        async def claim(store: BackgroundTaskStore, me: int) -> list[BackgroundTaskRecord]:
            got: list[BackgroundTaskRecord] = []
            for _ in range(3):
                got.extend(
                    await store.claim_due_for_lane(
                        lane, 2, f"worker-{me}", LONG, partition_limit=cap
                    )
                )
            return got

        results = await asyncio.gather(*(claim(s, i) for i, s in enumerate(stores)))
        every = Counter(r.partition_key for batch in results for r in batch)
        assert every == {"p0": cap, "p1": cap, "p2": cap}, f"claimed: {dict(every)}"
        running = await self._running_per_partition(stores[0], lane)
        assert running == every, f"running: {dict(running)}"

    async def check_invalid_partition_limit_is_rejected(self) -> None:
        """A partition limit that is not ``None`` or a positive int raises the typed error."""
        store, lane = self._make_store(), self._lane()
        for bad in (0, -1, True, 2.0, "2"):
            try:
                await store.claim_due_for_lane(lane, 1, "w", LONG, partition_limit=bad)  # type: ignore[arg-type]
            except TaskInvalidValueError as exc:
                assert "partition_limit" in str(exc)
            else:
                raise AssertionError(f"partition_limit={bad!r} was accepted by the claim")
            try:
                await store.mark_tasks_succeeded_and_claim(
                    [],
                    lane,
                    1,
                    "w",
                    LONG,
                    partition_limit=bad,  # type: ignore[arg-type]
                )
            except TaskInvalidValueError:
                pass
            else:
                raise AssertionError(
                    f"partition_limit={bad!r} was accepted by the success-and-claim"
                )
