"""A claim reports the tasks its lease rescue ended (failed, cancelled), on every path.

The expired leases are written into the table (no waiting on a clock): each worker
"died" while holding its task. The next claim of the lane rescues them; the store
counts those it ended, which is what the forge's ``/metrics`` exports.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from aster_forge import BackgroundTaskRecord, TaskStatus
from aster_forge.db import BackgroundTaskDbStore, create_background_tasks_table
from aster_forge.tasks import NewTask
from aster_forge.tasks._records import TaskCompletion, TaskFailureReason
from aster_forge.testing import InMemoryTaskStore, ManualClock

from ._leases import lease_of

_LONG = timedelta(minutes=10)
# Past NEVER_EXPIRES from any "now": PostgreSQL takes the portable rescue-then-claim.
_FOREVER = timedelta.max


async def _three_lost_tasks(
    store: BackgroundTaskDbStore | InMemoryTaskStore,
) -> dict[str, BackgroundTaskRecord]:
    """Three running tasks of ``media`` whose workers died: no attempt left, a cancel
    pending, attempts left."""
    for name, attempts in (("exhausted", 1), ("cancelling", 3), ("retryable", 3)):
        await store.enqueue(NewTask(name, "media", max_attempts=attempts))
    claimed = {r.kind: r for r in await store.claim_due_for_lane("media", 3, "w1", _LONG)}
    assert set(claimed) == {"exhausted", "cancelling", "retryable"}
    await store.cancel_task(claimed["cancelling"].id)
    return claimed


async def _expire(engine: AsyncEngine, store: BackgroundTaskDbStore) -> None:
    t = store.table
    past = datetime.now(UTC) - timedelta(hours=1)
    async with engine.begin() as conn:
        await conn.execute(
            sa.update(t).where(t.c.status == "running").values(lease_expires_at=past)
        )


async def _assert_ended(
    store: BackgroundTaskDbStore | InMemoryTaskStore, lost: dict[str, BackgroundTaskRecord]
) -> None:
    assert store.lease_expiry_counts() == {"media": {TaskStatus.FAILED: 1, TaskStatus.CANCELLED: 1}}
    exhausted = await store.get_task(lost["exhausted"].id)
    cancelled = await store.get_task(lost["cancelling"].id)
    assert exhausted is not None and cancelled is not None
    assert (exhausted.status, exhausted.failure_reason) == (
        TaskStatus.FAILED,
        TaskFailureReason.LEASE_EXPIRED,
    )
    assert cancelled.status is TaskStatus.CANCELLED


@pytest.mark.parametrize("ttl", [_LONG, _FOREVER], ids=["lease", "no-expiry"])
async def test_a_claim_counts_the_tasks_its_rescue_ended(
    engine: AsyncEngine, ttl: timedelta
) -> None:
    await create_background_tasks_table(engine)
    store = BackgroundTaskDbStore(engine, notify=False)
    lost = await _three_lost_tasks(store)
    assert store.lease_expiry_counts() == {}
    await _expire(engine, store)
    (again,) = await store.claim_due_for_lane("media", 5, "w2", ttl)
    # The task with attempts left runs again (its worker counts it as rescued).
    assert (again.id, again.rescued) == (lost["retryable"].id, True)
    await _assert_ended(store, lost)
    # Counted once: a later claim finds nothing more to rescue.
    assert await store.claim_due_for_lane("media", 5, "w2", ttl) == []
    assert store.lease_expiry_counts()["media"][TaskStatus.FAILED] == 1


async def test_the_claim_that_follows_a_success_counts_them_too(engine: AsyncEngine) -> None:
    await create_background_tasks_table(engine)
    store = BackgroundTaskDbStore(engine, notify=False)
    lost = await _three_lost_tasks(store)
    await store.enqueue(NewTask("ok", "media"))
    (done,) = await store.claim_due_for_lane("media", 1, "w2", _LONG)
    await _expire(engine, store)
    t = store.table
    async with engine.begin() as conn:  # the finishing task's own lease is still live
        await conn.execute(
            sa.update(t).where(t.c.id == done.id).values(lease_expires_at=done.lease_expires_at)
        )
    written, claimed = await store.mark_tasks_succeeded_and_claim(
        [TaskCompletion(lease_of(done), None, None)], "media", 5, "w2", _LONG
    )
    assert written == [True]
    assert [r.id for r in claimed] == [lost["retryable"].id]
    await _assert_ended(store, lost)


async def test_the_in_memory_store_counts_the_same_endings() -> None:
    clock = ManualClock()
    store = InMemoryTaskStore(clock)
    lost = await _three_lost_tasks(store)
    await clock.advance(_LONG * 2)
    (again,) = await store.claim_due_for_lane("media", 5, "w2", _LONG)
    assert again.id == lost["retryable"].id
    await _assert_ended(store, lost)
