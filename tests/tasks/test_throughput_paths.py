"""The batched hot path: shared heartbeat, batched fenced successes, the worker."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import timedelta

import pytest

from aster_forge import BackgroundTaskRecord, TaskStatus
from aster_forge.runtime import CancellationToken
from aster_forge.tasks import (
    SharedTaskHeartbeat,
    TaskLaneConfig,
    TaskLease,
    TaskLeaseGuard,
    TaskWorker,
)
from aster_forge.tasks._completion import TaskCompletionBatcher
from aster_forge.tasks._heartbeat import task_heartbeat_interval
from aster_forge.tasks._records import TaskCompletion
from aster_forge.testing import InMemoryTaskStore, ManualClock

from ._dispatch_support import (
    LEASE_TTL,
    Harness,
    Kind,
    Lane,
    enqueue,
    make_config,
    new_task,
    until,
)


class CountingStore(InMemoryTaskStore):
    """Counts the batched calls the hot path makes."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock)
        self.renew_batches: list[int] = []
        self.success_batches: list[int] = []
        self.success_error: Exception | None = None
        self.renew_error: Exception | None = None

    async def renew_task_leases_many(
        self, leases: Sequence[TaskLease], lease_ttl: timedelta
    ) -> list[TaskLease | None]:
        self.renew_batches.append(len(leases))
        if self.renew_error is not None:
            raise self.renew_error
        return await super().renew_task_leases_many(leases, lease_ttl)

    async def mark_tasks_succeeded_many(self, completions: Sequence[TaskCompletion]) -> list[bool]:
        self.success_batches.append(len(completions))
        if self.success_error is not None:
            raise self.success_error
        return await super().mark_tasks_succeeded_many(completions)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def store(clock: ManualClock) -> CountingStore:
    return CountingStore(clock)


async def _claim(store: CountingStore, count: int) -> list[BackgroundTaskRecord]:
    await enqueue(store, *(new_task(Kind.MAIL, f"t{n}") for n in range(count)))
    return list(await store.claim_due_for_lane(Lane.FALLBACK, count, "w", LEASE_TTL))


def _guard(record: BackgroundTaskRecord, clock: ManualClock) -> TaskLeaseGuard:
    assert record.processing_token is not None and record.lease_expires_at is not None
    lease = TaskLease(record.id, record.processing_token, record.lease_expires_at)
    return TaskLeaseGuard(lease, LEASE_TTL, clock=clock)


async def test_shared_heartbeat_renews_every_lease_in_one_call(
    store: CountingStore, clock: ManualClock
) -> None:
    records = await _claim(store, 3)
    guards = [_guard(record, clock) for record in records]
    heartbeat = SharedTaskHeartbeat(store, clock, LEASE_TTL)
    for guard in guards:
        heartbeat.register(guard)
    await clock.wait_for_sleepers(1)
    await clock.advance(task_heartbeat_interval(LEASE_TTL).total_seconds())
    await until(lambda: store.renew_batches == [3])
    assert all(guard.remaining() > LEASE_TTL.total_seconds() - 1 for guard in guards)
    for guard in guards:
        heartbeat.unregister(guard)
    await heartbeat.join()
    assert len(heartbeat) == 0


async def test_fenced_out_renewal_marks_only_that_lease_lost(
    store: CountingStore, clock: ManualClock
) -> None:
    records = await _claim(store, 2)
    kept, lost = (_guard(record, clock) for record in records)
    heartbeat = SharedTaskHeartbeat(store, clock, LEASE_TTL)
    heartbeat.register(kept)
    heartbeat.register(lost)
    # Another writer ends the second claim behind the heartbeat's back.
    assert await store.mark_task_succeeded(lost.lease, None, None)
    await clock.wait_for_sleepers(1)
    await clock.advance(task_heartbeat_interval(LEASE_TTL).total_seconds())
    await until(lambda: lost.lease_lost)
    assert lost.token.cancelled, "the context is cancelled at once"
    assert not kept.lease_lost and not kept.token.cancelled
    heartbeat.unregister(kept)
    heartbeat.unregister(lost)
    await heartbeat.join()


async def test_failed_renewal_past_the_deadline_times_out(
    store: CountingStore, clock: ManualClock
) -> None:
    (record,) = await _claim(store, 1)
    guard = _guard(record, clock)

    store.renew_error = ConnectionError("database is down")
    heartbeat = SharedTaskHeartbeat(store, clock, LEASE_TTL)
    heartbeat.register(guard)
    for _ in range(50):
        if guard.lease_lost:
            break
        await clock.wait_for_sleepers(1)
        await clock.advance(task_heartbeat_interval(LEASE_TTL).total_seconds())
    assert guard.lease_lost and guard.token.cancelled
    heartbeat.unregister(guard)
    await heartbeat.join()


async def test_batcher_coalesces_and_fences_each_entry(
    store: CountingStore, clock: ManualClock
) -> None:
    records = await _claim(store, 3)
    guards = [_guard(record, clock) for record in records]
    batcher = TaskCompletionBatcher(store)
    stale = TaskLease(guards[2].lease.task_id, "not-the-token", guards[2].lease.expires_at)
    futures = [
        batcher.succeed(guards[0].lease, '"a"', None),
        batcher.succeed(guards[1].lease, '"b"', None),
        batcher.succeed(stale, '"c"', None),
    ]
    results = await asyncio.gather(*futures)
    assert results == [True, True, False]
    assert store.success_batches == [3]
    rows = {row.id: row for row in store.all_tasks()}
    assert rows[guards[0].lease.task_id].result_json == '"a"'
    assert rows[guards[2].lease.task_id].status is TaskStatus.RUNNING
    await batcher.join()


async def test_batcher_error_reaches_every_waiter(store: CountingStore, clock: ManualClock) -> None:
    records = await _claim(store, 2)
    store.success_error = ConnectionError("lost connection")
    batcher = TaskCompletionBatcher(store)
    futures = [batcher.succeed(_guard(r, clock).lease, None, None) for r in records]
    outcomes = await asyncio.gather(*futures, return_exceptions=True)
    assert all(isinstance(outcome, ConnectionError) for outcome in outcomes)
    assert {row.status for row in store.all_tasks()} == {TaskStatus.RUNNING}
    with pytest.raises(ValueError, match="max_batch"):
        TaskCompletionBatcher(store, max_batch=0)


async def test_worker_batches_successes_and_counts_store_errors(
    store: CountingStore, clock: ManualClock
) -> None:
    harness = Harness()
    token = CancellationToken()
    worker = TaskWorker(
        store,
        lanes=[TaskLaneConfig(Lane.FALLBACK, 4)],
        execution=make_config(harness, clock, shutdown_token=token),
        owner="w",
        partial_lanes=True,
    )
    await enqueue(store, *(new_task(Kind.MAIL, f"m{n}") for n in range(4)))
    await worker.drain()
    await worker.join()
    assert store.success_batches == [4]
    assert worker.stats.total().succeeded == 4
    # A batch whose statement raises: every task of it is a store error (rescued later).
    store.success_error = ConnectionError("lost connection")
    await enqueue(store, *(new_task(Kind.MAIL, f"x{n}") for n in range(2)))
    await worker.drain()
    await worker.join()
    assert worker.stats.total().store_errors == 2
    running = [row for row in store.all_tasks() if row.status is TaskStatus.RUNNING]
    assert len(running) == 2
    await worker.shutdown()
