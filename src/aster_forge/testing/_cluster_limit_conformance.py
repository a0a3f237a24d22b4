"""Conformance checks of a task store's cluster-wide lane limit (``cluster_limit``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, ClassVar

from ..tasks import BackgroundTaskStore, NewTask, TaskInvalidValueError
from ..tasks._internal import (
    BackgroundTaskRecord,
    TaskCompletion,
    TaskStatus,
)
from ._task_control_conformance import LONG, lease_of

__all__ = ["ClusterLimitChecks"]


class ClusterLimitChecks:
    """The cluster-limit checks :class:`~aster_forge.testing.TaskStoreConformance` runs.

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

    CLUSTER_LIMIT_CHECKS: ClassVar[tuple[str, ...]] = (
        "check_cluster_limit_caps_running_tasks",
        "check_concurrent_claims_never_exceed_the_cluster_limit",
        "check_expired_leases_give_cluster_slots_back",
        "check_invalid_cluster_limit_is_rejected",
    )

    async def _running(self, store: BackgroundTaskStore, lane: str) -> int:
        page = await store.list_tasks(status=TaskStatus.RUNNING, lane=lane, limit=1000)
        return len(page.items)

    async def check_cluster_limit_caps_running_tasks(self) -> None:
        """Claims of every store instance stop at the lane's cluster limit; a written
        success (alone or in the success-and-claim) frees its slot."""
        first, second, lane = self._make_store(), self._make_store(), self._lane()
        await first.enqueue_many([NewTask("k", lane) for _ in range(6)])
        claimed = await first.claim_due_for_lane(lane, 10, "worker-a", LONG, cluster_limit=2)
        assert len(claimed) == 2, f"claimed {len(claimed)} under a cluster limit of 2"
        none = await second.claim_due_for_lane(lane, 10, "worker-b", LONG, cluster_limit=2)
        assert none == [], "another instance claimed past the cluster limit"
        assert await first.mark_task_succeeded(lease_of(claimed[0]), None, None)
        [refill] = await second.claim_due_for_lane(lane, 10, "worker-b", LONG, cluster_limit=2)
        done = [TaskCompletion(lease_of(claimed[1]), None, None)]
        written, more = await first.mark_tasks_succeeded_and_claim(
            done, lane, 10, "worker-a", LONG, cluster_limit=2
        )
        assert list(written) == [True]
        assert len(more) == 1, f"the written success freed 1 slot, claimed {len(more)}"
        assert await self._running(first, lane) == 2
        unlimited = await second.claim_due_for_lane(lane, 10, "worker-b", LONG)
        assert len(unlimited) == 2, "without a cluster limit the claim takes every due task"
        assert refill.id not in {r.id for r in unlimited}

    async def check_concurrent_claims_never_exceed_the_cluster_limit(self) -> None:
        """Racing claimers (separate store instances) take no more than the limit in all."""
        lane, cap = self._lane(), 3
        await self._make_store().enqueue_many([NewTask("k", lane) for _ in range(40)])
        stores = [self._make_store() for _ in range(self.contenders)]

        async def claim(store: BackgroundTaskStore, me: int) -> list[BackgroundTaskRecord]:
            got: list[BackgroundTaskRecord] = []
            for _ in range(3):
                got.extend(
                    await store.claim_due_for_lane(lane, 2, f"worker-{me}", LONG, cluster_limit=cap)
                )
            return got

        results = await asyncio.gather(*(claim(s, i) for i, s in enumerate(stores)))
        every = [r.id for batch in results for r in batch]
        assert len(every) == cap, f"{len(every)} tasks claimed under a cluster limit of {cap}"
        assert await self._running(stores[0], lane) == cap

    async def check_expired_leases_give_cluster_slots_back(self) -> None:
        """A dead claimer's slots come back once its leases expire (the rescue frees them)."""
        store, lane = self._make_store(), self._lane()
        await store.enqueue_many([NewTask("k", lane, max_attempts=5) for _ in range(4)])
        dead = await store.claim_due_for_lane(lane, 2, "dead", self.short_ttl, cluster_limit=2)
        assert len(dead) == 2
        assert await store.claim_due_for_lane(lane, 2, "live", LONG, cluster_limit=2) == []
        await self._expire()
        taken = await store.claim_due_for_lane(lane, 4, "live", LONG, cluster_limit=2)
        assert len(taken) == 2, f"claimed {len(taken)} after the dead claimer's leases expired"
        assert await self._running(store, lane) == 2

    async def check_invalid_cluster_limit_is_rejected(self) -> None:
        """A cluster limit that is not ``None`` or a positive int raises the typed error."""
        store, lane = self._make_store(), self._lane()
        completions: list[TaskCompletion] = []
        for bad in (0, -1, True, 2.0, "2"):
            try:
                await store.claim_due_for_lane(lane, 1, "w", LONG, cluster_limit=bad)  # type: ignore[arg-type]
            except TaskInvalidValueError as exc:
                assert "cluster_limit" in str(exc)
            else:
                raise AssertionError(f"cluster_limit={bad!r} was accepted by the claim")
            try:
                await store.mark_tasks_succeeded_and_claim(
                    completions,
                    lane,
                    1,
                    "w",
                    LONG,
                    cluster_limit=bad,  # type: ignore[arg-type]
                )
            except TaskInvalidValueError:
                pass
            else:
                raise AssertionError(f"cluster_limit={bad!r} was accepted by the success-and-claim")
