"""PostgreSQL enqueue on the pooled asyncpg connection: reuse within a burst, nothing leaked.

Back-to-back enqueues keep one connection checked out and return it as soon as the
event loop runs with no enqueue using it (or, while a worker keeps it, once it lets
go); a cancelled or killed call discards its connection; an engine disposed in the
middle of a burst gets nothing back.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import AsyncIterator, Coroutine, Sequence
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from aster_forge import BackgroundTaskRecord, EnqueueResult
from aster_forge.db import (
    BackgroundTaskDbStore,
    DatabaseOperationError,
    DatabaseUnavailableError,
    create_background_tasks_table,
)
from aster_forge.db._driver_hold import HeldDriverConnection
from aster_forge.db._engine import MAX_IDLE
from aster_forge.runtime import CancellationToken
from aster_forge.tasks import ClaimedTaskExecutionConfig, NewTask, TaskLaneConfig, TaskWorker
from aster_forge.tasks._rate_limit import TaskRateLimit
from aster_forge.tasks._records import TaskCompletion

from ..tasks._dispatch_support import REGISTRY, Harness, Job, Kind, Lane, until
from ._leases import lease_of
from ._pg_driver_support import pg_engine, wait_closed, wait_for_lock_wait

pytestmark = pytest.mark.postgres


@pytest.fixture
async def one_connection(postgres_url: str) -> AsyncIterator[AsyncEngine]:
    """An engine whose pool has exactly one connection (a leak would starve it)."""
    async with pg_engine(postgres_url, pool_size=1, max_overflow=0, pool_timeout=5) as engine:
        yield engine


def _task(name: str) -> NewTask:
    return REGISTRY.new_task(Kind.MAIL, Job(name=name))


async def _count(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        query = sa.text("SELECT count(*) FROM background_tasks")
        return int((await conn.execute(query)).scalar_one())


async def test_a_burst_reuses_one_connection_and_returns_it_when_idle(
    one_connection: AsyncEngine,
) -> None:
    engine = one_connection
    store = BackgroundTaskDbStore(engine, registry=REGISTRY)
    pool = engine.sync_engine.pool
    ids = [(await store.enqueue(_task(f"n{n}"))).record.id for n in range(50)]
    assert len(set(ids)) == 50
    await store.flush_notifications()  # the burst's trailing NOTIFY has its own statement
    await asyncio.sleep(0)  # one loop iteration with no enqueue running
    assert pool.checkedout() == 0, pool.status()  # type: ignore[attr-defined]
    # The single pooled connection is free for the product again.
    assert await _count(engine) == 50


async def test_a_kept_connection_stays_out_until_let_go_and_is_shared_when_the_pool_is_out(
    one_connection: AsyncEngine,
) -> None:
    engine = one_connection
    store = BackgroundTaskDbStore(engine, registry=REGISTRY)
    pool = engine.sync_engine.pool
    let_go = store.keep_connection()  # as a worker does while it has tasks in flight
    await store.enqueue(_task("first"))
    for _ in range(3):
        await asyncio.sleep(0)
    assert pool.checkedout() == 1, "kept across idle loop turns"  # type: ignore[attr-defined]
    # The pool's only connection is the kept one: concurrent calls wait for it (a wait
    # for the pool would time out), one after the other.
    results = await asyncio.gather(*(store.enqueue(_task(f"c{n}")) for n in range(5)))
    assert all(result.created for result in results)
    let_go()
    let_go()  # a second call does nothing
    await store.flush_notifications()
    await asyncio.sleep(0)
    assert pool.checkedout() == 0, pool.status()  # type: ignore[attr-defined]
    assert await _count(engine) == 6


async def test_a_kept_connection_the_server_closed_is_replaced_before_the_next_call(
    one_connection: AsyncEngine, postgres_url: str
) -> None:
    # A kept connection is never checked out again, so the pool's check never sees it.
    engine = one_connection
    store = BackgroundTaskDbStore(engine, registry=REGISTRY)
    let_go = store.keep_connection()
    await store.enqueue(_task("first"))
    held = store._driver_hold._held
    assert held is not None
    driver: Any = held.driver_connection
    admin = create_async_engine(postgres_url, poolclass=NullPool)
    try:
        async with admin.connect() as conn:
            await conn.execute(sa.text(f"SELECT pg_terminate_backend({driver.get_server_pid()})"))
    finally:
        await admin.dispose()
    await wait_closed(driver)  # asyncpg has seen the socket close
    result = await store.enqueue(_task("second"))  # a new connection, not an error
    assert result.created
    let_go()
    await store.flush_notifications()
    assert await _count(engine) == 2


async def test_a_kept_connection_unused_for_five_minutes_is_replaced_before_the_next_call(
    one_connection: AsyncEngine,
) -> None:
    # A NAT or a load balancer may have dropped it silently: no statement is sent on it.
    engine = one_connection
    store = BackgroundTaskDbStore(engine, registry=REGISTRY)
    now = [1_000.0]
    store._driver_hold._monotonic = lambda: now[0]
    let_go = store.keep_connection()
    await store.enqueue(_task("first"))
    held = store._driver_hold._held
    now[0] += MAX_IDLE
    await store.enqueue(_task("second"))
    assert store._driver_hold._held is held  # unused for exactly the limit: kept
    now[0] += MAX_IDLE + 1
    await store.enqueue(_task("third"))
    assert store._driver_hold._held is not held
    let_go()
    await store.flush_notifications()
    assert await _count(engine) == 3


async def test_success_writes_queue_on_the_kept_connection_while_others_are_idle(
    postgres_url: str,
) -> None:
    async with pg_engine(postgres_url, pool_size=4, max_overflow=0) as engine:
        # Each enqueue its own statement: what is checked is the hold, not the coalescer.
        store = BackgroundTaskDbStore(
            engine, registry=REGISTRY, notify=False, coalesce_enqueues=False
        )
        # Idle connections in the pool: a second call could take one of them.
        opened = [await engine.connect() for _ in range(3)]
        for conn in opened:
            await conn.close()
        pool = engine.sync_engine.pool
        await store.enqueue_many([_task(f"t{n}") for n in range(6)])
        let_go = store.keep_connection()
        claimed = await store.claim_due_for_lane(Lane.FALLBACK.value, 6, "w", timedelta(minutes=5))
        checkouts: list[object] = []
        sa.event.listen(pool, "checkout", lambda *args: checkouts.append(args))
        batches = [claimed[:3], claimed[3:]]
        written = await asyncio.gather(
            *(
                store.mark_tasks_succeeded_many(
                    [TaskCompletion(lease_of(record), None, None) for record in batch]
                )
                for batch in batches
            )
        )
        assert written == [[True] * 3, [True] * 3]
        assert checkouts == [], "both went out on the kept connection, one after the other"
        # Other calls still take an idle pooled connection instead of waiting.
        await asyncio.gather(store.enqueue(_task("x")), store.enqueue(_task("y")))
        assert len(checkouts) == 1
        let_go()


@pytest.fixture
async def kept_hold(one_connection: AsyncEngine) -> AsyncIterator[HeldDriverConnection]:
    """A store's held connection, kept as a busy worker keeps it."""
    store = BackgroundTaskDbStore(one_connection, registry=REGISTRY, notify=False)
    let_go = store.keep_connection()
    yield store._driver_hold
    let_go()


