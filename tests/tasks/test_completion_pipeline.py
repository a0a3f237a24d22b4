"""Two success writes in flight: a large batch is split, small ones wait their turn.

The store's batched success blocks on an event, so the test sees what is in flight at
each moment (no sleeps, no timing).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from aster_forge import TaskStatus
from aster_forge.tasks import (
    ClaimedTaskExecution,
    ClaimedTaskOutcome,
    SharedTaskHeartbeat,
    TaskLease,
)
from aster_forge.tasks._completion import TaskCompletionBatcher
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


class GatedStore(InMemoryTaskStore):
    """Each batched success waits for ``gate``; records the batches in flight."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock)
        self.gate = asyncio.Event()
        self.batches: list[int] = []
        self.in_flight = 0
        self.most_in_flight = 0

    async def mark_tasks_succeeded_many(self, completions: Sequence[TaskCompletion]) -> list[bool]:
        self.batches.append(len(completions))
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await self.gate.wait()
            return await super().mark_tasks_succeeded_many(completions)
        finally:
            self.in_flight -= 1


@pytest.fixture
def store() -> GatedStore:
    return GatedStore(ManualClock())


async def _leases(store: GatedStore, count: int) -> list[TaskLease]:
    await enqueue(store, *(new_task(Kind.MAIL, f"t{n}") for n in range(count)))
    records = await store.claim_due_for_lane(Lane.FALLBACK, count, "w", LEASE_TTL)
    leases = []
    for record in records:
        assert record.processing_token is not None and record.lease_expires_at is not None
        leases.append(TaskLease(record.id, record.processing_token, record.lease_expires_at))
    return leases


async def _turns(n: int = 3) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def test_a_large_batch_goes_out_as_two_statements_at_once(store: GatedStore) -> None:
    leases = await _leases(store, 10)
    batcher = TaskCompletionBatcher(store, max_in_flight=2, min_split=4)
    futures = [batcher.succeed(lease, None, None) for lease in leases]
    await _turns()
    assert store.batches == [5, 5] and store.in_flight == 2
    store.gate.set()
    assert await asyncio.gather(*futures) == [True] * 10
    await batcher.join()


async def test_a_small_batch_waits_for_the_write_in_flight(store: GatedStore) -> None:
    leases = await _leases(store, 6)
    batcher = TaskCompletionBatcher(store, max_in_flight=2, min_split=4)
    first = batcher.succeed(leases[0], None, None)
    await _turns()
    assert store.batches == [1]
    # Three more (fewer than min_split) while one write is in flight: they wait.
    rest = [batcher.succeed(lease, None, None) for lease in leases[1:4]]
    await _turns()
    assert store.batches == [1] and store.in_flight == 1
    # A fourth makes a batch worth a second statement: it goes out beside the first.
    rest.append(batcher.succeed(leases[4], None, None))
    await _turns()
    assert store.batches == [1, 4] and store.in_flight == 2
    store.gate.set()
    assert await asyncio.gather(first, *rest) == [True] * 5
    # Alone again: the next success is written at once, whatever its size.
    store.gate.clear()
    last = batcher.succeed(leases[5], None, None)
    await _turns()
    assert store.batches == [1, 4, 1]
    store.gate.set()
    assert await last is True
    await batcher.join()
    assert store.most_in_flight == 2


async def test_one_write_in_flight_by_default(store: GatedStore) -> None:
    leases = await _leases(store, 40)
    batcher = TaskCompletionBatcher(store)
    futures = [batcher.succeed(lease, None, None) for lease in leases[:35]]
    await _turns()
    futures += [batcher.succeed(lease, None, None) for lease in leases[35:]]
    await _turns()
    assert store.batches == [35] and store.in_flight == 1
    store.gate.set()
    assert await asyncio.gather(*futures) == [True] * 40
    await batcher.join()
    assert store.batches == [35, 5] and store.most_in_flight == 1


