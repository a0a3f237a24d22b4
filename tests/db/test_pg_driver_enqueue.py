"""PostgreSQL enqueue on the asyncpg connection: the records SQLAlchemy reads back.

The enqueue statements run on the asyncpg connection and their rows are built into
records positionally. Every way a record comes back (inserted by the one-task or the
batch statement, an existing row holding the key, a key committed by a racing
transaction and read in a second statement) must equal the row as the SQLAlchemy
path reads it, field by field and type by type, datetimes in UTC.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from aster_forge import EnqueueResult
from aster_forge.db import BackgroundTaskDbStore
from aster_forge.db._postgres import PgEnqueueStatement
from aster_forge.runtime._lease import NEVER_EXPIRES
from aster_forge.tasks import NewTask

from ._pg_driver_support import assert_same, pg_engine, read_back, with_offset_codec

pytestmark = pytest.mark.postgres


@pytest.fixture(params=[False, True], ids=["default-codec", "offset-codec"])
async def codec_engine(
    request: pytest.FixtureRequest, postgres_url: str
) -> AsyncIterator[AsyncEngine]:
    """The task table's engine, its connections decoding timestamps at +02:00 or not."""
    async with pg_engine(postgres_url) as engine:
        if request.param:
            await with_offset_codec(engine)
        yield engine


async def _assert_read_back(
    engine: AsyncEngine, store: BackgroundTaskDbStore, results: list[EnqueueResult]
) -> None:
    records = [result.record for result in results]
    stored = {
        record.id: record for record in await read_back(engine, store, [r.id for r in records])
    }
    for record in records:
        assert_same(record, stored[record.id])


async def test_enqueued_and_existing_records_are_what_sqlalchemy_reads_back(
    codec_engine: AsyncEngine,
) -> None:
    engine = codec_engine
    store = BackgroundTaskDbStore(engine)
    past = datetime.now(UTC) - timedelta(minutes=5)
    # The one-task statement, then the batch statement with a key hit among new rows.
    first = await store.enqueue(
        NewTask("k", "media", payload_json="0", dedupe_key="one", run_at=past)
    )
    batch = await store.enqueue_many(
        [
            NewTask("k", "media", payload_json="1", dedupe_key="one"),
            NewTask("k", "media", payload_json="2", steps_json="[]", priority=3),
            NewTask("k", "media", payload_json="3", delay=timedelta(hours=1)),
        ]
    )
    again = await store.enqueue(NewTask("k", "media", payload_json="4", dedupe_key="one"))
    results = [first, *batch, again]
    assert [r.created for r in results] == [True, False, True, True, False]
    assert {r.record.id for r in results if not r.created} == {first.record.id}
    await _assert_read_back(engine, store, results)


async def test_tasks_without_a_key_are_built_as_their_rows_read_back(
    codec_engine: AsyncEngine,
) -> None:
    # The plain insert returns only the ids and the times; the rest comes from the
    # requests, matched to the rows in input order (one at a time, then as one batch).
    engine = codec_engine
    store = BackgroundTaskDbStore(engine)
    soon = datetime.now(UTC) + timedelta(minutes=5)
    tasks = [
        NewTask("k", "media", payload_json="1"),
        NewTask("k", "media", payload_json='{"a": [1, 2]}', steps_json="[]", priority=-7),
        NewTask("k", "other", payload_json="3", run_at=soon, max_attempts=2),
        NewTask("j", "media", payload_json="4", delay=timedelta(hours=1)),
    ]
    one_by_one = [await store.enqueue(task) for task in tasks]
    batch = await store.enqueue_many(tasks)
    for results in (one_by_one, batch):
        assert all(r.created for r in results)
        assert [r.record.payload_json for r in results] == [t.payload_json for t in tasks]
        assert results[2].record.run_at == soon
        await _assert_read_back(engine, store, results)
    # Every column but the payload shared by the batch: each goes as one value.
    plain = await store.enqueue_many([NewTask("k", "media", payload_json=str(n)) for n in range(3)])
    await _assert_read_back(engine, store, plain)
    assert {r.record.priority for r in plain} == {0}
    assert all(r.record.run_at == r.record.created_at for r in plain)