async def test_the_call_waiting_for_the_kept_connection_goes_first_once_it_is_free(
    kept_hold: HeldDriverConnection,
) -> None:
    # A worker's queued success statement must go out before the call that held the
    # connection processes its rows; else the database idles while the worker works.
    hold = kept_hold
    order: list[str] = []
    first, held = await hold.acquire("first")

    async def second() -> None:
        connection, second_held = await hold.acquire("second", queue=True)
        order.append("second has the connection")
        await hold.release(connection, second_held, broken=False)

    waiting = asyncio.create_task(second())
    for _ in range(3):
        await asyncio.sleep(0)
    assert order == [], "waits while the connection is busy"
    await hold.release(first, held, broken=False)
    order.append("first resumed")
    await waiting
    assert order == ["second has the connection", "first resumed"]


async def test_a_cancel_while_handing_the_connection_over_keeps_the_finished_call(
    kept_hold: HeldDriverConnection,
) -> None:
    # The first call's statement has returned: a cancellation in the hand-over turn is
    # raised at its next await, after its rows reached the caller.
    hold = kept_hold
    steps: list[str] = []
    first_task: asyncio.Task[None] | None = None
    ready = asyncio.Event()

    async def first() -> None:
        connection, held = await hold.acquire("first")
        ready.set()
        await asyncio.sleep(0.01)  # the statement in flight
        await hold.release(connection, held, broken=False)
        steps.append("rows reached the caller")
        await asyncio.sleep(0)
        steps.append("not reached: cancelled at this await")

    async def second() -> None:
        await ready.wait()
        connection, held = await hold.acquire("second", queue=True)
        assert first_task is not None
        first_task.cancel()  # lands in the first call's hand-over turn
        steps.append("second has the connection")
        await hold.release(connection, held, broken=False)

    first_task = asyncio.create_task(first())
    second_task = asyncio.create_task(second())
    await asyncio.gather(first_task, second_task, return_exceptions=True)
    assert first_task.cancelled()
    assert steps == ["second has the connection", "rows reached the caller"]
    assert not second_task.cancelled() and second_task.exception() is None


