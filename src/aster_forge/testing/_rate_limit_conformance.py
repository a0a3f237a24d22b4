"""Conformance checks of a task store's lane rate limit (``rate_limit``)."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, ClassVar

from ..tasks import BackgroundTaskStore, NewTask, TaskInvalidValueError
from ..tasks._internal import BackgroundTaskRecord, TaskCompletion, TaskStatus, rate_window
from ._task_control_conformance import LONG, lease_of

__all__ = ["RateLimitChecks"]

# Windows are aligned to the epoch: a century-long one has no boundary for decades,
# so checks of the budget alone cannot straddle two windows.
_CENTURY = timedelta(days=36525)


class RateLimitChecks:
    """The rate-limit checks :class:`~aster_forge.testing.TaskStoreConformance` runs.

    Mixed into the suite, which provides ``_make_store``, ``_lane`` and ``_advance``.
    """

    if TYPE_CHECKING:
        _make_store: Callable[[], BackgroundTaskStore]
        _advance: Callable[[timedelta], Awaitable[None]]
        contenders: int

        @staticmethod
        def _lane() -> str:
            """A fresh lane name."""

    RATE_LIMIT_CHECKS: ClassVar[tuple[str, ...]] = (
        "check_rate_limit_caps_starts_per_window",
        "check_racing_claims_never_exceed_the_rate_in_any_window",
        "check_invalid_rate_limit_is_rejected",
    )

    async def _started(self, store: BackgroundTaskStore, lane: str) -> list[datetime]:
        page = await store.list_tasks(status=TaskStatus.RUNNING, lane=lane, limit=1000)
        return [r.started_at for r in page.items if r.started_at is not None]

    async def check_rate_limit_caps_starts_per_window(self) -> None:
        """Claims of every instance start at most ``count`` tasks per window, whether the
        earlier starts are still running or not; the success-and-claim counts too."""
        first, second, lane = self._make_store(), self._make_store(), self._lane()
        await first.enqueue_many([NewTask("k", lane) for _ in range(8)])
        rate = (3, _CENTURY)
        claimed = await first.claim_due_for_lane(lane, 2, "worker-a", LONG, rate_limit=rate)
        assert len(claimed) == 2, f"claimed {len(claimed)} of a budget of 3"
        more = await second.claim_due_for_lane(lane, 10, "worker-b", LONG, rate_limit=rate)
        assert len(more) == 1, f"another instance claimed {len(more)} with 1 start left"
        assert await first.mark_task_succeeded(lease_of(claimed[0]), None, None)
        done = [TaskCompletion(lease_of(claimed[1]), None, None)]
        written, after = await first.mark_tasks_succeeded_and_claim(
            done, lane, 10, "worker-a", LONG, rate_limit=rate
        )
        assert list(written) == [True]
        assert list(after) == [], "a finished task gave a start back to the rate limit"
        [state] = await second.lane_states([lane])
        assert state.rate_started == 3, f"the lane state counts {state.rate_started} of 3 starts"
        unlimited = await second.claim_due_for_lane(lane, 2, "worker-b", LONG)
        assert len(unlimited) == 2, "without a rate limit the claim takes every due task"

    async def check_racing_claims_never_exceed_the_rate_in_any_window(self) -> None:
        """Racing claimers (separate store instances) over several windows: no window
        holds more than ``count`` stored ``started_at``, and each fresh window fills."""
        lane, count, period, rounds = self._lane(), 4, timedelta(milliseconds=500), 3
        stores = [self._make_store() for _ in range(self.contenders)]
        await stores[0].enqueue_many(
            [NewTask("k", lane) for _ in range(2 * self.contenders * rounds)]
        )

        async def claim(store: BackgroundTaskStore, me: int) -> list[BackgroundTaskRecord]:
            return list(
                await store.claim_due_for_lane(
                    lane, 2, f"worker-{me}", LONG, rate_limit=(count, period)
                )
            )

        claimed = 0
        for _ in range(rounds):
            results = await asyncio.gather(*(claim(s, i) for i, s in enumerate(stores)))
            got = sum(len(batch) for batch in results)
            assert got >= count, f"a fresh window started only {got} of {count} tasks"
            claimed += got
            await self._advance(period)
        started = await self._started(stores[0], lane)
        assert len(started) == claimed
        per_window = Counter(rate_window(at, period) for at in started)
        worst = max(per_window.values())
        assert worst <= count, f"{worst} starts in one window under a rate of {count}"

    async def check_invalid_rate_limit_is_rejected(self) -> None:
        """A rate limit that is not ``None`` or ``(count >= 1, positive timedelta)``
        raises the typed error naming it, before anything is written."""
        store, lane = self._make_store(), self._lane()
        second = timedelta(seconds=1)
        bad_limits: tuple[object, ...] = (
            (0, second),
            (True, second),
            (1, timedelta(0)),
            (1, 1.0),
            5,
            (5, second, 1),
        )
        for bad in bad_limits:
            try:
                await store.claim_due_for_lane(lane, 1, "w", LONG, rate_limit=bad)  # type: ignore[arg-type]
            except TaskInvalidValueError as exc:
                assert "rate_limit" in str(exc)
            else:
                raise AssertionError(f"rate_limit={bad!r} was accepted by the claim")
            try:
                await store.mark_tasks_succeeded_and_claim(
                    [],
                    lane,
                    1,
                    "w",
                    LONG,
                    rate_limit=bad,  # type: ignore[arg-type]
                )
            except TaskInvalidValueError:
                pass
            else:
                raise AssertionError(f"rate_limit={bad!r} was accepted by the success-and-claim")
