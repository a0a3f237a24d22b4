"""The ``waiting`` hint: tasks not yet due stay out of the index claims walk (PostgreSQL).

Every write that makes a task pending with a later ``run_at`` sets it, a claim clears it,
and ``stage_waiting_tasks`` clears it for tasks that came due. It is only a hint: lane
claims also take due tasks still flagged, in the same priority order, on every backend;
the success statement's refill takes them once staged.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from aster_forge.db import (
    BackgroundTaskDbStore,
    background_tasks_table,
    create_background_tasks_table,
)
from aster_forge.tasks import NewTask
from aster_forge.tasks._records import TaskCompletion

from ._leases import lease_of

_TTL = timedelta(minutes=10)
_LATER = timedelta(hours=1)


@pytest.fixture
async def store(engine: AsyncEngine) -> AsyncIterator[BackgroundTaskDbStore]:
    await create_background_tasks_table(engine)
    yield BackgroundTaskDbStore(engine, notify=False)


async def _waiting(engine: AsyncEngine) -> dict[int, bool]:
    async with engine.connect() as conn:
        rows = await conn.execute(sa.text("SELECT id, waiting FROM background_tasks"))
        return {int(row[0]): bool(row[1]) for row in rows}


async def _came_due(engine: AsyncEngine, *ids: int) -> None:
    """Move ``ids`` into the past as a clock would, leaving their flag as it is."""
    async with engine.begin() as conn:
        await conn.execute(
            sa.text("UPDATE background_tasks SET run_at = :past WHERE id IN :ids").bindparams(
                sa.bindparam("ids", expanding=True)
            ),
            {"past": datetime(2000, 1, 1, tzinfo=UTC), "ids": list(ids)},
        )


def _is_postgres(engine: AsyncEngine) -> bool:
    return engine.dialect.name == "postgresql"


async def test_every_enqueue_path_flags_what_is_not_yet_due(
    engine: AsyncEngine, store: BackgroundTaskDbStore
) -> None:
    now_ = (await store.enqueue(NewTask("k", "l"))).record.id
    delayed = (await store.enqueue(NewTask("k", "l", delay=_LATER))).record.id
    later = datetime.now(UTC) + _LATER
    at = (await store.enqueue(NewTask("k", "l", run_at=later))).record.id
    keyed = (await store.enqueue(NewTask("k", "l", delay=_LATER, dedupe_key="a"))).record.id
    batch = [r.record.id for r in await store.enqueue_many([NewTask("k", "l", delay=_LATER)] * 2)]
    async with engine.begin() as conn:
        (inside,) = await store.enqueue_many([NewTask("k", "l", delay=_LATER)], connection=conn)
    flags = await _waiting(engine)
    flagged = {delayed, at, keyed, *batch, inside.record.id}
    expected = _is_postgres(engine)  # SQLite and MariaDB keep the hint false
    assert {i: flags[i] for i in flagged} == dict.fromkeys(flagged, expected)
    assert flags[now_] is False


async def test_a_product_column_enqueue_flags_too(engine: AsyncEngine) -> None:
    # Tasks naming product columns take the portable insert, one or many per statement.
    table = background_tasks_table(sa.MetaData(), "tasks_with_note", sa.Column("note", sa.Text))
    async with engine.begin() as conn:
        await conn.run_sync(table.metadata.create_all)
    store = BackgroundTaskDbStore(engine, table=table, notify=False)
    tasks = [NewTask("k", "l", delay=_LATER, extra={"note": "x"}), NewTask("k", "l")]
    ids = [r.record.id for r in await store.enqueue_many(tasks)]
    async with engine.connect() as conn:
        found = await conn.execute(sa.select(table.c.id, table.c.waiting))
        rows = {int(row[0]): bool(row[1]) for row in found}
    assert [rows[i] for i in ids] == [_is_postgres(engine), False]


async def test_a_flagged_task_that_came_due_is_claimed_in_priority_order(
    engine: AsyncEngine, store: BackgroundTaskDbStore
) -> None:
    high = (await store.enqueue(NewTask("k", "l", delay=_LATER, priority=9))).record.id
    low = (await store.enqueue(NewTask("k", "l", delay=_LATER, priority=1))).record.id
    plain = (await store.enqueue(NewTask("k", "l", priority=5))).record.id
    [claimed_plain] = await store.claim_due_for_lane("l", 10, "w", _TTL)
    assert claimed_plain.id == plain, "tasks not yet due are not claimed"
    assert await store.release_task_for_shutdown(lease_of(claimed_plain))
    # The clock passes their run_at, nobody staged them: still claimed, by priority.
    await _came_due(engine, high, low)
    claimed = await store.claim_due_for_lane("l", 2, "w", _TTL)
    assert [r.id for r in claimed] == [high, plain]
    assert [r.id for r in await store.claim_due_for_lane("l", 2, "w", _TTL)] == [low]
    assert not any((await _waiting(engine)).values()), "a claim clears the flag"


async def test_a_refill_takes_flagged_tasks_once_they_are_staged(
    engine: AsyncEngine, store: BackgroundTaskDbStore
) -> None:
    # The success-and-claim refills a busy worker's slots many times a second: it reads
    # only the due index, and a flagged task reaches it once staged.
    await store.enqueue_many([NewTask("k", "l", priority=5)] * 2)
    late = (await store.enqueue(NewTask("k", "l", delay=_LATER))).record.id
    await _came_due(engine, late)
    first, second = await store.claim_due_for_lane("l", 2, "w", _TTL)
    done = [TaskCompletion(lease_of(first), None, None)]
    written, refilled = await store.mark_tasks_succeeded_and_claim(done, "l", 5, "w", _TTL)
    assert written == [True]
    if _is_postgres(engine):
        assert refilled == []
        assert await store.stage_waiting_tasks() == 1
        done = [TaskCompletion(lease_of(second), None, None)]
        written, refilled = await store.mark_tasks_succeeded_and_claim(done, "l", 5, "w", _TTL)
    assert [r.id for r in refilled] == [late]


async def test_a_paused_lane_keeps_its_flagged_tasks_that_came_due(
    engine: AsyncEngine, store: BackgroundTaskDbStore
) -> None:
    task = (await store.enqueue(NewTask("k", "l", delay=_LATER))).record.id
    await _came_due(engine, task)
    await store.pause_lane("l")
    assert await store.claim_due_for_lane("l", 5, "w", _TTL) == []
    await store.resume_lane("l")
    assert [r.id for r in await store.claim_due_for_lane("l", 5, "w", _TTL)] == [task]


async def test_retry_snooze_and_operator_retry_flag_a_later_run_at(
    engine: AsyncEngine, store: BackgroundTaskDbStore
) -> None:
    ids = [r.record.id for r in await store.enqueue_many([NewTask("k", "l")] * 4)]
    first, second, third, fourth = await store.claim_due_for_lane("l", 4, "w", _TTL)
    assert await store.mark_task_retry(
        lease_of(first), delay=_LATER, error="e", steps_json=None, count_attempt=True
    )
    assert await store.mark_task_snoozed(lease_of(second), delay=_LATER, steps_json=None)
    assert await store.mark_task_retry(
        lease_of(third), delay=timedelta(0), error="e", steps_json=None, count_attempt=True
    )
    assert await store.mark_task_failed(
        lease_of(fourth), error="e", steps_json=None, manual_retry=True
    )
    await store.retry_task(fourth.id, run_at=datetime.now(UTC) + _LATER)
    flags = await _waiting(engine)
    pg = _is_postgres(engine)
    assert [flags[i] for i in ids] == [pg, pg, False, pg]
    [again] = await store.claim_due_for_lane("l", 5, "w", _TTL)
    assert again.id == third.id, "a retry due now is claimable at once"


async def test_staging_clears_only_the_tasks_that_came_due(
    engine: AsyncEngine, store: BackgroundTaskDbStore
) -> None:
    results = await store.enqueue_many([NewTask("k", "l", delay=_LATER)] * 5)
    ids = [r.record.id for r in results]
    await _came_due(engine, *ids[:3])
    if not _is_postgres(engine):
        assert await store.stage_waiting_tasks() == 0
        return
    assert await store.stage_waiting_tasks(limit=2) == 2
    assert await store.stage_waiting_tasks() == 1
    assert await store.stage_waiting_tasks() == 0
    flags = await _waiting(engine)
    assert [flags[i] for i in ids] == [False, False, False, True, True]
    with pytest.raises(ValueError, match="limit"):
        await store.stage_waiting_tasks(limit=0)


async def test_an_extra_column_may_not_take_the_name(engine: AsyncEngine) -> None:
    with pytest.raises(ValueError, match="waiting"):
        background_tasks_table(sa.MetaData(), "t", sa.Column("waiting", sa.Integer))