async def test_an_enqueue_on_the_kept_connection_hands_it_to_the_queued_call_first(
    one_connection: AsyncEngine, postgres_url: str
) -> None:
    # The one-task enqueue takes the kept connection without awaiting (take/free): a
    # worker's success write queued behind it still goes out before the enqueue returns.
    store = BackgroundTaskDbStore(one_connection, registry=REGISTRY, notify=False)
    let_go = store.keep_connection()
    hold = store._driver_hold
    await store.enqueue(_task("warm"))
    order: list[str] = []
    admin = create_async_engine(postgres_url)
    try:
        async with admin.connect() as conn:
            await conn.execute(sa.text("LOCK TABLE background_tasks IN EXCLUSIVE MODE"))

            async def enqueue() -> None:
                assert (await store.enqueue(_task("held"))).created
                order.append("enqueue returned")

            async def queued() -> None:
                connection, held = await hold.acquire("success", queue=True)
                order.append("queued call has the connection")
                await hold.release(connection, held, broken=False)

            enqueuing = asyncio.create_task(enqueue())
            await wait_for_lock_wait(conn, "the enqueue")
            assert hold.take() is None, "busy: the enqueue has it"
            waiting = asyncio.create_task(queued())
            for _ in range(3):
                await asyncio.sleep(0)
            assert order == []
            await conn.rollback()  # the enqueue's insert goes through
            await asyncio.gather(enqueuing, waiting)
    finally:
        await admin.dispose()
    assert order == ["queued call has the connection", "enqueue returned"]
    let_go()
    assert await _count(one_connection) == 2


async def test_a_busy_worker_keeps_one_connection_and_lets_go_once_idle(
    one_connection: AsyncEngine,
) -> None:
    engine = one_connection
    pool = engine.sync_engine.pool
    store = BackgroundTaskDbStore(engine, registry=REGISTRY, notify=False)
    harness = Harness()
    harness.gate("a", "b")
    worker = TaskWorker(
        store,
        lanes=[TaskLaneConfig(Lane.FALLBACK, 4), TaskLaneConfig(Lane.MEDIA, 1)],
        execution=ClaimedTaskExecutionConfig(state=harness, registry=REGISTRY),
    )
    await store.enqueue_many([_task("a"), _task("b")])
    await worker.drain()
    await until(lambda: len(harness.started) == 2)
    for _ in range(3):
        await asyncio.sleep(0)
    assert pool.checkedout() == 1, "kept while tasks are in flight"  # type: ignore[attr-defined]
    harness.open("a", "b")
    await worker.join()
    assert worker.stats.total().succeeded == 2
    await asyncio.sleep(0)
    assert pool.checkedout() == 0, pool.status()  # type: ignore[attr-defined]
    await worker.shutdown()


