"""At most one enqueue NOTIFY per lane per window, and never a task left unannounced.

A worker that ``LISTEN``s makes every ``pg_notify`` cost the server a signal, a queue
read and a message, and the worker a wake-up: on a small machine about a sixth of a
one-task enqueue (``benchmarks/results/2026-12-02-tenth-session.md``). In a burst,
all but the first are redundant: the woken worker claims until nothing is due. So the
first enqueue of a lane in a window carries the NOTIFY, the rest of the window's
enqueues insert quietly, and one NOTIFY follows the window's end, sent after every
quiet insert had committed: a worker whose last claim came back empty just before a
quiet commit is woken within the window, not at its next poll.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta

from ..runtime import Clock

__all__ = ["DEFAULT_NOTIFY_WINDOW", "NotifyLimiter"]

logger = logging.getLogger("aster_forge.db.notify")

#: The store's default: a burst's quiet inserts are announced within 5 ms.
DEFAULT_NOTIFY_WINDOW = timedelta(milliseconds=5)


class NotifyLimiter:
    """Decides which enqueue carries a lane's NOTIFY; sends the trailing one itself.

    Args:
        window: Seconds between two NOTIFYs of one lane (0: every enqueue notifies).
        send: Sends one lane's NOTIFY (its own statement).
        clock: The clock the window is measured on.
    """

    def __init__(self, window: float, send: Callable[[str], Awaitable[None]], clock: Clock) -> None:
        self._window = window
        self._send = send
        self._clock = clock
        self._sent_at: dict[str, float] = {}
        self._trailing: dict[str, asyncio.Task[None]] = {}
        self._running: set[asyncio.Task[None]] = set()

    def take(self, lane: str) -> bool:
        """Whether this enqueue's statement carries ``lane``'s NOTIFY (then counted sent).

        An enqueue told ``False`` calls :meth:`inserted_quietly` once its insert
        committed.
        """
        now = self._clock.monotonic()
        sent = self._sent_at.get(lane)
        if sent is not None and now - sent < self._window:
            return False
        self._sent_at[lane] = now
        return True

    def inserted_quietly(self, lane: str) -> None:
        """A quiet insert of ``lane`` committed: make sure a NOTIFY follows it."""
        loop = asyncio.get_running_loop()
        armed = self._trailing.get(lane)
        if armed is not None and armed.get_loop() is loop:
            return  # armed and not yet sending: it goes out after this commit
        task = loop.create_task(self._trail(lane), name="aster-forge:enqueue-notify")
        self._trailing[lane] = task
        self._running.add(task)
        task.add_done_callback(self._done)

    async def join(self) -> None:
        """Wait until every armed trailing NOTIFY was sent (or failed)."""
        loop = asyncio.get_running_loop()
        while mine := [task for task in self._running if task.get_loop() is loop]:
            await asyncio.gather(*mine, return_exceptions=True)

    async def _trail(self, lane: str) -> None:
        try:
            delay = self._sent_at[lane] + self._window - self._clock.monotonic()
            await self._clock.sleep(delay)
        finally:
            # From here on a quiet commit arms a new trailing NOTIFY: this one may be
            # on the wire before that commit.
            del self._trailing[lane]
        self._sent_at[lane] = self._clock.monotonic()
        await self._send(lane)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._running.discard(task)
        error = None if task.cancelled() else task.exception()
        if error is not None:
            # The task is stored; a worker finds it at its next poll.
            logger.warning(
                "the trailing enqueue NOTIFY failed (%s); workers see the task at their next poll",
                type(error).__name__,
                exc_info=error,
            )
