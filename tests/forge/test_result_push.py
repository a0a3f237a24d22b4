"""Awaiting a result: woken by the ending's NOTIFY on PostgreSQL, polled elsewhere.

The polls are made an hour long where a test must not pass by polling: a waiter that
returns then was woken by a notification (or found the task ended on its first read).
A separate ``LISTEN`` in the test counts the notifications the store sends.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import asyncpg
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from aster_forge import Forge, ForgeTask, ForgeTaskFailedError, TaskStatus
from aster_forge.db import BackgroundTaskDbStore
from aster_forge.db._internal import RESULTS_CHANNEL
from aster_forge.forge import _results
from aster_forge.tasks import NewTask, TaskDependency, TaskLease
from aster_forge.tasks._internal import TaskCompletion, TaskQuery

from ..conftest import drop_all_tables
from ..db._leases import lease_of

_HOUR = 3600.0
_TTL = timedelta(minutes=5)
_LANE = "media"


@dataclass
class Product:
    forge: Forge
    double: ForgeTask


MakeProduct = Callable[[str], Awaitable[Product]]


@pytest.fixture
async def make_product() -> AsyncIterator[MakeProduct]:
    """Builds a forge with one task; every forge built is closed after the test."""
    forges: list[Forge] = []

    async def make(url: str) -> Product:
        forge = Forge(url, create_tables=True)
        forges.append(forge)
        forge.lane(_LANE, concurrency=2)

        @forge.task(lane=_LANE, max_attempts=1)
        async def double(n: int) -> int:
            return 2 * n

        await forge.migrate()
        return Product(forge, double)

    yield make
    for forge in forges:
        await forge.aclose()


@pytest.fixture
def no_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every poll an hour long: a wait that ends was not ended by a poll."""
    monkeypatch.setattr(_results, "FIRST_POLL", _HOUR)
    monkeypatch.setattr(_results, "LONGEST_POLL", _HOUR)
    monkeypatch.setattr(_results, "SAFETY_POLL", _HOUR)


@pytest.fixture
async def pg_url(postgres_url: str) -> AsyncIterator[str]:
    yield postgres_url
    engine = create_async_engine(postgres_url)
    try:
        await drop_all_tables(engine)
    finally:
        await engine.dispose()


