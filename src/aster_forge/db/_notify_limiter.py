"""At most one enqueue NOTIFY per lane per window, and never a task left unannounced.

Every ``pg_notify`` reaches every session that ``LISTEN``s, that is every worker
process: the server signals each, each reads the queue and sends a message, each
worker's loop wakes. In a burst all but the first are redundant (the woken worker claims
until nothing is due). So the first enqueue of a lane in a window carries the NOTIFY and
the rest of the window's enqueues insert quietly. Their commits must still be announced
by a NOTIFY delivered after them, or a worker whose last claim came back empty just
before one sleeps until its next poll: either a later enqueue, issued after them,
carries it (in a stream, the first one after the window), or, when none has within one
more window, a trailing ``pg_notify`` of its own does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta

from ..runtime._internal import Clock

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
        # Quiet commits per lane, and how many of them a committed NOTIFY announced.
        self._quiet: dict[str, int] = {}
        self._announced: dict[str, int] = {}
        self._trailing: dict[str, asyncio.Task[None]] = {}
        self._running: set[asyncio.Task[None]] = set()

    def take(self, lane: str) -> int | None:
        """Whether this enqueue's statement carries ``lane``'s NOTIFY (then counted sent).

        Returns:
            ``None``: insert quietly, then call :meth:`inserted_quietly` once committed.
            Otherwise a ticket: the statement carries the NOTIFY; pass the ticket to
            :meth:`carried` once it committed.
        """
        now = self._clock.monotonic()
        sent = self._sent_at.get(lane)
        if sent is not None and now - sent < self._window:
            return None
        self._sent_at[lane] = now
        # Issued after these quiet commits, so its NOTIFY is delivered after them.
        return self._quiet.get(lane, 0)

    def carried(self, lane: str, ticket: int) -> None:
        """A statement that carried ``lane``'s NOTIFY committed (``ticket`` from :meth:`take`)."""
        if ticket > self._announced.get(lane, 0):
            self._announced[lane] = ticket
            trailing = self._trailing.get(lane)
            if (
                trailing is not None
                and self._covered(lane)
                and trailing.get_loop() is asyncio.get_running_loop()
            ):
                # Still waiting, not sending: nothing is left to announce. A quiet commit
                # from now on arms a trailing NOTIFY of its own.
                del self._trailing[lane]
                trailing.cancel()

    def inserted_quietly(self, lane: str) -> None:
        """A quiet insert of ``lane`` committed: make sure a NOTIFY follows it."""
        self._quiet[lane] = self._quiet.get(lane, 0) + 1
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

    def _covered(self, lane: str) -> bool:
        return self._announced.get(lane, 0) >= self._quiet.get(lane, 0)

    async def _trail(self, lane: str) -> None:
        clock = self._clock
        me = asyncio.current_task()
        try:
            # In a stream, the first enqueue after the window carries the NOTIFY and
            # announces these commits (cancelling this wait): give it one more window
            # rather than send a statement of our own.
            await clock.sleep(self._sent_at[lane] + 2 * self._window - clock.monotonic())
        finally:
            # From here on a quiet commit arms a new trailing NOTIFY: this one may be
            # on the wire before that commit.
            if self._trailing.get(lane) is me:
                del self._trailing[lane]
        if self._covered(lane):
            return
        self._sent_at[lane] = clock.monotonic()
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
