"""Successes written and freed slots claimed together (one statement on PostgreSQL, one
transaction on SQLite)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from aster_forge import BackgroundTaskRecord, TaskStatus
from aster_forge.db import (
    BackgroundTaskDbStore,
    DatabaseUnavailableError,
    create_background_tasks_table,
)
from aster_forge.tasks import NewTask
from aster_forge.tasks._rate_limit import TaskRateLimit
from aster_forge.tasks._records import TaskCompletion

from ._leases import lease_of

_LONG = timedelta(minutes=10)


async def _store(engine: AsyncEngine, count: int) -> tuple[BackgroundTaskDbStore, list[int]]:
    await create_background_tasks_table(engine)
    store = BackgroundTaskDbStore(engine, notify=False)
    results = await store.enqueue_many(
        [NewTask("k", "media", payload_json=str(n)) for n in range(count)]
    )
    return store, [result.record.id for result in results]


async def test_each_success_is_fenced_and_the_freed_slots_are_claimed(engine: AsyncEngine) -> None:
    store, ids = await _store(engine, 4)
    first = await store.claim_due_for_lane("media", 2, "w1", _LONG)
    stale = replace(lease_of(first[1]), processing_token="not-the-claim's-token")
    written, claimed = await store.mark_tasks_succeeded_and_claim(
        [TaskCompletion(lease_of(first[0]), '"done"', None), TaskCompletion(stale, None, None)],
        "media",
        5,
        "w2",
        _LONG,
    )
    assert written == [True, False]
    assert sorted(r.id for r in claimed) == sorted(set(ids) - {r.id for r in first})
    tokens = {r.processing_token for r in claimed}
    assert None not in tokens and len(tokens) == 2
    assert all(r.status is TaskStatus.RUNNING and r.claimed_by == "w2" for r in claimed)
    done = await store.get_task(first[0].id)
    refused = await store.get_task(first[1].id)
    assert done is not None and done.status is TaskStatus.SUCCEEDED
    assert done.result_json == '"done"'
    assert refused is not None and refused.status is TaskStatus.RUNNING
    assert refused.processing_token == first[1].processing_token


async def test_a_row_written_in_the_batch_is_not_rescued_by_its_claim(engine: AsyncEngine) -> None:
    # The success arrives after the lease's expiry but while the claim still holds (no
    # one rescued it yet): it is written, and the claim's rescue must leave it alone.
    store, _ = await _store(engine, 1)
    (record,) = await store.claim_due_for_lane("media", 1, "w1", _LONG)
    t = store.table
    past = datetime.now(UTC) - timedelta(hours=1)
    async with engine.begin() as conn:
        await conn.execute(sa.update(t).where(t.c.id == record.id).values(lease_expires_at=past))
    written, claimed = await store.mark_tasks_succeeded_and_claim(
        [TaskCompletion(lease_of(record), None, None)], "media", 1, "w2", _LONG
    )
    assert (written, claimed) == ([True], [])
    row = await store.get_task(record.id)
    assert row is not None
    assert (row.status, row.attempt, row.rescued) == (TaskStatus.SUCCEEDED, 0, False)


async def test_a_paused_lane_is_not_claimed_but_the_successes_are_written(
    engine: AsyncEngine,
) -> None:
    store, _ = await _store(engine, 3)
    (record,) = await store.claim_due_for_lane("media", 1, "w1", _LONG)
    await store.pause_lane("media")
    written, claimed = await store.mark_tasks_succeeded_and_claim(
        [TaskCompletion(lease_of(record), None, None)], "media", 2, "w2", _LONG
    )
    assert (written, claimed) == ([True], [])
    await store.resume_lane("media")
    written, claimed = await store.mark_tasks_succeeded_and_claim([], "media", 2, "w2", _LONG)
    assert written == [] and len(claimed) == 2


class _ClaimFails(BackgroundTaskDbStore):
    """A store whose claim fails (the server went away between the two calls)."""

    async def claim_due_for_lane(
        self,
        lane: str,
        limit: int,
        owner: str,
        lease_ttl: timedelta,
        *,
        cluster_limit: int | None = None,
        partition_limit: int | None = None,
        rate_limit: TaskRateLimit | None = None,
        partition_rate_limit: TaskRateLimit | None = None,
    ) -> list[BackgroundTaskRecord]:
        if owner == "w2":
            raise DatabaseUnavailableError("connection lost", operation="claim tasks")
        return await super().claim_due_for_lane(
            lane,
            limit,
            owner,
            lease_ttl,
            cluster_limit=cluster_limit,
            partition_limit=partition_limit,
            rate_limit=rate_limit,
            partition_rate_limit=partition_rate_limit,
        )


async def test_together_on_postgresql_and_sqlite_and_stored_successes_are_reported(
    engine: AsyncEngine, backend: str
) -> None:
    await create_background_tasks_table(engine)
    store = _ClaimFails(engine, notify=False)
    assert store.claims_with_success is (backend in ("postgres", "sqlite"))
    (result,) = await store.enqueue_many([NewTask("k", "media")])
    (record,) = await store.claim_due_for_lane("media", 1, "w1", _LONG)
    completions = [TaskCompletion(lease_of(record), None, None)]
    if store.claims_with_success:
        return  # committed together: the claim cannot fail after the successes were stored
    written, claimed = await store.mark_tasks_succeeded_and_claim(
        completions, "media", 1, "w2", _LONG
    )
    assert (written, claimed) == ([True], [])
    row = await store.get_task(result.record.id)
    assert row is not None and row.status is TaskStatus.SUCCEEDED