class Notifications:
    """The results channel as a test's own ``LISTEN`` receives it."""

    def __init__(self) -> None:
        self.task_ids: list[int] = []
        self._arrived = asyncio.Condition()

    def received(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        self.task_ids.append(int(payload))
        asyncio.get_running_loop().create_task(self._tell(), name="notification-arrived")

    async def _tell(self) -> None:
        async with self._arrived:
            self._arrived.notify_all()

    async def until(self, task_id: int) -> None:
        async with asyncio.timeout(10), self._arrived:
            await self._arrived.wait_for(lambda: task_id in self.task_ids)


@pytest.fixture
async def notifications(pg_url: str) -> AsyncIterator[Notifications]:
    dsn = make_url(pg_url).set(drivername="postgresql").render_as_string(hide_password=False)
    conn = await asyncpg.connect(dsn)
    seen = Notifications()
    await conn.add_listener(RESULTS_CHANNEL, seen.received)
    try:
        yield seen
    finally:
        await conn.close()


def _db_store(forge: Forge) -> BackgroundTaskDbStore:
    return forge.backend.database_task_store("the test")


async def _claimed(forge: Forge, task_id: int) -> TaskLease:
    [record] = await _db_store(forge).claim_due_for_lane(_LANE, 1, "test", _TTL)
    assert record.id == task_id
    return lease_of(record)


async def _flagged(forge: Forge, task_id: int) -> None:
    """Wait until a waiter flagged the row and the forge's listener is connected."""
    await forge.backend._listener().wait_connected()
    t = forge.backend.tasks_table
    engine = forge.backend.engine
    assert engine is not None
    async with asyncio.timeout(10):
        while True:
            async with engine.connect() as conn:
                query = sa.select(t.c.result_awaited).where(t.c.id == task_id)
                if (await conn.execute(query)).scalar_one():
                    return
            await asyncio.sleep(0.01)


Ending = Callable[[Forge, int], Awaitable[object]]


async def _succeed_and_claim(forge: Forge, task_id: int) -> object:
    lease = await _claimed(forge, task_id)
    completion = TaskCompletion(lease, "42", None)
    return await _db_store(forge).mark_tasks_succeeded_and_claim(
        [completion], _LANE, 1, "test", _TTL
    )


async def _succeed_many(forge: Forge, task_id: int) -> object:
    lease = await _claimed(forge, task_id)
    return await _db_store(forge).mark_tasks_succeeded_many([TaskCompletion(lease, "42", None)])


async def _succeed(forge: Forge, task_id: int) -> object:
    return await _db_store(forge).mark_task_succeeded(await _claimed(forge, task_id), "42", None)


async def _succeed_in_transaction(forge: Forge, task_id: int) -> object:
    lease = await _claimed(forge, task_id)
    transaction = await _db_store(forge).begin_task_transaction(lease)
    return await transaction.succeed(lease, "42", None)


async def _fail(forge: Forge, task_id: int) -> object:
    lease = await _claimed(forge, task_id)
    return await _db_store(forge).mark_task_failed(
        lease, error="boom", steps_json=None, manual_retry=True
    )


async def _cancel_running(forge: Forge, task_id: int) -> object:
    lease = await _claimed(forge, task_id)
    return await _db_store(forge).mark_task_cancelled(lease, steps_json=None)


async def _cancel_pending(forge: Forge, task_id: int) -> object:
    return await _db_store(forge).cancel_task(task_id)


async def _cancel_in_bulk(forge: Forge, task_id: int) -> object:
    return await _db_store(forge).cancel_tasks(TaskQuery(task_id=task_id), limit=10)


ENDINGS: dict[str, tuple[Ending, TaskStatus]] = {
    "succeed_and_claim": (_succeed_and_claim, TaskStatus.SUCCEEDED),
    "succeed_many": (_succeed_many, TaskStatus.SUCCEEDED),
    "succeed": (_succeed, TaskStatus.SUCCEEDED),
    "succeed_in_transaction": (_succeed_in_transaction, TaskStatus.SUCCEEDED),
    "fail": (_fail, TaskStatus.FAILED),
    "cancel_running": (_cancel_running, TaskStatus.CANCELLED),
    "cancel_pending": (_cancel_pending, TaskStatus.CANCELLED),
    "cancel_in_bulk": (_cancel_in_bulk, TaskStatus.CANCELLED),
}


async def _outcome(forge: Forge, task_id: int) -> Any:
    try:
        return await forge.result(task_id)
    except ForgeTaskFailedError as exc:
        return exc.task.status


@pytest.mark.postgres
@pytest.mark.parametrize("ending", list(ENDINGS))
async def test_every_ending_wakes_its_waiter_by_notify(
    pg_url: str,
    notifications: Notifications,
    no_polls: None,
    ending: str,
    make_product: MakeProduct,
) -> None:
    end, status = ENDINGS[ending]
    product = await make_product(pg_url)
    forge = product.forge
    made = await product.double.enqueue(21)
    waiter = asyncio.create_task(_outcome(forge, made.task_id), name="waiter")
    await _flagged(forge, made.task_id)
    assert not waiter.done()
    await end(forge, made.task_id)
    async with asyncio.timeout(10):
        outcome = await waiter
    assert outcome == (42 if status is TaskStatus.SUCCEEDED else status)
    await notifications.until(made.task_id)
    assert notifications.task_ids == [made.task_id]


@pytest.mark.postgres
async def test_a_cancelled_dependency_wakes_the_waiter_of_its_dependent(
    pg_url: str, notifications: Notifications, no_polls: None, make_product: MakeProduct
) -> None:
    product = await make_product(pg_url)
    forge = product.forge
    store = _db_store(forge)
    first, last = await store.enqueue_workflow(
        [NewTask("double", _LANE, payload_json=str(n)) for n in (1, 2)],
        [TaskDependency(1, 0)],
    )
    waiter = asyncio.create_task(_outcome(forge, last.task_id), name="waiter")
    await _flagged(forge, last.task_id)
    await _fail(forge, first.task_id)  # its dependent ends cancelled in the same write
    async with asyncio.timeout(10):
        assert await waiter is TaskStatus.CANCELLED
    await notifications.until(last.task_id)
    assert notifications.task_ids == [last.task_id]


@pytest.mark.postgres
async def test_unawaited_endings_send_no_notification(
    pg_url: str, notifications: Notifications, make_product: MakeProduct
) -> None:
    product = await make_product(pg_url)
    forge = product.forge
    for end, _status in ENDINGS.values():
        made = await product.double.enqueue(1)
        await end(forge, made.task_id)
    for n in range(20):
        await product.double.enqueue(n)
    assert (await forge.drain()).succeeded == 20
    # One awaited task last: notifications arrive in commit order, so once its own has
    # arrived, any the unawaited endings sent would have too.
    made = await product.double.enqueue(5)
    waiter = asyncio.create_task(forge.result(made), name="waiter")
    await _flagged(forge, made.task_id)
    await forge.drain()
    async with asyncio.timeout(10):
        assert await waiter == 10
    await notifications.until(made.task_id)
    assert notifications.task_ids == [made.task_id]


async def _expire(forge: Forge, task_id: int) -> None:
    """Move the running task's lease expiry into the past (its worker is gone)."""
    t = forge.backend.tasks_table
    engine = forge.backend.engine
    assert engine is not None
    async with engine.begin() as conn:
        past = sa.func.now() - timedelta(minutes=1)
        await conn.execute(sa.update(t).where(t.c.id == task_id).values(lease_expires_at=past))


Rescue = Callable[[Forge, int], Awaitable[object]]


def _claim_rescuing(**limits: Any) -> Rescue:
    """A claim (with ``limits``) that rescues the expired task."""

    async def rescue(forge: Forge, task_id: int) -> object:
        await _expire(forge, task_id)
        return await _db_store(forge).claim_due_for_lane(_LANE, 1, "rescuer", _TTL, **limits)

    return rescue


def _success_rescuing(**limits: Any) -> Rescue:
    """Another task's success and the claim after it, one statement that rescues."""

    async def rescue(forge: Forge, task_id: int) -> object:
        store = _db_store(forge)
        other = await store.enqueue(NewTask("double", _LANE, payload_json="1"))
        [record] = await store.claim_due_for_lane(_LANE, 1, "test", _TTL)
        assert record.id == other.task_id
        await _expire(forge, task_id)
        return await store.mark_tasks_succeeded_and_claim(
            [TaskCompletion(lease_of(record), "2", None)], _LANE, 1, "rescuer", _TTL, **limits
        )

    return rescue


_RATE = (100, timedelta(seconds=1))

# Every PostgreSQL statement whose lease rescue can end a task.
RESCUES: dict[str, Rescue] = {
    "claim": _claim_rescuing(),
    "claim_capped": _claim_rescuing(cluster_limit=10),
    "claim_by_partition": _claim_rescuing(partition_limit=1),
    "claim_rated": _claim_rescuing(rate_limit=_RATE),
    "claim_portable": _claim_rescuing(rate_limit=_RATE, cluster_limit=10),
    "succeed_and_claim": _success_rescuing(),
    "succeed_and_claim_capped": _success_rescuing(cluster_limit=10),
}


async def _rescue_ends(forge: Forge, task_id: int, rescue: Rescue, *, cancel: bool) -> None:
    """Claim the task, lose its worker (``cancel``: after a cancel was asked), and end it
    by ``rescue`` (the task has one attempt: a rescue that does not cancel fails it)."""
    await _claimed(forge, task_id)
    if cancel:
        await _db_store(forge).cancel_task(task_id)  # running: only flagged
    await rescue(forge, task_id)


@pytest.mark.postgres
@pytest.mark.parametrize("cancel", [False, True], ids=["exhausted", "cancel_requested"])
@pytest.mark.parametrize("rescue", list(RESCUES))
async def test_a_rescue_that_ends_a_task_wakes_its_waiter_by_notify(
    pg_url: str,
    notifications: Notifications,
    no_polls: None,
    rescue: str,
    cancel: bool,
    make_product: MakeProduct,
) -> None:
    product = await make_product(pg_url)
    forge = product.forge
    made = await product.double.enqueue(21)
    waiter = asyncio.create_task(_outcome(forge, made.task_id), name="waiter")
    await _flagged(forge, made.task_id)
    await _rescue_ends(forge, made.task_id, RESCUES[rescue], cancel=cancel)
    async with asyncio.timeout(10):
        outcome = await waiter
    assert outcome is (TaskStatus.CANCELLED if cancel else TaskStatus.FAILED)
    await notifications.until(made.task_id)
    assert notifications.task_ids == [made.task_id]


@pytest.mark.postgres
async def test_unawaited_rescue_endings_send_no_notification(
    pg_url: str, notifications: Notifications, no_polls: None, make_product: MakeProduct
) -> None:
    product = await make_product(pg_url)
    forge = product.forge
    for rescue in RESCUES.values():
        for cancel in (False, True):
            made = await product.double.enqueue(1)
            await _rescue_ends(forge, made.task_id, rescue, cancel=cancel)
            record = await forge.get_task(made.task_id)
            assert record is not None and record.status.is_terminal
    # One awaited rescue ending last: notifications arrive in commit order, so once its
    # own has arrived, any the unawaited endings sent would have too.
    made = await product.double.enqueue(5)
    waiter = asyncio.create_task(_outcome(forge, made.task_id), name="waiter")
    await _flagged(forge, made.task_id)
    await _rescue_ends(forge, made.task_id, RESCUES["claim"], cancel=False)
    async with asyncio.timeout(10):
        assert await waiter is TaskStatus.FAILED
    await notifications.until(made.task_id)
    assert notifications.task_ids == [made.task_id]


@pytest.mark.postgres
async def test_a_lost_notification_is_caught_by_the_safety_poll(
    pg_url: str,
    notifications: Notifications,
    monkeypatch: pytest.MonkeyPatch,
    make_product: MakeProduct,
) -> None:
    monkeypatch.setattr(_results, "SAFETY_POLL", 0.05)
    product = await make_product(pg_url)
    forge = product.forge
    made = await product.double.enqueue(4)
    waiter = asyncio.create_task(forge.result(made), name="waiter")
    await _flagged(forge, made.task_id)
    # An ending that sends no NOTIFY (a write outside the store).
    t = forge.backend.tasks_table
    engine = forge.backend.engine
    assert engine is not None
    async with engine.begin() as conn:
        await conn.execute(
            sa.update(t)
            .where(t.c.id == made.task_id)
            .values(status=TaskStatus.SUCCEEDED.value, result_json="8", finished_at=sa.func.now())
        )
    async with asyncio.timeout(10):
        assert await waiter == 8
    assert notifications.task_ids == []


@pytest.mark.postgres
async def test_result_sync_is_woken_by_notify(
    pg_url: str, no_polls: None, make_product: MakeProduct
) -> None:
    product = await make_product(pg_url)
    forge = product.forge
    made = await product.double.enqueue(3)
    outcome: list[object] = []

    def wait() -> None:
        try:
            outcome.append(forge.result_sync(made, timeout=timedelta(seconds=30)))
        except BaseException as exc:  # handed to the test's thread
            outcome.append(exc)

    thread = threading.Thread(target=wait, name="result-sync")
    thread.start()
    t = forge.backend.tasks_table
    engine = forge.backend.engine
    assert engine is not None
    async with asyncio.timeout(10):
        while True:
            async with engine.connect() as conn:
                query = sa.select(t.c.result_awaited).where(t.c.id == made.task_id)
                if (await conn.execute(query)).scalar_one():
                    break
            await asyncio.sleep(0.01)
    await forge.drain()
    await asyncio.to_thread(thread.join, 20)
    assert outcome == [6]


async def test_a_finished_task_returns_at_once_and_a_pending_one_times_out(
    forge_at: str, no_polls: None, make_product: MakeProduct
) -> None:
    product = await make_product(forge_at)
    forge = product.forge
    done = await product.double.enqueue(7)
    await forge.drain()
    async with asyncio.timeout(10):
        assert await forge.result(done) == 14
    assert await asyncio.to_thread(forge.result_sync, done, timeout=10) == 14

    pending = await product.double.enqueue(8)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):
            await forge.result(pending)
    with pytest.raises(TimeoutError):
        await asyncio.to_thread(forge.result_sync, pending, timeout=0.05)
    record = await forge.get_task(pending.task_id)
    assert record is not None and record.status is TaskStatus.PENDING
    if forge.backend.is_postgres:
        assert forge.backend._listener()._waiters == {}  # a timed-out waiter is gone