async def test_concurrent_enqueues_share_the_pool_and_leak_nothing(postgres_url: str) -> None:
    async with pg_engine(postgres_url, pool_size=3, max_overflow=0, pool_timeout=5) as engine:
        store = BackgroundTaskDbStore(engine, registry=REGISTRY)
        results = await asyncio.gather(*(store.enqueue(_task(f"c{n}")) for n in range(60)))
        assert all(r.created for r in results)
        assert len({r.record.id for r in results}) == 60
        dedupe = REGISTRY.new_task(Kind.MAIL, Job(name="once"), dedupe_key="once")
        hits = await asyncio.gather(*(store.enqueue(dedupe) for _ in range(10)))
        assert sum(r.created for r in hits) == 1
        assert len({r.record.id for r in hits}) == 1
        await store.flush_notifications()
        await asyncio.sleep(0)
        assert engine.sync_engine.pool.checkedout() == 0  # type: ignore[attr-defined]
        assert await _count(engine) == 61


async def test_disposing_the_engine_right_after_an_enqueue_leaks_no_connection(
    postgres_url: str,
) -> None:
    engine = create_async_engine(postgres_url, pool_size=1, max_overflow=0)
    await create_background_tasks_table(engine)
    store = BackgroundTaskDbStore(engine, registry=REGISTRY)
    try:
        await store.enqueue(_task("before"))
        # No loop iteration between the enqueue and the disposal: the connection is
        # still held; it must be closed, not handed to the discarded pool.
        await engine.dispose()
        await asyncio.sleep(0)
        gc.collect()  # an unclosed asyncpg connection would warn (an error here)
        again = await store.enqueue(_task("after"))  # the engine's new pool
        assert again.created
        assert await _count(engine) == 2
    finally:
        async with engine.begin() as conn:
            await conn.execute(sa.text("DROP TABLE IF EXISTS background_tasks_lanes"))
            await conn.execute(sa.text("DROP TABLE IF EXISTS background_tasks_deps"))
            await conn.execute(sa.text("DROP TABLE IF EXISTS background_tasks"))
        await engine.dispose()
    await asyncio.sleep(0)
    gc.collect()


async def test_an_enqueue_the_server_refused_keeps_its_connection(
    one_connection: AsyncEngine,
) -> None:
    # The server answered with an error: asyncpg synchronized the session, so the
    # connection is idle and stays the burst's (only an unknown session is discarded).
    engine = one_connection
    async with engine.begin() as conn:
        await conn.execute(sa.text(_REFUSE_FUNCTION))
        await conn.execute(sa.text(_REFUSE_TRIGGER))
    store = BackgroundTaskDbStore(engine, registry=REGISTRY, notify=False)
    let_go = store.keep_connection()
    try:
        await store.enqueue(_task("warm"))
        hold = store._driver_hold
        kept = hold.take()
        assert kept is not None
        hold.free()
        with pytest.raises(DatabaseOperationError) as caught:
            await store.enqueue(_task("refused"))
        assert caught.value.operation == "enqueue tasks"
        assert hold.take() is kept, "the answered session is reused"
        hold.free()
        assert (await store.enqueue(_task("after"))).created
    finally:
        let_go()
        await asyncio.sleep(0)
        async with engine.begin() as conn:
            await conn.execute(sa.text("DROP TRIGGER IF EXISTS af_refuse ON background_tasks"))
            await conn.execute(sa.text("DROP FUNCTION IF EXISTS af_refuse()"))


