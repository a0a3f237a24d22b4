"""run_leased_background_tasks: the group runs only on the lease holder and stops as a whole."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

import pytest

from aster_forge.runtime import CancellationToken, RuntimeLeaseConfig
from aster_forge.tasks import BackgroundTasks
from aster_forge.tasks._leased import run_leased_background_tasks
from aster_forge.testing import InMemoryRuntimeLeaseStore, ManualClock

from ._schedule_support import until

LEASE = "shop.background_tasks"


class Instance:
    """One process: a supervisor whose group runs one worker that records its lifetime."""

    def __init__(self, owner: str, store: InMemoryRuntimeLeaseStore, clock: ManualClock) -> None:
        self.owner = owner
        self.token = CancellationToken()
        self.running = False
        self.started = 0
        self.stopped = 0
        self.groups: list[BackgroundTasks] = []
        config = RuntimeLeaseConfig(
            LEASE,
            owner,
            ttl=timedelta(seconds=30),
            renew_interval=timedelta(seconds=10),
            standby_retry_interval=timedelta(seconds=5),
        )
        self.task = asyncio.create_task(
            run_leased_background_tasks(store, config, self.token, self.spawn, clock=clock)
        )

    async def worker(self, token: CancellationToken) -> None:
        self.running = True
        self.started += 1
        try:
            await token.wait()
        finally:
            self.running = False
            self.stopped += 1

    def spawn(self, leased: CancellationToken) -> BackgroundTasks:
        group = BackgroundTasks(leased, name="singletons")
        group.spawn("worker", self.worker)
        self.groups.append(group)
        return group


async def test_only_the_holder_runs_the_group_and_shutdown_hands_over() -> None:
    clock = ManualClock()
    store = InMemoryRuntimeLeaseStore(clock)
    a = Instance("a", store, clock)
    await until(lambda: a.running)
    b = Instance("b", store, clock)
    await clock.wait_for_sleepers(2)
    await clock.advance(5)
    await clock.wait_for_sleepers(2)
    assert not b.running and b.started == 0
    a.token.cancel()
    await asyncio.wait_for(a.task, 5)
    assert a.stopped == 1 and len(a.groups[0]) == 0
    assert store.holder(LEASE) is None  # released on shutdown
    await clock.advance(5)
    await until(lambda: b.running)
    assert store.holder(LEASE) == "b"
    b.token.cancel()
    await asyncio.wait_for(b.task, 5)
    assert b.stopped == 1


async def test_lease_loss_stops_the_whole_group() -> None:
    clock = ManualClock()
    store = InMemoryRuntimeLeaseStore(clock)
    a = Instance("a", store, clock)
    await until(lambda: a.running)
    # Another owner takes the lease over (e.g. after a long pause of this process).
    assert await store.release(LEASE, "a")
    assert await store.try_acquire(LEASE, "intruder", timedelta(seconds=300)) is not None
    await clock.wait_for_sleepers(1)
    await clock.advance(10)  # the next renewal finds the lease lost
    await until(lambda: not a.running)
    assert a.stopped == 1 and a.groups[0].shutdown_token.cancelled
    assert not a.token.cancelled  # the process keeps running, as a standby
    assert store.holder(LEASE) == "intruder"
    a.token.cancel()
    await asyncio.wait_for(a.task, 5)


async def test_async_spawner_and_bad_spawner(caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock()
    store = InMemoryRuntimeLeaseStore(clock)
    token = CancellationToken()
    spawned: list[BackgroundTasks] = []

    async def spawn(leased: CancellationToken) -> BackgroundTasks:
        group = BackgroundTasks(leased)
        spawned.append(group)
        return group

    config = RuntimeLeaseConfig(LEASE, "a")
    runner = asyncio.create_task(
        run_leased_background_tasks(store, config, token, spawn, clock=clock)
    )
    await until(lambda: len(spawned) == 1)
    token.cancel()
    await asyncio.wait_for(runner, 5)
    assert spawned[0].is_shutting_down

    token2 = CancellationToken()

    def wrong(leased: CancellationToken) -> BackgroundTasks:
        return "not a group"  # type: ignore[return-value]

    runner = asyncio.create_task(
        run_leased_background_tasks(
            store, RuntimeLeaseConfig(LEASE, "b"), token2, wrong, clock=clock
        )
    )
    await until(lambda: any(r.levelno == logging.ERROR for r in caplog.records))
    await until(lambda: store.holder(LEASE) is None)  # released after the failed start
    token2.cancel()
    await asyncio.wait_for(runner, 5)
    assert any(
        "must return BackgroundTasks" in str(r.exc_info[1]) for r in caplog.records if r.exc_info
    )
