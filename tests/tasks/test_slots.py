"""A lane's slot is free when its body returns; claimed tasks wait for slots, bounded.

The store's success writes block on an event, so the test sees, at each moment, which
bodies run while earlier successes are still being written (no sleeps, no timing).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import timedelta

from aster_forge import BackgroundTaskRecord, TaskStatus
from aster_forge.tasks import TaskLaneConfig, TaskWorker
from aster_forge.tasks._records import TaskCompletion
from aster_forge.testing import InMemoryTaskStore, ManualClock

from ._dispatch_support import Harness, Kind, Lane, enqueue, make_config, new_task, until


class SlowWrites(InMemoryTaskStore):
    """Success writes wait for ``gate``; claims come with them, as on PostgreSQL."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock)
        self.gate = asyncio.Event()
        self.writes_waiting = 0

    async def mark_tasks_succeeded_many(self, completions: Sequence[TaskCompletion]) -> list[bool]:
        self.writes_waiting += 1
        try:
            await self.gate.wait()
        finally:
            self.writes_waiting -= 1
        return await super().mark_tasks_succeeded_many(completions)

    @property
    def claims_with_success(self) -> bool:
        return True


async def _warm_up(
    store: InMemoryTaskStore, harness: Harness, clock: ManualClock, worker: TaskWorker[Harness]
) -> None:
    """Run one task whose body outlasts a claim's round trip: the lane claims ahead then."""
    harness.gate("warm")
    await enqueue(store, new_task(Kind.RENDER, "warm"))
    await worker.drain()
    await until(lambda: harness.started == ["warm"])
    await clock.advance(timedelta(seconds=1))
    harness.open("warm")
    await worker.join()


def _worker(
    store: InMemoryTaskStore, harness: Harness, clock: ManualClock, limit: int
) -> TaskWorker[Harness]:
    return TaskWorker(
        store,
        lanes=[TaskLaneConfig(Lane.MEDIA, limit), TaskLaneConfig(Lane.FALLBACK, 1)],
        execution=make_config(harness, clock),
        owner="worker-1",
    )


async def test_the_next_body_starts_while_the_last_success_is_written() -> None:
    clock, harness = ManualClock(), Harness()
    store = SlowWrites(clock)
    store.gate.set()
    worker = _worker(store, harness, clock, limit=1)
    await _warm_up(store, harness, clock, worker)
    store.gate.clear()  # from now on, every success write waits
    names = [f"r{i}" for i in range(3)]
    ids = await enqueue(store, *(new_task(Kind.RENDER, n) for n in names))
    await worker.drain()
    await until(lambda: store.writes_waiting == 1 and len(harness.finished) >= 3)
    # r1 ran in the slot r0's body freed, while r0's success was still being written.
    assert harness.started[1:3] == ["r0", "r1"]
    rows = {row.id: row for row in store.all_tasks()}
    assert rows[ids[0]].status is TaskStatus.RUNNING, "r0's success is not written yet"
    assert harness.max_running["media"] == 1, "never more bodies than the lane's limit"
    store.gate.set()
    while len(harness.finished) < 4:
        await worker.drain()
        await until(lambda: not worker.in_flight(Lane.MEDIA) and not worker.waiting())
    await worker.join()
    assert {row.status for row in store.all_tasks()} == {TaskStatus.SUCCEEDED}
    assert worker.stats.total().succeeded == 4
    await worker.shutdown()


