"""A manual clock for deterministic timing tests."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from datetime import UTC, datetime, timedelta

__all__ = ["ManualClock"]

_DEFAULT_START = datetime(2030, 1, 1, tzinfo=UTC)


class ManualClock:
    """A :class:`~aster_forge.runtime.Clock` whose time moves only when a test advances it.

    ``sleep`` parks the caller until :meth:`advance` moves time past its deadline.
    :meth:`wait_for_sleepers` lets a test wait until the code under test is parked,
    so ordering never depends on real sleeps.

    Example:
        >>> clock = ManualClock()
        >>> clock.monotonic()
        0.0
    """

    def __init__(self, start: datetime = _DEFAULT_START) -> None:
        if start.tzinfo is None:
            raise ValueError("ManualClock start must be timezone-aware")
        self._start = start
        self._offset = 0.0
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()
        self._changed: asyncio.Event | None = None

    def now(self) -> datetime:
        """Return the start time plus the advanced offset (UTC)."""
        return self._start + timedelta(seconds=self._offset)

    def monotonic(self) -> float:
        """Return the seconds advanced since construction."""
        return self._offset

    @property
    def sleepers(self) -> int:
        """The number of coroutines currently parked in :meth:`sleep`."""
        return sum(1 for _, _, fut in self._sleepers if not fut.done())

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()

    async def sleep(self, seconds: float) -> None:
        """Park until the clock is advanced by at least ``seconds`` (<= 0 yields once)."""
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._offset + seconds, next(self._seq), future))
        self._notify()
        try:
            await future
        finally:
            if not future.done():
                future.cancel()
            self._notify()

    async def advance(self, seconds: float | timedelta) -> None:
        """Move time forward and run every sleeper whose deadline has passed.

        Sleepers are woken in deadline order; the loop gets several turns after each
        wake-up so woken coroutines can run and park again before the next deadline.

        Args:
            seconds: How far to move time (a float in seconds or a ``timedelta``).
        """
        delta = seconds.total_seconds() if isinstance(seconds, timedelta) else float(seconds)
        if delta < 0:
            raise ValueError("ManualClock cannot move backwards")
        target = self._offset + delta
        while self._sleepers and self._sleepers[0][0] <= target:
            deadline, _, future = heapq.heappop(self._sleepers)
            if future.done():
                continue
            self._offset = max(self._offset, deadline)
            future.set_result(None)
            await _settle()
        self._offset = target
        await _settle()

    def set_time(self, when: datetime) -> None:
        """Jump the wall clock (``now``) without waking sleepers; for skew tests."""
        self._start = when - timedelta(seconds=self._offset)

    async def wait_for_sleepers(self, count: int = 1, *, limit: float = 5.0) -> None:
        """Wait (in real time, bounded) until at least ``count`` coroutines are parked.

        Args:
            count: How many parked sleepers to wait for.
            limit: The most real seconds to wait.

        Raises:
            TimeoutError: When fewer sleepers appear within ``limit`` real seconds.
        """
        if self._changed is None:
            self._changed = asyncio.Event()
        async with asyncio.timeout(limit):
            while self.sleepers < count:
                self._changed.clear()
                await self._changed.wait()


async def _settle(turns: int = 10) -> None:
    for _ in range(turns):
        await asyncio.sleep(0)