_REFUSE_FUNCTION = """
CREATE FUNCTION af_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'refused by the test trigger'; END $$
"""
_REFUSE_TRIGGER = """
CREATE TRIGGER af_refuse BEFORE INSERT ON background_tasks FOR EACH ROW
WHEN (NEW.payload_json LIKE '%refused%') EXECUTE FUNCTION af_refuse()
"""


async def _closed_on_the_wire(call: Coroutine[Any, Any, object]) -> None:
    """Run ``call`` until its statement is on the wire, then close it (``GeneratorExit``).

    That is what happens to a task still pending when its event loop is closed without
    cancelling it (pytest-asyncio's loop at a test's end, a host that closes its loop):
    the coroutine is closed when collected, and nothing can be awaited any more.
    """
    on_the_wire = call.send(None)
    assert isinstance(on_the_wire, asyncio.Future), "suspended on the driver's answer"
    call.close()  # RuntimeError('coroutine ignored GeneratorExit') if it awaited its release
    with contextlib.suppress(Exception):  # the terminated connection's answer, never read
        await on_the_wire


@pytest.mark.parametrize("call", ["enqueue", "claim"])
async def test_a_call_closed_mid_statement_terminates_its_connection(
    one_connection: AsyncEngine, call: str
) -> None:
    engine = one_connection
    store = BackgroundTaskDbStore(engine, registry=REGISTRY, notify=False)
    await store.enqueue(_task("ready"))
    let_go = store.keep_connection()
    await store.enqueue(_task("warm"))  # held and free: the next call takes it, no await first
    pool = engine.sync_engine.pool
    if call == "enqueue":
        await _closed_on_the_wire(store.enqueue(_task("closed")))
    else:
        lease = timedelta(minutes=5)
        await _closed_on_the_wire(store.claim_due_for_lane(Lane.FALLBACK.value, 1, "w", lease))
    # Its session is unknown: never handed to another call nor back to the pool.
    assert store._driver_hold.take() is None
    let_go()
    await asyncio.sleep(0)
    assert pool.checkedout() == 0, pool.status()  # type: ignore[attr-defined]
    assert (await store.enqueue(_task("after"))).created  # on a new connection


@asynccontextmanager
async def _enqueue_behind_a_lock(
    store: BackgroundTaskDbStore, postgres_url: str, name: str
) -> AsyncIterator[tuple[AsyncConnection, asyncio.Task[EnqueueResult]]]:
    """An enqueue waiting on another session's table lock (released when the block ends)."""
    admin = create_async_engine(postgres_url)
    try:
        async with admin.connect() as conn:
            await conn.execute(sa.text("LOCK TABLE background_tasks IN EXCLUSIVE MODE"))
            blocked = asyncio.create_task(store.enqueue(_task(name)))
            await wait_for_lock_wait(conn, "the enqueue")
            yield conn, blocked
            await conn.rollback()
    finally:
        await admin.dispose()


async def _the_pool_recovered(engine: AsyncEngine, store: BackgroundTaskDbStore) -> None:
    # The pool's only connection was replaced: the next enqueue works, nothing is held.
    assert (await store.enqueue(_task("after"))).created
    await asyncio.sleep(0)
    assert engine.sync_engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    assert await _count(engine) == 2


async def test_a_cancelled_enqueue_discards_its_connection(
    one_connection: AsyncEngine, postgres_url: str
) -> None:
    engine = one_connection
    store = BackgroundTaskDbStore(engine, registry=REGISTRY)
    await store.enqueue(_task("warm"))
    async with _enqueue_behind_a_lock(store, postgres_url, "cancelled") as (_, blocked):
        blocked.cancel()
        with pytest.raises(asyncio.CancelledError):
            await blocked
    await _the_pool_recovered(engine, store)


