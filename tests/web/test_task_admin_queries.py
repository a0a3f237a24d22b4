"""Operator queries on every store: search filters, paging both ways, counts, throughput, bulk."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from aster_forge import BackgroundTaskRecord, TaskStatus
from aster_forge.tasks import NewTask, TaskDedupeKey, TaskInvalidValueError, TaskStepSpec
from aster_forge.tasks._admin_query import TaskAdminStore, TaskQuery
from aster_forge.tasks._steps import (
    TaskStepStatus,
    initial_task_steps_from_specs,
    parse_task_steps_json,
    serialize_task_steps_json,
)

from ._stores import AdminStore as Store
from ._stores import backend_fixture, database_url_fixture, store_fixture  # noqa: F401
from ._support import LEASE_TTL, claim_one, seed_tasks


async def row(store: Store, task_id: int) -> BackgroundTaskRecord:
    record = await store.get_task(task_id)
    assert record is not None
    return record


async def ids_of(store: Store, query: TaskQuery, **page: int) -> list[int]:
    return [r.id for r in (await store.search_tasks(query, **page)).items]


async def test_the_stores_offer_the_admin_queries(store: Store) -> None:
    assert isinstance(store, TaskAdminStore)


async def test_every_filter_narrows_the_search(store: Store) -> None:
    ids = await seed_tasks(store)
    keyed = await store.enqueue(
        NewTask(kind="mail", lane="media", dedupe_key=TaskDedupeKey("order-42"))
    )
    everything = await ids_of(store, TaskQuery())
    assert everything == sorted([*ids.values(), keyed.record.id], reverse=True)
    assert await ids_of(store, TaskQuery(status=TaskStatus.FAILED)) == sorted(
        [ids["failed"], ids["failed_final"]], reverse=True
    )
    assert await ids_of(store, TaskQuery(kind="render")) == [ids["pending"], ids["running"]]
    assert await ids_of(store, TaskQuery(lane="maintenance", status=TaskStatus.SUCCEEDED)) == [
        ids["succeeded"]
    ]
    assert await ids_of(store, TaskQuery(task_id=ids["running"])) == [ids["running"]]
    assert await ids_of(store, TaskQuery(dedupe_key="order-42")) == [keyed.record.id]
    # Case-insensitive; LIKE wildcards in the text match only themselves.
    assert len(await ids_of(store, TaskQuery(error_contains="PUBLISH failed"))) == 2
    assert await ids_of(store, TaskQuery(error_contains="publish%500")) == []
    assert await ids_of(store, TaskQuery(error_contains="_")) == []
    newest = (await row(store, keyed.record.id)).created_at
    later = newest + timedelta(seconds=1)
    assert await ids_of(store, TaskQuery(created_until=later)) == everything
    assert await ids_of(store, TaskQuery(created_from=later)) == []


async def test_keyset_paging_walks_both_ways(store: Store) -> None:
    created = [(await store.enqueue(NewTask(kind="k", lane="l"))).record.id for _ in range(7)]
    newest_first = sorted(created, reverse=True)
    query = TaskQuery(lane="l")
    first = await store.search_tasks(query, limit=3)
    assert [r.id for r in first.items] == newest_first[:3]
    assert first.prev_after_id is None and first.next_before_id == newest_first[2]
    second = await store.search_tasks(query, limit=3, before_id=first.next_before_id)
    assert [r.id for r in second.items] == newest_first[3:6]
    third = await store.search_tasks(query, limit=3, before_id=second.next_before_id)
    assert [r.id for r in third.items] == newest_first[6:]
    assert third.next_before_id is None and third.prev_after_id == newest_first[6]
    back = await store.search_tasks(query, limit=3, after_id=third.prev_after_id)
    assert [r.id for r in back.items] == newest_first[3:6]
    assert back.prev_after_id == newest_first[3] and back.next_before_id == newest_first[5]
    top = await store.search_tasks(query, limit=3, after_id=back.prev_after_id)
    assert [r.id for r in top.items] == newest_first[:3] and top.prev_after_id is None
    between = await store.search_tasks(
        query, limit=2, before_id=newest_first[1], after_id=newest_first[6]
    )
    assert [r.id for r in between.items] == newest_first[4:6]
    assert between.prev_after_id == newest_first[4]


async def test_counts_per_status_ignore_the_status_filter(store: Store) -> None:
    await seed_tasks(store)
    counts = await store.count_tasks(TaskQuery(status=TaskStatus.FAILED, lane="maintenance"))
    assert counts == {
        TaskStatus.PENDING: 0,
        TaskStatus.RUNNING: 0,
        TaskStatus.SUCCEEDED: 1,
        TaskStatus.FAILED: 2,
        TaskStatus.CANCELLED: 0,
    }
    lanes = {c.lane: c for c in await store.lane_status_counts()}
    assert set(lanes) == {"maintenance", "media"}
    assert lanes["media"].counts[TaskStatus.PENDING] == 1
    assert lanes["media"].counts[TaskStatus.RUNNING] == 1
    assert lanes["maintenance"].counts[TaskStatus.FAILED] == 2
    assert lanes["media"].oldest_pending_created_at is not None
    assert lanes["maintenance"].oldest_pending_created_at is None


async def test_throughput_counts_outcomes_in_the_current_minute(store: Store) -> None:
    await seed_tasks(store)  # maintenance: 1 succeeded, 2 failed
    await store.enqueue(NewTask(kind="flaky", lane="media", max_attempts=3))
    await store.enqueue(NewTask(kind="flaky", lane="media", max_attempts=3))
    for _ in range(2):
        _, lease = await claim_one(store, "media")
        assert await store.mark_task_retry(
            lease, delay=timedelta(hours=1), error="timeout", steps_json=None, count_attempt=True
        )
    rows = await store.task_throughput(minutes=60)
    totals = {
        lane: [
            sum(getattr(r, f) for r in rows if r.lane == lane)
            for f in ("succeeded", "failed", "retried")
        ]
        for lane in ("maintenance", "media")
    }
    assert totals == {"maintenance": [1, 2, 0], "media": [0, 0, 2]}
    now = datetime.now(UTC)
    assert all(abs(r.minute - now) < timedelta(minutes=2) for r in rows)
    with pytest.raises(TaskInvalidValueError, match="minutes"):
        await store.task_throughput(minutes=0)


async def test_bulk_retry_applies_the_single_retry_rule(store: Store) -> None:
    ids = await seed_tasks(store)
    query = TaskQuery(lane="maintenance")
    preview = await store.retry_tasks(query, limit=100, dry_run=True)
    assert (preview.matched, preview.eligible, preview.changed) == (3, 1, ())
    assert (await row(store, ids["failed"])).status is TaskStatus.FAILED
    done = await store.retry_tasks(query, limit=100)
    assert done.changed == (ids["failed"],)
    assert (await row(store, ids["failed"])).status is TaskStatus.PENDING
    final = await store.get_task(ids["failed_final"])
    assert final is not None and final.status is TaskStatus.FAILED  # not allowed: untouched


async def test_bulk_cancel_ends_a_pending_task_s_waiting_step(store: Store) -> None:
    steps = initial_task_steps_from_specs(
        (TaskStepSpec("load", "Load"), TaskStepSpec("send", "Send"))
    )
    made = await store.enqueue(
        NewTask("bulk-kind", "bulk-steps", steps_json=serialize_task_steps_json(steps))
    )
    done = await store.cancel_tasks(TaskQuery(lane="bulk-steps"), limit=10)
    assert done.changed == (made.record.id,)
    stored = parse_task_steps_json((await row(store, made.record.id)).steps_json or "[]")
    assert [s.status for s in stored] == [TaskStepStatus.CANCELLED, TaskStepStatus.PENDING]


async def test_bulk_cancel_ends_pending_and_flags_running(store: Store) -> None:
    ids = await seed_tasks(store)
    running_before = await store.get_task(ids["running"])
    assert running_before is not None
    done = await store.cancel_tasks(TaskQuery(lane="media"), limit=100)
    assert set(done.changed) == {ids["pending"], ids["running"]} and done.matched == 2
    pending = await store.get_task(ids["pending"])
    running = await store.get_task(ids["running"])
    assert pending is not None and pending.status is TaskStatus.CANCELLED
    assert running is not None and running.status is TaskStatus.RUNNING
    assert running.cancel_requested and running.processing_token == running_before.processing_token
    again = await store.cancel_tasks(TaskQuery(lane="media"), limit=100)
    assert (again.eligible, again.changed) == (0, ())
    limited = await store.retry_tasks(TaskQuery(), limit=1, dry_run=True)
    assert limited.matched == 1
    assert LEASE_TTL  # the running task's lease was never renewed or cleared by the cancel
