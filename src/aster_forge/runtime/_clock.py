"""Clocks: the wall/monotonic time source that timing-sensitive code is given."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "SystemClock", "utc_now"]


def utc_now() -> datetime:
    """Return the current time as an aware UTC datetime."""
    return datetime.now(UTC)


@runtime_checkable
class Clock(Protocol):
    """A time source. Production code uses :class:`SystemClock`; tests use a manual one.

    ``aster_forge.testing.ManualClock`` implements this protocol with time that only
    moves when the test advances it.
    """

    def now(self) -> datetime:
        """Return the current wall-clock time as an aware UTC datetime."""
        ...

    def monotonic(self) -> float:
        """Return a monotonic reading in seconds, for measuring intervals."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Suspend the caller for ``seconds`` of this clock's time."""
        ...


class SystemClock:
    """The real clock: ``datetime.now(UTC)``, ``time.monotonic`` and ``asyncio.sleep``."""

    __slots__ = ()

    def now(self) -> datetime:
        """Return the current UTC time."""
        return utc_now()

    def monotonic(self) -> float:
        """Return ``time.monotonic()``."""
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        """Sleep with ``asyncio.sleep`` (negative values sleep zero)."""
        await asyncio.sleep(max(seconds, 0.0))

    def __repr__(self) -> str:
        return "SystemClock()"