async def test_claimed_tasks_wait_for_a_slot_and_start_without_a_round_trip() -> None:
    clock, harness = ManualClock(), Harness()
    store = InMemoryTaskStore(clock)
    first = [f"a{i}" for i in range(2)]
    harness.gate(*first)
    await enqueue(store, *(new_task(Kind.RENDER, n) for n in first))
    worker = _worker(store, harness, clock, limit=2)
    await worker.drain()
    await until(lambda: len(harness.started) == 2)
    await clock.advance(timedelta(seconds=1))  # bodies that outlast a claim's round trip
    harness.open(*first)  # their bodies end: the lane learns its body time
    await worker.join()
    second = [f"b{i}" for i in range(6)]
    harness.gate(*second)
    await enqueue(store, *(new_task(Kind.RENDER, n) for n in second))
    await worker.drain()
    await until(lambda: len(harness.started) == 4)
    # Two run, and as many more as the lane's limit wait with their leases renewed.
    assert worker.in_flight(Lane.MEDIA) == 2 and worker.waiting(Lane.MEDIA) == 2
    running = {r.id for r in store.all_tasks() if r.status is TaskStatus.RUNNING}
    assert len(running) == 4
    claims = worker.stats.lane(Lane.MEDIA).claimed
    for _ in range(4):  # past the claim's own lease: the heartbeat keeps all four alive
        await clock.advance(timedelta(seconds=11))
        await until(
            lambda: all(
                r.lease_expires_at is not None and r.lease_expires_at > clock.now()
                for r in store.all_tasks()
                if r.status is TaskStatus.RUNNING
            )
        )
    harness.open("b0")  # a slot frees: a waiting task starts at once, no claim needed
    await until(lambda: len(harness.started) == 5)
    assert worker.stats.lane(Lane.MEDIA).claimed == claims
    assert harness.max_running["media"] == 2
    harness.open(*second)
    while len(harness.finished) < 8:
        await worker.drain()
        await until(lambda: not worker.in_flight(Lane.MEDIA) and not worker.waiting())
    await worker.shutdown()
    assert {row.status for row in store.all_tasks()} == {TaskStatus.SUCCEEDED}
    assert sorted(harness.started) == sorted(first + second)


async def test_shutdown_gives_waiting_tasks_back_unrun() -> None:
    clock, harness = ManualClock(), Harness()
    store = InMemoryTaskStore(clock)
    worker = _worker(store, harness, clock, limit=1)
    await _warm_up(store, harness, clock, worker)
    held = [f"h{i}" for i in range(2)]
    harness.gate(*held)
    await enqueue(store, *(new_task(Kind.RENDER, n) for n in held))
    await worker.drain()
    await until(lambda: worker.waiting(Lane.MEDIA) == 1)
    stopping = asyncio.create_task(worker.shutdown(), name="test-shutdown")
    await until(lambda: worker.waiting() == 0)
    harness.open(*held)
    await stopping
    rows: dict[str, BackgroundTaskRecord] = {}
    for row in store.all_tasks():
        rows[row.payload_json] = row
    assert harness.started == ["warm", "h0"], "the waiting task never ran"
    waiting = [r for r in store.all_tasks() if r.status is TaskStatus.PENDING]
    assert len(waiting) == 1 and waiting[0].attempt == 0, "given back without an attempt"


async def _five_more_claim_nothing_ahead(
    store: InMemoryTaskStore, harness: Harness, worker: TaskWorker[Harness]
) -> None:
    """Five gated tasks on a lane of two that learnt its bodies are instant: two run and
    none waits for a slot; then all run to success and the worker stops."""
    before = len(harness.started)
    names = [f"c{i}" for i in range(5)]
    harness.gate(*names)
    await enqueue(store, *(new_task(Kind.RENDER, n) for n in names))
    await worker.drain()
    await until(lambda: len(harness.started) == before + 2)
    assert worker.in_flight(Lane.MEDIA) == 2 and worker.waiting(Lane.MEDIA) == 0
    harness.open(*names)
    while len(harness.finished) < before + 5:
        await worker.drain()
        await until(lambda: not worker.in_flight(Lane.MEDIA))
    await worker.shutdown()
    assert {row.status for row in store.all_tasks()} == {TaskStatus.SUCCEEDED}


async def test_bodies_shorter_than_a_claim_keep_nothing_waiting() -> None:
    # Their successes' statement claims the next tasks as fast as a claim ahead would.
    clock, harness = ManualClock(), Harness()
    store = InMemoryTaskStore(clock)
    worker = _worker(store, harness, clock, limit=2)
    await enqueue(store, new_task(Kind.RENDER, "quick"))
    await worker.drain()
    await worker.join()  # a body that took no time on the clock
    await _five_more_claim_nothing_ahead(store, harness, worker)


async def test_a_bursts_wait_for_the_loop_is_not_body_time() -> None:
    # Bodies started together run one after another: the last waits for the others.
    # Counted as body time, that wait would pass a burst of instant bodies off as slow
    # ones and make the lane claim ahead, splitting its success-and-claim statements.
    clock, harness = ManualClock(), Harness()
    store = InMemoryTaskStore(clock)
    worker = _worker(store, harness, clock, limit=2)
    await enqueue(store, *(new_task(Kind.RENDER, n) for n in ("q0", "q1")))
    await worker.drain()
    assert harness.started == [], "started, not yet run"
    await clock.advance(timedelta(seconds=1))  # the loop is busy before they run
    await worker.join()
    assert harness.finished == ["q0", "q1"]
    await _five_more_claim_nothing_ahead(store, harness, worker)
