"""PostgreSQL enqueue NOTIFY: a burst wakes a listener once, and its last task is announced.

A listener on a channel of its own counts the notifications; ``flush_notifications``
is the event the test waits on, never a sleep.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from aster_forge.db import BackgroundTaskDbStore
from aster_forge.db._tasks_notify import BackgroundTaskNotificationListener
from aster_forge.runtime import CancellationToken
from aster_forge.tasks import NewTask, TaskInvalidValueError

from ._pg_driver_support import pg_engine

pytestmark = pytest.mark.postgres

#: Wide enough that a burst of ten enqueues on a slow machine fits in it.
WINDOW = timedelta(seconds=1)


class Heard:
    """The lanes a listener heard, and an event per count reached."""

    def __init__(self) -> None:
        self.lanes: list[str] = []
        self._changed = asyncio.Event()

    def __call__(self, payload: str | None) -> None:
        if payload is not None:
            self.lanes.append(payload)
            self._changed.set()

    async def until(self, count: int) -> None:
        async with asyncio.timeout(10):
            while len(self.lanes) < count:
                self._changed.clear()
                await self._changed.wait()


@pytest.fixture
async def engine(postgres_url: str) -> AsyncIterator[AsyncEngine]:
    async with pg_engine(postgres_url) as engine:
        yield engine


@pytest.fixture
async def listened(postgres_url: str) -> AsyncIterator[tuple[str, Heard]]:
    channel = f"af_{uuid.uuid4().hex[:12]}"
    heard = Heard()
    listener = BackgroundTaskNotificationListener(postgres_url, channel, heard)
    token = CancellationToken()
    run = asyncio.create_task(listener.run(token), name="listener")
    try:
        await asyncio.wait_for(listener.wait_connected(), 10)
        yield channel, heard
    finally:
        token.cancel()
        await run


@pytest.fixture
def windowed(
    engine: AsyncEngine, listened: tuple[str, Heard]
) -> tuple[BackgroundTaskDbStore, Heard]:
    """A store with a wide window on the listened channel, and what was heard."""
    channel, heard = listened
    return BackgroundTaskDbStore(engine, notify_channel=channel, notify_window=WINDOW), heard


async def test_a_burst_notifies_once_then_once_more_after_its_last_commit(
    windowed: tuple[BackgroundTaskDbStore, Heard],
) -> None:
    store, heard = windowed
    await store.enqueue(NewTask("k", "burst"))
    await heard.until(1)
    for _ in range(9):
        await store.enqueue(NewTask("k", "burst"))
    assert heard.lanes == ["burst"]  # the rest of the window inserted quietly
    await store.flush_notifications()
    await heard.until(2)  # announced after the last quiet commit, not at a poll
    assert heard.lanes == ["burst", "burst"]


async def test_lanes_have_windows_of_their_own_and_batches_always_notify(
    windowed: tuple[BackgroundTaskDbStore, Heard],
) -> None:
    store, heard = windowed
    await store.enqueue(NewTask("k", "a"))
    await store.enqueue(NewTask("k", "b"))
    await heard.until(2)
    await store.enqueue_many([NewTask("k", "a"), NewTask("k", "a")])
    await heard.until(3)
    assert sorted(heard.lanes) == ["a", "a", "b"]
    await store.flush_notifications()  # nothing was quiet: returns at once
    assert len(heard.lanes) == 3


async def test_a_zero_window_notifies_every_enqueue(
    engine: AsyncEngine, listened: tuple[str, Heard]
) -> None:
    channel, heard = listened
    store = BackgroundTaskDbStore(engine, notify_channel=channel, notify_window=timedelta(0))
    for _ in range(5):
        await store.enqueue(NewTask("k", "every"))
    await heard.until(5)
    assert heard.lanes == ["every"] * 5


async def test_a_negative_window_is_refused(engine: AsyncEngine) -> None:
    with pytest.raises(TaskInvalidValueError, match="notify_window"):
        BackgroundTaskDbStore(engine, notify_window=timedelta(milliseconds=-1))
