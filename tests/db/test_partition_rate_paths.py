"""PostgreSQL's one-statement claim under a partition rate limit, against the portable one.

A lane with a ``partition_rate_limit`` claims in one statement on PostgreSQL (see
``partition_rate_gate`` in ``sql/postgresql.sql``), alone or with the lane's other
limits; leases too long for the server's clock take the portable transaction instead.
Each scenario runs on the statement through asyncpg, through SQLAlchemy, and on the
portable path, with the same outcome. A claim whose snapshot was taken while another
claim counting the lane held its row must not start a spent partition's task, and the
three paths racing share each partition's budget.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Iterable
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from aster_forge import BackgroundTaskRecord, TaskStatus
from aster_forge.db import BackgroundTaskDbStore, create_background_tasks_table
from aster_forge.db._internal import partition_rates_table
from aster_forge.tasks import NewTask
from aster_forge.tasks._records import TaskCompletion
from aster_forge.testing._task_control_conformance import lease_of

from ..conftest import drop_all_tables

pytestmark = pytest.mark.postgres

# Past the store's saturating delta: claims with it take the portable path.
_FOREVER = timedelta(days=365 * 9000)
_TTL = timedelta(minutes=10)
# Windows are aligned to the epoch: a century-long one has no boundary for decades.
_CENTURY = timedelta(days=36525)
PATHS = ("driver", "sqlalchemy", "portable")


@pytest.fixture
async def engine(postgres_url: str) -> AsyncIterator[AsyncEngine]:
    eng = create_async_engine(postgres_url)
    try:
        await create_background_tasks_table(eng)
        yield eng
    finally:
        await drop_all_tables(eng)
        await eng.dispose()


def _store(engine: AsyncEngine, path: str) -> tuple[BackgroundTaskDbStore, timedelta]:
    """A store claiming on ``path``, and the lease that sends its claims there."""
    store = BackgroundTaskDbStore(engine, notify=False)
    assert store._pg_run is not None and store._pg_run.driver
    store._pg_run.driver = path == "driver"
    return store, _FOREVER if path == "portable" else _TTL


def _shapes(store: BackgroundTaskDbStore) -> set[tuple[bool, ...]]:
    """The one-statement shapes the store ran: (rated, capped, fair, success)."""
    assert store._pg_run is not None
    return {key[1:] for key in store._pg_run._partition_rated_claims}


def _partitions(records: Iterable[BackgroundTaskRecord]) -> Counter[str | None]:
    return Counter(r.partition_key for r in records)


def _done(records: Iterable[BackgroundTaskRecord], partition: str) -> list[TaskCompletion]:
    return [
        TaskCompletion(lease_of(r), None, None) for r in records if r.partition_key == partition
    ][:1]


async def _enqueue(store: BackgroundTaskDbStore, lane: str) -> None:
    # Partition "a" ranks first everywhere: unchecked, it would take every claim.
    await store.enqueue_many(
        [NewTask("k", lane, partition="a", priority=10) for _ in range(5)]
        + [NewTask("k", lane, partition="b") for _ in range(5)]
        + [NewTask("k", lane) for _ in range(2)]
    )


@pytest.mark.parametrize("path", PATHS)
async def test_with_the_lane_rate_both_budgets_bind(engine: AsyncEngine, path: str) -> None:
    store, ttl = _store(engine, path)
    await _enqueue(store, "both")
    limits: dict[str, Any] = {"partition_rate_limit": (2, _CENTURY), "rate_limit": (5, _CENTURY)}
    first = await store.claim_due_for_lane("both", 3, "w", ttl, **limits)
    assert _partitions(first) == {"a": 1, "b": 1, None: 1}
    second = await store.claim_due_for_lane("both", 10, "w", ttl, **limits)
    # The lane has 2 starts left: "a" (by priority) and "b" take their second turn.
    assert _partitions(second) == {"a": 1, "b": 1}
    written, third = await store.mark_tasks_succeeded_and_claim(
        _done(second, "a"), "both", 10, "w", ttl, **limits
    )
    assert (written, third) == ([True], []), "the lane's budget is spent"
    (state,) = await store.lane_states(["both"])
    assert state.rate_started == 5
    shapes = {(True, False, False, False), (True, False, False, True)}
    assert _shapes(store) == (set() if path == "portable" else shapes)


@pytest.mark.parametrize("path", PATHS)
async def test_with_a_cluster_limit_the_room_binds(engine: AsyncEngine, path: str) -> None:
    store, ttl = _store(engine, path)
    await _enqueue(store, "capped")
    limits: dict[str, Any] = {"partition_rate_limit": (2, _CENTURY), "cluster_limit": 4}
    first = await store.claim_due_for_lane("capped", 10, "w", ttl, **limits)
    assert _partitions(first) == {"a": 2, "b": 1, None: 1}
    assert await store.claim_due_for_lane("capped", 10, "w", ttl, **limits) == []
    written, freed = await store.mark_tasks_succeeded_and_claim(
        _done(first, "a"), "capped", 10, "w", ttl, **limits
    )
    # One slot freed; "a" spent its two starts, so "b" takes it.
    assert written == [True]
    assert _partitions(freed) == {"b": 1}
    shapes = {(False, True, False, False), (False, True, False, True)}
    assert _shapes(store) == (set() if path == "portable" else shapes)


@pytest.mark.parametrize("path", PATHS)
async def test_with_a_partition_limit_running_and_starts_bind(
    engine: AsyncEngine, path: str
) -> None:
    store, ttl = _store(engine, path)
    await _enqueue(store, "fair")
    limits: dict[str, Any] = {"partition_rate_limit": (2, _CENTURY), "partition_limit": 1}
    first = await store.claim_due_for_lane("fair", 10, "w", ttl, **limits)
    assert _partitions(first) == {"a": 1, "b": 1, None: 2}
    assert await store.claim_due_for_lane("fair", 10, "w", ttl, **limits) == []
    # The success frees "a"'s running slot in the same statement: "a" starts its second.
    written, second = await store.mark_tasks_succeeded_and_claim(
        _done(first, "a"), "fair", 10, "w", ttl, **limits
    )
    assert (written, _partitions(second)) == ([True], {"a": 1})
    written, third = await store.mark_tasks_succeeded_and_claim(
        _done(second, "a"), "fair", 10, "w", ttl, **limits
    )
    assert (written, third) == ([True], []), "partition a spent its starts"
    shapes = {(False, False, True, False), (False, False, True, True)}
    assert _shapes(store) == (set() if path == "portable" else shapes)


async def _until_waiting(engine: AsyncEngine, waiters: int, *claims: asyncio.Task[Any]) -> None:
    """Until ``waiters`` statements of the database wait for a lock."""
    query = sa.text(
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
    async with asyncio.timeout(10), engine.connect() as conn:
        while int((await conn.execute(query)).scalar_one()) < waiters:
            for claim in claims:
                assert not claim.done(), await claim
            await asyncio.sleep(0.01)
            await conn.rollback()


@pytest.mark.parametrize("path", ["driver", "sqlalchemy"])
async def test_a_claim_that_waited_for_a_counting_claim_reads_its_count(
    engine: AsyncEngine, path: str
) -> None:
    """A claim's snapshot is taken before it waits for the lane's row: when the claim
    holding the row commits, the starts it counted are not in that snapshot.

    The counting claim is held after it counted (a transaction locks the partition's
    row it updates) while the second claim waits for the lane's row behind it."""
    (first, ttl), (second, _) = _store(engine, path), _store(engine, path)
    rate = (3, _CENTURY)
    await first.enqueue_many(
        [NewTask("k", "held", partition="a", priority=10) for _ in range(5)]
        + [NewTask("k", "held", partition="b") for _ in range(5)]
    )
    (started,) = await first.claim_due_for_lane("held", 1, "w", ttl, partition_rate_limit=rate)
    assert started.partition_key == "a"
    rates = partition_rates_table(first.table)
    async with engine.connect() as holder:
        await holder.execute(
            sa.select(rates.c.started).where(rates.c.partition_key == "a").with_for_update()
        )
        counting = asyncio.create_task(
            first.claim_due_for_lane("held", 1, "w1", ttl, partition_rate_limit=rate),
            name="counting-claim",
        )
        await _until_waiting(engine, 1, counting)
        # Ranked first by the waiting claim's snapshot, ahead of the task the counting
        # claim took (which its stale count would otherwise make up for).
        await first.enqueue_many(
            [NewTask("k", "held", partition="a", priority=20) for _ in range(2)]
        )
        waiting = asyncio.create_task(
            second.claim_due_for_lane("held", 10, "w2", ttl, partition_rate_limit=rate),
            name="waiting-claim",
        )
        await _until_waiting(engine, 2, counting, waiting)
        await holder.commit()
        assert _partitions(await counting) == {"a": 1}
        claimed = await waiting
    assert _partitions(claimed) == {"a": 1, "b": 3}, (
        f"the waiting claim took {_partitions(claimed)}"
    )
    page = await first.list_tasks(status=TaskStatus.RUNNING, lane="held", limit=20)
    assert _partitions(page.items) == {"a": 3, "b": 3}


async def test_the_three_paths_share_each_partitions_budget(engine: AsyncEngine) -> None:
    stores = [_store(engine, path) for path in PATHS]
    count = 3
    await stores[0][0].enqueue_many(
        [NewTask("k", "shared", partition=p) for p in ("a", "b") for _ in range(40)]
    )

    async def claim(store: BackgroundTaskDbStore, ttl: timedelta, me: int) -> int:
        got: list[BackgroundTaskRecord] = []
        for _ in range(3):
            got += await store.claim_due_for_lane(
                "shared", 2, f"w{me}", ttl, partition_rate_limit=(count, _CENTURY)
            )
        return len(got)

    claimed = await asyncio.gather(
        *(claim(store, ttl, i) for i in range(6) for store, ttl in stores)
    )
    page = await stores[0][0].list_tasks(status=TaskStatus.RUNNING, lane="shared", limit=100)
    assert _partitions(page.items) == {"a": count, "b": count}
    assert sum(claimed) == 2 * count, claimed
