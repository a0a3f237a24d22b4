"""A store's ``connection_linger``: the last call's connection kept for the next one.

Kept across idle loop turns while the pool has another connection to lend, reused by
the next call without a checkout, returned once the store was idle for the linger or
on ``release_connection``; never kept when the pool could not lend another at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

from aster_forge.db import BackgroundTaskDbStore
from aster_forge.tasks import NewTask, TaskInvalidValueError

from ..tasks._dispatch_support import REGISTRY, Job, Kind
from ._pg_driver_support import pg_engine

pytestmark = pytest.mark.postgres

_LONG = timedelta(hours=1)


def _task(name: str) -> NewTask:
    return REGISTRY.new_task(Kind.MAIL, Job(name=name))


@pytest.fixture
async def engine(postgres_url: str) -> AsyncIterator[AsyncEngine]:
    """An engine whose pool lends up to five connections."""
    async with pg_engine(postgres_url, pool_size=5, max_overflow=0, pool_timeout=5) as engine:
        yield engine


class _Checkouts:
    """Counts the pool's checkouts (a checkin listener would turn the hold off)."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.pool: Any = engine.sync_engine.pool
        self.count = 0
        event.listen(self.pool, "checkout", self._checkout)

    def _checkout(self, *_: object) -> None:
        self.count += 1


async def test_a_lingering_connection_serves_the_next_calls_without_a_checkout(
    engine: AsyncEngine,
) -> None:
    store = BackgroundTaskDbStore(engine, registry=REGISTRY, notify=False, connection_linger=_LONG)
    events = _Checkouts(engine)
    assert (await store.enqueue(_task("first"))).created
    for _ in range(3):
        await asyncio.sleep(0)  # the loop ran with no call using it: still held
        assert events.pool.checkedout() == 1, events.pool.status()
        assert (await store.enqueue(_task("next"))).created
    assert events.count == 1  # every later call took the held connection
    store.release_connection()
    assert events.pool.checkedout() == 0, events.pool.status()


async def test_a_lingering_connection_goes_back_once_the_store_was_idle_that_long(
    engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = BackgroundTaskDbStore(
        engine,
        registry=REGISTRY,
        notify=False,
        connection_linger=timedelta(milliseconds=20),
    )
    pool: Any = engine.sync_engine.pool
    hold = store._driver_hold
    released = asyncio.Event()
    release = hold._release_idle

    def spy() -> None:
        release()
        released.set()

    monkeypatch.setattr(hold, "_release_idle", spy)
    assert (await store.enqueue(_task("only"))).created
    await asyncio.sleep(0)
    assert pool.checkedout() == 1
    # No release call: the linger's timer hands it back (bounded wait for the event).
    await asyncio.wait_for(released.wait(), timeout=30)
    assert pool.checkedout() == 0, pool.status()


async def test_a_pool_with_nothing_else_to_lend_gets_its_connection_back_at_once(
    postgres_url: str,
) -> None:
    async with pg_engine(postgres_url, pool_size=1, max_overflow=0, pool_timeout=5) as engine:
        store = BackgroundTaskDbStore(
            engine, registry=REGISTRY, notify=False, connection_linger=_LONG
        )
        pool: Any = engine.sync_engine.pool
        assert (await store.enqueue(_task("only"))).created
        await asyncio.sleep(0)
        # A product's own checkout would wait an hour for a lingering connection.
        assert pool.checkedout() == 0, pool.status()


async def test_disposing_the_engine_closes_a_lingering_connection(engine: AsyncEngine) -> None:
    store = BackgroundTaskDbStore(engine, registry=REGISTRY, notify=False, connection_linger=_LONG)
    lent: list[Any] = []
    event.listen(engine.sync_engine.pool, "checkout", lambda *a: lent.append(a[2]))
    assert (await store.enqueue(_task("only"))).created
    (connection,) = lent
    driver = connection.driver_connection
    await engine.dispose()  # closes what is in the pool, and tells the store
    assert driver.is_closed()  # not left open, checked out of a pool that is gone
    assert (await store.enqueue(_task("after"))).created  # on the new pool
    store.release_connection()


async def test_a_negative_linger_is_refused(engine: AsyncEngine) -> None:
    with pytest.raises(TaskInvalidValueError, match="connection_linger"):
        BackgroundTaskDbStore(engine, connection_linger=timedelta(seconds=-1))
