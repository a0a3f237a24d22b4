"""Clocks: the wall/monotonic time source that timing-sensitive code is given."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "SystemClock", "sleep_or_cancelled", "utc_now"]


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


async def sleep_or_cancelled(clock: Clock, token: _TokenLike, seconds: float) -> bool:
    """Sleep ``seconds`` on ``clock`` unless ``token`` is cancelled first.

    Args:
        clock: The clock whose time the sleep is measured in.
        token: A cancellation token (anything with ``cancelled`` and ``await wait()``).
        seconds: The sleep duration; zero or negative yields once.

    Returns:
        ``True`` when the token was cancelled before or during the sleep, else ``False``.
    """
    if token.cancelled:
        return True
    sleeper = asyncio.create_task(clock.sleep(seconds), name="aster-forge:clock-sleep")
    waiter = asyncio.create_task(token.wait(), name="aster-forge:token-wait")
    try:
        await asyncio.wait({sleeper, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (sleeper, waiter):
            if not task.done():
                task.cancel()
        # Join both helpers so none outlives the call, even when we are cancelled.
        await asyncio.gather(sleeper, waiter, return_exceptions=True)
    return token.cancelled


class _TokenLike(Protocol):
    @property
    def cancelled(self) -> bool: ...

    async def wait(self) -> None: ...
