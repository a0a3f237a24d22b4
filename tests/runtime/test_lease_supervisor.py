"""run_runtime_lease_supervisor with a ManualClock and the in-memory store (plus one real DB)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import timedelta

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from aster_forge.db import RuntimeLeaseDbStore
from aster_forge.runtime import (
    CancellationToken,
    RuntimeLease,
    RuntimeLeaseConfig,
    run_runtime_lease_supervisor,
)
from aster_forge.testing import InMemoryRuntimeLeaseStore, ManualClock

from ..db._support import create_tables

CONFIG = RuntimeLeaseConfig(
    "product.background",
    "owner-a",
    ttl=timedelta(seconds=30),
    renew_interval=timedelta(seconds=10),
    standby_retry_interval=timedelta(seconds=5),
)


class Groups:
    """Records every group the supervisor starts and stops, with clock times."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.started: list[float] = []
        self.stopped: list[float] = []
        self.tokens: list[CancellationToken] = []
        self.fail_start = False
        self.fail_stop = False
        self.changed = asyncio.Event()

    @property
    def running(self) -> int:
        return len(self.started) - len(self.stopped)

    async def start(self, token: CancellationToken) -> int:
        if self.fail_start:
            raise RuntimeError("group failed to start")
        self.tokens.append(token)
        self.started.append(self.clock.monotonic())
        self.changed.set()
        return len(self.started)

    async def stop(self, handle: int) -> None:
        assert self.tokens[handle - 1].cancelled, "the group token is cancelled before stop"
        self.stopped.append(self.clock.monotonic())
        self.changed.set()
        if self.fail_stop:
            raise RuntimeError("group failed to stop")


