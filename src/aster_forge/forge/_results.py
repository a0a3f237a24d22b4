"""Awaiting a task's result: woken by a ``NOTIFY`` on PostgreSQL, polled elsewhere.

On PostgreSQL a waiter flags the task's row (``result_awaited``), and the write that
ends a flagged task notifies a results channel in the same statement; tasks nobody
awaits end as before and notify nothing. One ``LISTEN`` connection per event loop
(started by the first waiter, closed with the forge) wakes the waiters by task id.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

from ..db import BackgroundTaskDbStore
from ..db._internal import RESULTS_CHANNEL, BackgroundTaskNotificationListener
from ..runtime import CancellationToken
from ..tasks import BackgroundTaskStore
from ..tasks._internal import BackgroundTaskRecord
from ..tasks.errors import TaskNotFoundError

__all__ = ["ResultListener", "polled", "pushed"]

# A polled store: fast at first (a short task is often done within a few milliseconds),
# backing off so a long wait costs the database little.
FIRST_POLL = 0.01
LONGEST_POLL = 1.0

SAFETY_POLL = 5.0
"""On PostgreSQL, how often a woken-by-NOTIFY waiter reads the row anyway: for a
notification lost while the listener reconnected, or an ending written outside the
store (which sends none)."""


async def polled(store: BackgroundTaskStore, task_id: int) -> BackgroundTaskRecord:
    """The task's row once it has ended, read again and again.

    Raises:
        TaskNotFoundError: No task has that id.
    """
    pause = FIRST_POLL
    while True:
        record = await store.get_task(task_id)
        if record is None:
            raise TaskNotFoundError(task_id)
        if record.status.is_terminal:
            return record
        await asyncio.sleep(pause)
        pause = min(pause * 2, LONGEST_POLL)


class ResultListener:
    """One ``LISTEN`` on the results channel, waking the waiters of each notified task id.

    Args:
        url: The PostgreSQL URL (the connection is asyncpg's own, outside the pool).
    """

    def __init__(self, url: str) -> None:
        self._listener = BackgroundTaskNotificationListener(url, RESULTS_CHANNEL, self._notified)
        self._waiters: dict[int, set[asyncio.Event]] = {}
        self._token = CancellationToken()
        self._task: asyncio.Task[None] | None = None

    def _notified(self, payload: str | None) -> None:
        if payload is None:
            # (Re)connected: what was notified before is lost; every waiter reads again.
            woken = [event for events in self._waiters.values() for event in events]
        else:
            try:
                woken = list(self._waiters.get(int(payload), ()))
            except ValueError:
                return
        for event in woken:
            event.set()

    @contextlib.contextmanager
    def waiting(self, task_id: int) -> Iterator[asyncio.Event]:
        """An event set when ``task_id`` is notified (or the listener reconnects);
        the listener starts with the first waiter."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._listener.run(self._token), name="aster-forge-result-listener"
            )
        event = asyncio.Event()
        events = self._waiters.setdefault(task_id, set())
        events.add(event)
        try:
            yield event
        finally:
            events.discard(event)
            if not events and self._waiters.get(task_id) is events:
                del self._waiters[task_id]

    async def wait_connected(self) -> None:
        """Wait until ``LISTEN`` is active (a notification sent before is not received)."""
        await self._listener.wait_connected()

    async def aclose(self) -> None:
        """Stop listening (a later waiter starts again)."""
        task, self._task = self._task, None
        if task is None:
            return
        self._token.cancel()
        self._token = CancellationToken()
        await task


async def pushed(
    store: BackgroundTaskDbStore, listener: ResultListener, task_id: int
) -> BackgroundTaskRecord:
    """The task's row once it has ended: flagged as awaited, then read when notified.

    The waiter is registered before the flag and the row read after it, so an ending
    at any moment is seen: before the flag by that read, after it by its notification.

    Raises:
        TaskNotFoundError: No task has that id.
    """
    with listener.waiting(task_id) as woken:
        record = await store.mark_result_awaited(task_id)
        while True:
            if record is None:
                raise TaskNotFoundError(task_id)
            if record.status.is_terminal:
                return record
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(woken.wait(), SAFETY_POLL)
            woken.clear()
            record = await store.get_task(task_id)
