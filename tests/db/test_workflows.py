"""Workflows on every store: DAG enqueue, the join made due once, failure and cancel policy."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from aster_forge import BackgroundTaskRecord, TaskStatus
from aster_forge.db import BackgroundTaskDbStore, create_background_tasks_table
from aster_forge.tasks import NewTask, TaskDependency
from aster_forge.tasks._internal import TaskCompletion
from aster_forge.tasks.errors import TaskEnqueueValueError
from aster_forge.testing import InMemoryTaskStore, ManualClock

from ..conftest import drop_all_tables
from ._leases import lease_of

_LONG = timedelta(minutes=10)
_LANE = "flow"

Store = InMemoryTaskStore | BackgroundTaskDbStore


@pytest.fixture(
    params=[
        pytest.param("memory", id="memory"),
        pytest.param("sqlite", id="sqlite"),
        pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
        pytest.param("mysql", id="mysql", marks=pytest.mark.mysql),
    ]
)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """A fresh store of every kind, the in-memory one included."""
    if request.param == "memory":
        yield InMemoryTaskStore(ManualClock())
        return
    if request.param == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp_path / 'flow.db'}"
    else:
        url = str(request.getfixturevalue(f"{request.param}_url"))
    engine = create_async_engine(url)
    try:
        await create_background_tasks_table(engine)
        yield BackgroundTaskDbStore(engine, clock=ManualClock())
    finally:
        await drop_all_tables(engine)
        await engine.dispose()


def _tasks(*names: str) -> list[NewTask]:
    return [NewTask(name, _LANE, payload_json=f'"{name}"') for name in names]


async def _claim(store: Store, limit: int = 10) -> list[BackgroundTaskRecord]:
    return await store.claim_due_for_lane(_LANE, limit, "w", _LONG)


async def _status(store: Store, task_id: int) -> TaskStatus:
    record = await store.get_task(task_id)
    assert record is not None
    return record.status


async def _succeed(store: Store, record: BackgroundTaskRecord, result: str) -> None:
    assert await store.mark_task_succeeded(lease_of(record), result, None)


async def test_a_chain_runs_in_order_and_reads_its_dependencies(store: Store) -> None:
    results = await store.enqueue_workflow(
        _tasks("a", "b", "c"), [TaskDependency(1, 0), TaskDependency(2, 1)]
    )
    a, b, c = (r.task_id for r in results)
    assert [r.record.dependents_waiting for r in results] == [True, True, False]
    [first] = await _claim(store)
    assert first.id == a, "only the root is due"
    await _succeed(store, first, '"A"')
    [second] = await _claim(store)
    assert second.id == b
    assert [(r.id, r.result_json) for r in await store.dependency_records(b)] == [(a, '"A"')]
    await _succeed(store, second, '"B"')
    [third] = await _claim(store)
    assert third.id == c
    assert await _claim(store) == []
    assert [r.id for r in await store.dependency_records(c)] == [b]
    assert await store.dependency_records(a) == []


async def test_a_fan_in_waits_for_every_dependency(store: Store) -> None:
    results = await store.enqueue_workflow(
        _tasks("x", "y", "z", "join"), [TaskDependency(3, i) for i in range(3)]
    )
    join = results[3].task_id
    roots = await _claim(store)
    assert sorted(r.id for r in roots) == [r.task_id for r in results[:3]]
    # Batched successes: the two first settle nothing due; the last makes the join due.
    done = await store.mark_tasks_succeeded_many(
        [TaskCompletion(lease_of(r), f'"{r.kind}"', None) for r in roots[:2]]
    )
    assert done == [True, True]
    assert await _claim(store) == []
    [ok] = await store.mark_tasks_succeeded_many([TaskCompletion(lease_of(roots[2]), "1", None)])
    assert ok
    [joined] = await _claim(store)
    assert joined.id == join
    outcomes = await store.dependency_records(join)
    assert {r.status for r in outcomes} == {TaskStatus.SUCCEEDED}
    assert len(outcomes) == 3


async def test_a_failed_dependency_cancels_dependents_transitively(store: Store) -> None:
    # a -> b -> c (cancel policy), a -> d (run anyway)
    deps = [
        TaskDependency(1, 0),
        TaskDependency(2, 1),
        TaskDependency(3, 0, run_anyway=True),
    ]
    results = await store.enqueue_workflow(_tasks("a", "b", "c", "d"), deps)
    a, b, c, d = (r.task_id for r in results)
    [first] = await _claim(store)
    assert await store.mark_task_failed(
        lease_of(first), error="boom", steps_json=None, manual_retry=True
    )
    assert [await _status(store, i) for i in (a, b, c, d)] == [
        TaskStatus.FAILED,
        TaskStatus.CANCELLED,
        TaskStatus.CANCELLED,
        TaskStatus.PENDING,
    ]
    cancelled = await store.get_task(c)
    assert cancelled is not None and cancelled.last_error is not None
    assert "depends on" in cancelled.last_error
    [run_anyway] = await _claim(store)
    assert run_anyway.id == d
    [outcome] = await store.dependency_records(d)
    assert (outcome.id, outcome.status, outcome.last_error) == (a, TaskStatus.FAILED, "boom")


async def test_a_batch_callback_runs_once_after_every_outcome(store: Store) -> None:
    members = _tasks("m0", "m1", "m2")
    deps = [TaskDependency(3, i, run_anyway=True) for i in range(3)]
    results = await store.enqueue_workflow([*members, *_tasks("callback")], deps)
    callback = results[3].task_id
    claimed = {r.id: r for r in await _claim(store)}
    ids = [r.task_id for r in results[:3]]
    await _succeed(store, claimed[ids[0]], "0")
    assert await store.mark_task_failed(
        lease_of(claimed[ids[1]]), error="no", steps_json=None, manual_retry=False
    )
    assert await _claim(store) == []
    assert await store.mark_task_cancelled(lease_of(claimed[ids[2]]), steps_json=None)
    [run] = await _claim(store)
    assert run.id == callback
    statuses = [r.status for r in await store.dependency_records(callback)]
    assert statuses == [TaskStatus.SUCCEEDED, TaskStatus.FAILED, TaskStatus.CANCELLED]


async def test_cancelling_a_pending_dependency_cancels_its_dependents(store: Store) -> None:
    results = await store.enqueue_workflow(
        _tasks("a", "b", "c"), [TaskDependency(1, 0), TaskDependency(2, 1)]
    )
    ids = [r.task_id for r in results]
    # Cancelling the workflow: every node not finished.
    for task_id in ids:
        await store.cancel_task(task_id)
    assert [await _status(store, i) for i in ids] == [TaskStatus.CANCELLED] * 3
    assert await _claim(store) == []


async def test_a_retry_of_a_dependency_does_not_release_its_dependent(store: Store) -> None:
    results = await store.enqueue_workflow(_tasks("a", "b"), [TaskDependency(1, 0)])
    a, b = (r.task_id for r in results)
    [first] = await _claim(store)
    assert await store.mark_task_retry(
        lease_of(first), delay=timedelta(0), error="again", steps_json=None, count_attempt=True
    )
    [again] = await _claim(store)
    assert again.id == a, "the retried dependency runs again; its dependent still waits"
    await _succeed(store, again, "1")
    [dependent] = await _claim(store)
    assert dependent.id == b


async def test_an_ending_no_lease_wrote_is_settled_by_the_sweep(store: Store) -> None:
    # A lease rescue ends the dependency failed (its only attempt); the sweep that
    # stage_waiting_tasks runs tells the dependent.
    tasks = [NewTask("a", _LANE, max_attempts=1), *_tasks("b")]
    results = await store.enqueue_workflow(tasks, [TaskDependency(1, 0, run_anyway=True)])
    a, b = (r.task_id for r in results)
    await store.claim_due_for_lane(_LANE, 1, "w", timedelta(milliseconds=1))
    clock = store.clock if isinstance(store, InMemoryTaskStore) else store._sql.clock
    assert isinstance(clock, ManualClock)
    await clock.advance(timedelta(seconds=1))
    await asyncio.sleep(0.01)  # a server clock (PostgreSQL, MariaDB) moves on its own
    # The claim rescues a (failed for good); the in-memory store settles at once.
    rescued = await _claim(store)
    assert await _status(store, a) is TaskStatus.FAILED
    await store.stage_waiting_tasks()
    claimed = rescued + await _claim(store)
    assert [r.id for r in claimed] == [b]


async def test_an_invalid_workflow_is_refused_whole(store: Store) -> None:
    with pytest.raises(TaskEnqueueValueError, match="cycle"):
        await store.enqueue_workflow(_tasks("a", "b"), [TaskDependency(1, 0), TaskDependency(0, 1)])
    with pytest.raises(TaskEnqueueValueError, match="not an index"):
        await store.enqueue_workflow(_tasks("a"), [TaskDependency(1, 0)])
    with pytest.raises(TaskEnqueueValueError, match="itself"):
        await store.enqueue_workflow(_tasks("a"), [TaskDependency(0, 0)])
    keyed = NewTask("a", _LANE, dedupe_key="k")
    with pytest.raises(TaskEnqueueValueError, match="dedupe key"):
        await store.enqueue_workflow([keyed], [])
    assert (await store.list_tasks()).items == [], "nothing was written"


@pytest.mark.parametrize(
    "backend",
    [
        pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
        pytest.param("mysql", id="mysql", marks=pytest.mark.mysql),
    ],
)
async def test_the_join_is_made_due_once_when_its_last_two_dependencies_end_at_once(
    engine: AsyncEngine,
) -> None:
    # Two transactions each end one of the join's last two dependencies, both writes
    # done before either settles; the second's settling must wait for the first's lock
    # on the join and then see its ending committed. Exactly one makes the join due.
    await create_background_tasks_table(engine)
    store = BackgroundTaskDbStore(engine)
    results = await store.enqueue_workflow(
        _tasks("x", "y", "join"), [TaskDependency(2, 0), TaskDependency(2, 1)]
    )
    x, y, join = (r.task_id for r in results)
    claimed = {r.id: r for r in await _claim(store)}
    t = store.table
    deps = store._deps
    engine_rc = engine.execution_options(isolation_level="READ COMMITTED")
    first_settled = asyncio.Event()
    made_due: dict[str, list[int]] = {}

    async def end(name: str, task_id: int, *, wait: asyncio.Event | None) -> None:
        async with engine_rc.connect() as conn, conn.begin():
            ended = await conn.execute(
                sa.update(t)
                .where(store._sql.fence(lease_of(claimed[task_id])))
                .values(status=TaskStatus.SUCCEEDED.value, processing_token=None)
            )
            assert ended.rowcount == 1
            if wait is not None:
                await wait.wait()
            made_due[name] = await deps.settle(conn, await store._sql.now(conn), [task_id])
            if wait is None:
                first_settled.set()
                # Still uncommitted: the other transaction is settling (or waiting to).
                await asyncio.sleep(0.2)

    await asyncio.gather(
        end("first", x, wait=None),
        end("second", y, wait=first_settled),
    )
    assert made_due == {"first": [], "second": [join]}
    [joined] = await _claim(store)
    assert joined.id == join