async def test_values_every_task_of_a_batch_shares_are_stored_on_every_row(
    codec_engine: AsyncEngine,
) -> None:
    # A column the whole batch shares goes as one value; the others as arrays.
    engine = codec_engine
    store = BackgroundTaskDbStore(engine)
    at = datetime.now(UTC) + timedelta(hours=2)
    batches = [
        [
            NewTask(
                "k",
                "media",
                payload_json="1",
                steps_json="[]",
                run_at=at,
                priority=9,
                max_attempts=2,
            )
            for _ in range(3)
        ],
        [NewTask("k", "media", payload_json="1", delay=timedelta(days=1)) for _ in range(2)],
        [NewTask("k", "media", payload_json=str(n), max_attempts=n + 1) for n in range(3)],
        [
            NewTask("k", "media", payload_json="1", run_at=at if n else None, priority=-1)
            for n in range(3)
        ],
    ]
    for tasks in batches:
        results = await store.enqueue_many(tasks)
        await _assert_read_back(engine, store, results)
        for task, result in zip(tasks, results, strict=True):
            record = result.record
            assert (record.kind, record.lane, record.payload_json) == (
                "k",
                "media",
                task.payload_json,
            )
            assert (record.steps_json, record.max_attempts, record.priority) == (
                task.steps_json,
                task.max_attempts,
                task.priority,
            )
            if task.run_at is not None:
                assert record.run_at == task.run_at
            else:
                assert record.run_at - record.created_at == task.delay


async def test_a_batch_result_read_later_is_its_own_row_although_the_list_was_reused(
    codec_engine: AsyncEngine,
) -> None:
    # A batch's results share what builds their records; the caller's list is not it.
    engine = codec_engine
    store = BackgroundTaskDbStore(engine)
    tasks = [NewTask("k", "media", payload_json=str(n)) for n in range(3)]
    results = await store.enqueue_many(tasks)
    tasks[:] = [NewTask("j", "other", payload_json="9")] * 3
    assert [r.record.payload_json for r in results] == ["0", "1", "2"]
    assert [r.record.id for r in results] == [r.task_id for r in results]
    await _assert_read_back(engine, store, results)


async def test_a_delay_past_the_calendar_saturates_on_every_enqueue_statement(
    postgres_url: str,
) -> None:
    # Default codec only: the +02:00 test codec cannot represent the year 9999 itself.
    async with pg_engine(postgres_url) as engine:
        store = BackgroundTaskDbStore(engine)
        far = [NewTask("k", "media", delay=timedelta.max, dedupe_key=key) for key in (None, "far")]
        results = [await store.enqueue(task) for task in far]
        results += await store.enqueue_many([far[0], far[0]])
        assert [r.record.run_at for r in results] == [NEVER_EXPIRES] * 4
        await _assert_read_back(engine, store, results)


def test_a_column_null_for_every_task_is_sent_as_no_values() -> None:
    # unnest pads it with NULLs (the batch test above reads such rows back).
    params = PgEnqueueStatement.parameters([NewTask("k", "l"), NewTask("k", "l", dedupe_key="a")])
    assert (params["steps_json"], params["run_at"]) == ([], [])
    assert params["dedupe_key"] == [None, "a"] and params["keys"] == ["a"]
    assert len(params["kind"]) == len(params["delay"]) == 2


async def test_a_key_committed_by_a_racing_transaction_is_read_back_whole(
    codec_engine: AsyncEngine,
) -> None:
    engine = codec_engine
    store = BackgroundTaskDbStore(engine)
    async with engine.connect() as rival:
        # Uncommitted: our insert waits on the key, and our statement's snapshot,
        # taken before the rival commits, cannot see the rival's row.
        won = await store.enqueue(
            NewTask("k", "media", payload_json='"rival"', dedupe_key="race"), connection=rival
        )
        racing = asyncio.create_task(
            store.enqueue_many(
                [
                    NewTask("k", "media", payload_json='"ours"', dedupe_key="race"),
                    NewTask("k", "media", payload_json='"other"'),
                ]
            )
        )
        await _until_waiting_on_a_lock(engine, racing)
        await rival.commit()
    lost, other = await racing
    assert (lost.created, other.created) == (False, True)
    assert lost.record.id == won.record.id and lost.record.payload_json == '"rival"'
    await _assert_read_back(engine, store, [lost, other])


async def _until_waiting_on_a_lock(engine: AsyncEngine, racing: asyncio.Task[object]) -> None:
    query = sa.text(
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE wait_event_type = 'Lock' AND datname = current_database()"
    )
    async with engine.connect() as admin:
        # Autocommit: within one transaction pg_stat_activity stays a single snapshot.
        await admin.execution_options(isolation_level="AUTOCOMMIT")
        for _ in range(500):
            if racing.done():
                racing.result()  # raises what went wrong
                raise AssertionError("the enqueue finished without waiting on the key")
            if (await admin.execute(query)).scalar_one():
                return
            await asyncio.sleep(0.01)
    raise AssertionError("the enqueue never waited on the rival's key")