class ScriptedStore(InMemoryRuntimeLeaseStore):
    """The in-memory store with injectable failures and call counters."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock)
        self.acquires = 0
        self.renews = 0
        self.releases = 0
        self.acquire_error: Exception | None = None
        self.renew_error: Exception | None = None
        self.renew_lost = False
        self.renew_hangs = False
        self.release_error: Exception | None = None

    async def try_acquire(
        self, lease_id: str, owner_id: str, ttl: timedelta
    ) -> RuntimeLease | None:
        self.acquires += 1
        if self.acquire_error is not None:
            raise self.acquire_error
        return await super().try_acquire(lease_id, owner_id, ttl)

    async def renew(self, lease_id: str, owner_id: str, ttl: timedelta) -> RuntimeLease | None:
        self.renews += 1
        if self.renew_hangs:
            await asyncio.Event().wait()
        if self.renew_error is not None:
            raise self.renew_error
        if self.renew_lost:
            return None
        return await super().renew(lease_id, owner_id, ttl)

    async def release(self, lease_id: str, owner_id: str) -> bool:
        self.releases += 1
        if self.release_error is not None:
            raise self.release_error
        return await super().release(lease_id, owner_id)


async def until(predicate: Callable[[], bool]) -> None:
    async with asyncio.timeout(5):
        while not predicate():  # noqa: ASYNC110 - bounded poll of state under test
            await asyncio.sleep(0)


async def step(clock: ManualClock, seconds: float) -> None:
    await clock.wait_for_sleepers(1)
    await clock.advance(seconds)


def spawn(
    store: InMemoryRuntimeLeaseStore,
    groups: Groups,
    token: CancellationToken,
    clock: ManualClock,
    config: RuntimeLeaseConfig = CONFIG,
) -> asyncio.Task[None]:
    return asyncio.create_task(
        run_runtime_lease_supervisor(store, config, token, groups.start, groups.stop, clock=clock),
        name="test-supervisor",
    )


async def test_holder_starts_group_renews_and_releases_on_shutdown() -> None:
    clock = ManualClock()
    store, groups, token = ScriptedStore(clock), Groups(clock), CancellationToken()
    task = spawn(store, groups, token, clock)
    await until(lambda: groups.running == 1)
    assert store.holder("product.background") == "owner-a"
    for expected in (1, 2, 3):
        await step(clock, 10)
        await until(lambda expected=expected: store.renews == expected)  # type: ignore[misc]
    assert groups.running == 1 and not groups.tokens[0].cancelled
    token.cancel()
    await task
    assert groups.running == 0
    assert [t.cancelled for t in groups.tokens[:1]] == [True]  # a fresh read, not the narrowed one
    assert store.holder("product.background") is None and store.releases == 1


async def test_a_failed_release_is_logged_and_the_lease_left_to_expire(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = ManualClock()
    store, groups, token = ScriptedStore(clock), Groups(clock), CancellationToken()
    store.release_error = ConnectionError("database gone")
    task = spawn(store, groups, token, clock)
    await until(lambda: groups.running == 1)
    token.cancel()
    with caplog.at_level(logging.WARNING, logger="aster_forge.runtime"):
        await task  # the failure is not raised to the caller
    assert groups.running == 0 and store.releases == 1
    assert store.holder("product.background") == "owner-a"  # until its TTL runs out
    assert any("expires by TTL" in record.getMessage() for record in caplog.records)


async def test_a_group_whose_stop_raises_is_logged_and_the_lease_still_released(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = ManualClock()
    store, groups, token = ScriptedStore(clock), Groups(clock), CancellationToken()
    groups.fail_stop = True
    task = spawn(store, groups, token, clock)
    await until(lambda: groups.running == 1)
    token.cancel()
    with caplog.at_level(logging.ERROR, logger="aster_forge.runtime"):
        await task
    assert store.releases == 1 and store.holder("product.background") is None
    assert any("stopping the group raised" in r.getMessage() for r in caplog.records)


async def test_standby_retries_every_standby_interval_then_takes_over() -> None:
    clock = ManualClock()
    store, groups, token = ScriptedStore(clock), Groups(clock), CancellationToken()
    assert await store.try_acquire("product.background", "owner-b", timedelta(seconds=12))
    store.acquires = 0
    task = spawn(store, groups, token, clock)
    await until(lambda: store.acquires == 1)
    await step(clock, 5)
    await until(lambda: store.acquires == 2)
    assert groups.running == 0
    await step(clock, 5)
    await until(lambda: store.acquires == 3)
    assert groups.running == 0
    await step(clock, 5)  # t=15: owner-b's lease expired at t=12
    await until(lambda: groups.running == 1)
    assert store.holder("product.background") == "owner-a"
    token.cancel()
    await task


async def test_lost_renewal_stops_group_then_standby() -> None:
    clock = ManualClock()
    store, groups, token = ScriptedStore(clock), Groups(clock), CancellationToken()
    task = spawn(store, groups, token, clock)
    await until(lambda: groups.running == 1)
    store.renew_lost = True
    await step(clock, 10)
    await until(lambda: groups.running == 0)
    assert groups.stopped == [10.0] and groups.tokens[0].cancelled
    acquires = store.acquires
    store.renew_lost = False
    await step(clock, 5)
    await until(lambda: store.acquires == acquires + 1)
    await until(lambda: groups.running == 1)
    token.cancel()
    await task
    assert groups.running == 0


async def test_renewal_errors_are_retried_then_group_stops_before_expiry(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = ManualClock()
    store, groups, token = ScriptedStore(clock), Groups(clock), CancellationToken()
    task = spawn(store, groups, token, clock)
    await until(lambda: groups.running == 1)
    store.renew_error = ConnectionError("db down")
    with caplog.at_level(logging.WARNING, logger="aster_forge.runtime.lease"):
        await step(clock, 10)  # t=10 renew fails
        await until(lambda: store.renews == 1)
        await step(clock, 5)  # t=15 retry fails
        await until(lambda: store.renews == 2)
        assert groups.running == 1
        await step(clock, 5)  # t=20 = ttl - stop_margin: stop, 10 s before expiry
        await until(lambda: groups.running == 0)
    assert groups.stopped == [20.0]
    assert groups.stopped[0] < CONFIG.ttl.total_seconds()
    assert "renewal failed" in caplog.text
    assert not task.done()
    token.cancel()
    await task


async def test_hanging_renewal_stops_group_at_the_deadline() -> None:
    clock = ManualClock()
    store, groups, token = ScriptedStore(clock), Groups(clock), CancellationToken()
    task = spawn(store, groups, token, clock)
    await until(lambda: groups.running == 1)
    store.renew_hangs = True
    await step(clock, 10)
    await until(lambda: store.renews == 1)
    assert groups.running == 1
    await step(clock, 10)  # the renewal never answered; the deadline is t=20
    await until(lambda: groups.running == 0)
    assert groups.stopped == [20.0]
    token.cancel()
    await task


async def test_late_confirmation_keeps_the_group() -> None:
    clock = ManualClock()
    store, groups, token = ScriptedStore(clock), Groups(clock), CancellationToken()
    task = spawn(store, groups, token, clock)
    await until(lambda: groups.running == 1)
    store.renew_error = ConnectionError("blip")
    await step(clock, 10)
    await until(lambda: store.renews == 1)
    store.renew_error = None
    await step(clock, 5)  # t=15 retry succeeds; the next deadline is t=35
    await until(lambda: store.renews == 2)
    await step(clock, 10)  # t=25 regular renewal
    await until(lambda: store.renews == 3)
    assert groups.running == 1 and groups.stopped == []
    token.cancel()
    await task


async def test_acquire_errors_are_logged_and_retried(caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock()
    store, groups, token = ScriptedStore(clock), Groups(clock), CancellationToken()
    store.acquire_error = OSError("unreachable")
    with caplog.at_level(logging.WARNING, logger="aster_forge.runtime.lease"):
        task = spawn(store, groups, token, clock)
        await until(lambda: store.acquires == 1)
        await step(clock, 5)
        await until(lambda: store.acquires == 2)
    assert "acquisition failed" in caplog.text and groups.running == 0
    store.acquire_error = None
    await step(clock, 5)
    await until(lambda: groups.running == 1)
    token.cancel()
    await task


async def test_group_start_failure_releases_the_lease() -> None:
    clock = ManualClock()
    store, groups, token = ScriptedStore(clock), Groups(clock), CancellationToken()
    groups.fail_start = True
    task = spawn(store, groups, token, clock)
    await until(lambda: store.releases == 1)
    assert store.holder("product.background") is None
    groups.fail_start = False
    await step(clock, 5)
    await until(lambda: groups.running == 1)
    token.cancel()
    await task


async def test_two_supervisors_never_run_two_groups() -> None:
    clock = ManualClock()
    store = ScriptedStore(clock)
    groups_a, groups_b = Groups(clock), Groups(clock)
    token_a, token_b = CancellationToken(), CancellationToken()
    task_a = spawn(store, groups_a, token_a, clock)
    await until(lambda: groups_a.running == 1)
    config_b = RuntimeLeaseConfig(
        CONFIG.lease_id, "owner-b", standby_retry_interval=timedelta(seconds=5)
    )
    task_b = spawn(store, groups_b, token_b, clock, config_b)
    for _ in range(6):
        await step(clock, 5)
        assert groups_a.running + groups_b.running == 1
    token_a.cancel()
    await task_a
    assert store.holder(CONFIG.lease_id) is None, "shutdown releases at once"
    await step(clock, 5)
    await until(lambda: groups_b.running == 1)
    token_b.cancel()
    await task_b


async def test_cancelling_the_supervisor_stops_and_releases() -> None:
    clock = ManualClock()
    store, groups, token = ScriptedStore(clock), Groups(clock), CancellationToken()
    task = spawn(store, groups, token, clock)
    await until(lambda: groups.running == 1)
    await clock.wait_for_sleepers(1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert groups.running == 0 and store.holder(CONFIG.lease_id) is None


async def test_shutdown_while_standby_returns_without_group() -> None:
    clock = ManualClock()
    store, groups, token = ScriptedStore(clock), Groups(clock), CancellationToken()
    assert await store.try_acquire(CONFIG.lease_id, "owner-b", timedelta(hours=1))
    task = spawn(store, groups, token, clock)
    await clock.wait_for_sleepers(1)
    token.cancel()
    await task
    assert groups.started == [] and store.holder(CONFIG.lease_id) == "owner-b"


async def test_supervisor_on_a_real_database(engine: AsyncEngine) -> None:
    await create_tables(engine)
    clock = ManualClock()
    store_a = RuntimeLeaseDbStore(engine, clock=clock)
    store_b = RuntimeLeaseDbStore(engine, clock=clock)
    groups_a, groups_b = Groups(clock), Groups(clock)
    token_a, token_b = CancellationToken(), CancellationToken()
    config_b = RuntimeLeaseConfig(CONFIG.lease_id, "owner-b")
    task_a = asyncio.create_task(
        run_runtime_lease_supervisor(
            store_a, CONFIG, token_a, groups_a.start, groups_a.stop, clock=clock
        )
    )
    await until_real(lambda: groups_a.running == 1)
    task_b = asyncio.create_task(
        run_runtime_lease_supervisor(
            store_b, config_b, token_b, groups_b.start, groups_b.stop, clock=clock
        )
    )
    await clock.wait_for_sleepers(2)
    await clock.advance(10)  # a renews, b retries and stays standby
    await clock.wait_for_sleepers(2)
    assert groups_a.running == 1 and groups_b.running == 0
    token_a.cancel()
    await task_a
    assert await store_a.current_lease(CONFIG.lease_id) is None
    await clock.wait_for_sleepers(1)
    await clock.advance(5)
    await until_real(lambda: groups_b.running == 1)
    lease = await store_b.current_lease(CONFIG.lease_id)
    assert lease is not None and lease.owner_id == "owner-b"
    token_b.cancel()
    await task_b
    assert await store_b.current_lease(CONFIG.lease_id) is None


async def until_real(predicate: Callable[[], bool]) -> None:
    """Wait for database I/O (real time, bounded) until ``predicate`` holds."""
    async with asyncio.timeout(10):
        while not predicate():  # noqa: ASYNC110 - waits for database I/O, bounded
            await asyncio.sleep(0.01)
