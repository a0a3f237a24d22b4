"""Conformance checks of a task store's per-partition rate limit (``partition_rate_limit``)."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from datetime import timedelta
from typing import TYPE_CHECKING, ClassVar

from ..tasks import BackgroundTaskStore, NewTask, TaskInvalidValueError
from ..tasks._internal import BackgroundTaskRecord, TaskCompletion, TaskStatus, rate_window
from ._task_control_conformance import LONG, lease_of

__all__ = ["PartitionRateChecks"]

# Windows are aligned to the epoch: a century-long one has no boundary for decades,
# so checks of the budget alone cannot straddle two windows.
_CENTURY = timedelta(days=36525)


def _partitions(records: Iterable[BackgroundTaskRecord]) -> Counter[str | None]:
    return Counter(r.partition_key for r in records)


class PartitionRateChecks:
    """The per-partition rate-limit checks :class:`~aster_forge.testing.TaskStoreConformance`
    runs.

    Mixed into the suite, which provides ``_make_store``, ``_lane`` and ``_advance``.
    """

    if TYPE_CHECKING:
        _make_store: Callable[[], BackgroundTaskStore]
        _advance: Callable[[timedelta], Awaitable[None]]
        contenders: int

        @staticmethod
        def _lane() -> str:
            """A fresh lane name."""

    PARTITION_RATE_CHECKS: ClassVar[tuple[str, ...]] = (
        "check_partition_rate_limit_skips_spent_partitions",
        "check_racing_claims_never_exceed_a_partition_rate_in_any_window",
        "check_invalid_partition_rate_limit_is_rejected",
    )

    async def check_partition_rate_limit_skips_spent_partitions(self) -> None:
        """Each partition starts at most ``count`` tasks per window across instances,
        whether they still run or not; a spent partition is skipped and other
        partitions' tasks (and tasks without a partition) are claimed; the
        success-and-claim counts too."""
        first, second, lane = self._make_store(), self._make_store(), self._lane()
        # Partition "a" ranks first everywhere: it would take every claim if unchecked.
        await first.enqueue_many(
            [NewTask("k", lane, partition="a", priority=10) for _ in range(6)]
            + [NewTask("k", lane, partition="b") for _ in range(2)]
            + [NewTask("k", lane)]
        )
        rate = (2, _CENTURY)
        claimed = await first.claim_due_for_lane(
            lane, 3, "worker-a", LONG, partition_rate_limit=rate
        )
        assert _partitions(claimed) == {"a": 1, "b": 1, None: 1}, _partitions(claimed)
        more = await second.claim_due_for_lane(
            lane, 10, "worker-b", LONG, partition_rate_limit=rate
        )
        assert _partitions(more) == {"a": 1, "b": 1}, f"another instance took {_partitions(more)}"
        for record in [*claimed, *more]:
            assert await first.mark_task_succeeded(lease_of(record), None, None)
        spent = await second.claim_due_for_lane(
            lane, 10, "worker-b", LONG, partition_rate_limit=rate
        )
        assert spent == [], f"finished tasks gave starts back: {_partitions(spent)}"
        await first.enqueue_many([NewTask("k", lane, partition="c") for _ in range(3)])
        running = await first.claim_due_for_lane(lane, 1, "worker-a", LONG)
        assert _partitions(running) == {"a": 1}, "without the limit partition a ranks first"
        done = [TaskCompletion(lease_of(running[0]), None, None)]
        written, after = await first.mark_tasks_succeeded_and_claim(
            done, lane, 10, "worker-a", LONG, partition_rate_limit=rate
        )
        assert list(written) == [True]
        assert _partitions(after) == {"c": 2}, (
            f"behind a spent partition the claim took {_partitions(after)}"
        )
        rest = await second.claim_due_for_lane(lane, 10, "worker-b", LONG)
        assert _partitions(rest) == {"a": 3, "c": 1}, "without the limit every due task is taken"

    async def check_racing_claims_never_exceed_a_partition_rate_in_any_window(self) -> None:
        """Racing claimers (separate store instances) over several windows: no
        partition's stored ``started_at`` exceed ``count`` in one window, and each
        fresh window fills every partition."""
        lane, count, period, rounds = self._lane(), 2, timedelta(milliseconds=500), 3
        partitions = ("p0", "p1", "p2")
        stores = [self._make_store() for _ in range(self.contenders)]
        await stores[0].enqueue_many(
            [NewTask("k", lane, partition=p) for p in partitions for _ in range(2 * count * rounds)]
        )

        async def claim(store: BackgroundTaskStore, me: int) -> list[BackgroundTaskRecord]:
            return list(
                await store.claim_due_for_lane(
                    lane, 2, f"worker-{me}", LONG, partition_rate_limit=(count, period)
                )
            )

        claimed = 0
        for _ in range(rounds):
            results = await asyncio.gather(*(claim(s, i) for i, s in enumerate(stores)))
            got = sum(len(batch) for batch in results)
            want = count * len(partitions)
            assert got >= want, f"a fresh window started only {got} of {want} tasks"
            claimed += got
            await self._advance(period)
        page = await stores[0].list_tasks(status=TaskStatus.RUNNING, lane=lane, limit=1000)
        starts = [(r.partition_key, r.started_at) for r in page.items if r.started_at]
        assert len(starts) == claimed
        per_window = Counter((key, rate_window(at, period)) for key, at in starts)
        (key, window), worst = per_window.most_common(1)[0]
        assert worst <= count, f"{worst} starts of {key} in the window {window} (rate {count})"

    async def check_invalid_partition_rate_limit_is_rejected(self) -> None:
        """A partition rate limit that is not ``None`` or ``(count >= 1, positive
        timedelta)`` raises the typed error naming it, before anything is written."""
        store, lane = self._make_store(), self._lane()
        second = timedelta(seconds=1)
        bad_limits: tuple[object, ...] = ((0, second), (True, second), (1, timedelta(0)), 5)
        for bad in bad_limits:
            try:
                await store.claim_due_for_lane(
                    lane,
                    1,
                    "w",
                    LONG,
                    partition_rate_limit=bad,  # type: ignore[arg-type]
                )
            except TaskInvalidValueError as exc:
                assert "partition_rate_limit" in str(exc), str(exc)
            else:
                raise AssertionError(f"partition_rate_limit={bad!r} was accepted by the claim")
            try:
                await store.mark_tasks_succeeded_and_claim(
                    [],
                    lane,
                    1,
                    "w",
                    LONG,
                    partition_rate_limit=bad,  # type: ignore[arg-type]
                )
            except TaskInvalidValueError as exc:
                assert "partition_rate_limit" in str(exc), str(exc)
            else:
                raise AssertionError(
                    f"partition_rate_limit={bad!r} was accepted by the success-and-claim"
                )