async def test_a_connection_killed_mid_call_is_unavailable_and_never_reused(
    one_connection: AsyncEngine, postgres_url: str
) -> None:
    engine = one_connection
    store = BackgroundTaskDbStore(engine, registry=REGISTRY)
    await store.enqueue(_task("warm"))
    async with _enqueue_behind_a_lock(store, postgres_url, "killed") as (conn, blocked):
        await conn.execute(
            sa.text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE wait_event_type = 'Lock' AND datname = current_database()"
            )
        )
        with pytest.raises(DatabaseUnavailableError):
            await blocked
    await _the_pool_recovered(engine, store)


async def test_a_pool_that_closes_on_check_in_gets_each_connection_back(postgres_url: str) -> None:
    # NullPool closes a connection on check-in (I/O): nothing is held across calls.
    async with pg_engine(postgres_url, poolclass=NullPool) as engine:
        store = BackgroundTaskDbStore(engine, registry=REGISTRY)
        for n in range(5):
            assert (await store.enqueue(_task(f"null{n}"))).created
        assert await _count(engine) == 5
    gc.collect()  # a connection left open would warn (an error here)


class _RecordingStore(BackgroundTaskDbStore):
    """Records the size of every success-and-claim; ``done`` once ``total`` were written."""

    def __init__(self, engine: AsyncEngine, total: int) -> None:
        super().__init__(engine, registry=REGISTRY, notify=False)
        self.batches: list[int] = []
        self.total = total
        self.written = 0
        self.done = asyncio.Event()

    async def mark_tasks_succeeded_and_claim(
        self,
        completions: Sequence[TaskCompletion],
        lane: str,
        limit: int,
        owner: str,
        lease_ttl: timedelta,
        *,
        cluster_limit: int | None = None,
        partition_limit: int | None = None,
        rate_limit: TaskRateLimit | None = None,
        partition_rate_limit: TaskRateLimit | None = None,
    ) -> tuple[list[bool], list[BackgroundTaskRecord]]:
        self.batches.append(len(completions))
        results = await super().mark_tasks_succeeded_and_claim(
            completions,
            lane,
            limit,
            owner,
            lease_ttl,
            cluster_limit=cluster_limit,
            partition_limit=partition_limit,
            rate_limit=rate_limit,
            partition_rate_limit=partition_rate_limit,
        )
        self.written += sum(results[0])
        if self.written >= self.total:
            self.done.set()
        return results


async def test_two_success_statements_in_flight_keep_the_lane_limit(postgres_url: str) -> None:
    async with pg_engine(postgres_url) as engine:
        total, limit = 400, 40
        store = _RecordingStore(engine, total)
        assert store.success_writes_in_flight == 2
        await store.enqueue_many([_task(f"t{n}") for n in range(total)])
        harness = Harness()

        async def overlap(_ctx: object, _payload: Job) -> None:
            for _ in range(3):  # yield, so the bodies of one batch run side by side
                await asyncio.sleep(0)

        harness.actions = {f"t{n}": overlap for n in range(total)}
        token = CancellationToken()
        worker = TaskWorker(
            store,
            lanes=[TaskLaneConfig(Lane.FALLBACK, limit), TaskLaneConfig(Lane.MEDIA, 1)],
            execution=ClaimedTaskExecutionConfig(state=harness, registry=REGISTRY),
        )
        running = asyncio.create_task(worker.run(token), name="test-worker")
        await asyncio.wait_for(store.done.wait(), 60)
        token.cancel()
        await running
        assert sorted(harness.started) == sorted(f"t{n}" for n in range(total)), "each once"
        assert harness.max_running[Lane.FALLBACK.value] <= limit
        assert any(16 <= size < limit for size in store.batches), store.batches
        async with engine.connect() as conn:
            query = sa.text("SELECT count(*) FROM background_tasks WHERE status = 'succeeded'")
            assert (await conn.execute(query)).scalar_one() == total