async def test_the_limits_must_be_positive(store: GatedStore) -> None:
    with pytest.raises(ValueError, match="max_batch"):
        TaskCompletionBatcher(store, max_batch=0)
    with pytest.raises(ValueError, match="max_in_flight"):
        TaskCompletionBatcher(store, max_in_flight=0)
    with pytest.raises(ValueError, match="min_split"):
        TaskCompletionBatcher(store, min_split=0)


async def test_a_write_answering_for_the_wrong_count_fails_its_whole_batch(
    store: GatedStore,
) -> None:
    # A store's batched success must answer once per entry; otherwise no entry's answer
    # can be trusted, and every waiter of that statement sees the error.
    leases = await _leases(store, 3)

    async def short(completions: list[TaskCompletion]) -> Sequence[bool]:
        return [True] * (len(completions) - 1)

    batcher = TaskCompletionBatcher(store, write=short)
    futures = [batcher.succeed(lease, None, None) for lease in leases]
    results = await asyncio.gather(*futures, return_exceptions=True)
    assert all(isinstance(result, RuntimeError) for result in results)
    assert "returned 2 results for 3 completions" in str(results[0])
    await batcher.join()


async def test_a_write_cancelled_mid_flight_tells_every_waiter(store: GatedStore) -> None:
    # Cancelled (the loop is closing): nobody knows whether the statement committed, so
    # the entry on the wire and those queued behind it are all told, none left waiting.
    leases = await _leases(store, 3)
    batcher = TaskCompletionBatcher(store)
    told: list[bool | BaseException] = []
    first = batcher.succeed(leases[0], None, None)
    await _turns()
    assert store.in_flight == 1
    queued = batcher.succeed(leases[1], None, None)
    batcher.succeed_then(leases[2], None, None, told.append)
    (writer,) = batcher._writers
    writer.cancel()
    await batcher.join()
    for future in (first, queued):
        with pytest.raises(RuntimeError, match="interrupted"):
            await future
    assert len(told) == 1 and isinstance(told[0], RuntimeError)
    assert store.in_flight == 0 and not batcher._queue


async def test_a_success_waiting_on_the_batcher_is_recorded_when_its_run_is_cancelled(
    store: GatedStore,
) -> None:
    # The run waits for its batched success (not detached: no on_finished) and is
    # cancelled meanwhile: the write still lands, and the execution records what the
    # store applied before the cancellation propagates.
    clock = store.clock
    assert isinstance(clock, ManualClock)
    harness = Harness()
    (task_id,) = await enqueue(store, new_task(Kind.MAIL, "quick"))
    (record,) = await store.claim_due_for_lane(Lane.FALLBACK, 1, "w", LEASE_TTL)
    heartbeat = SharedTaskHeartbeat(store, clock, LEASE_TTL)
    batcher = TaskCompletionBatcher(store)
    execution = ClaimedTaskExecution(
        store, record, make_config(harness, clock), heartbeat=heartbeat, completions=batcher
    )
    run = execution.start()
    await until(lambda: store.in_flight == 1)
    run.cancel()
    await _turns()
    assert not run.done(), "the run waits for the write on the wire"
    store.gate.set()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert execution.outcome is ClaimedTaskOutcome.SUCCEEDED
    row = await store.get_task(task_id)
    assert row is not None and row.status is TaskStatus.SUCCEEDED
    await batcher.join()
    await heartbeat.join()


async def test_a_writer_cancelled_before_it_ran_leaves_no_success_stranded(
    store: GatedStore,
) -> None:
    # Cancelled before its first step (as the loop's teardown does), a writer runs none
    # of its own cleanup: its waiter is told, and the next success gets a writer of its
    # own instead of queueing behind the dead one forever.
    store.gate.set()
    leases = await _leases(store, 2)
    batcher = TaskCompletionBatcher(store)
    first = batcher.succeed(leases[0], None, None)
    (writer,) = batcher._writers
    writer.cancel()
    await _turns()
    with pytest.raises(RuntimeError, match="interrupted"):
        await first
    second = batcher.succeed(leases[1], None, None)
    async with asyncio.timeout(5):
        assert await second is True
        await batcher.join()
    assert store.batches == [1]
