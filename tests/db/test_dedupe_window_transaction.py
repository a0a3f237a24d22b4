"""Dedupe windows in the product's transaction: the key moves only if it commits."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from aster_forge import TaskStatus
from aster_forge.db import BackgroundTaskDbStore, background_tasks_table
from aster_forge.tasks import NewTask, TaskDedupeKey

_PENDING = frozenset({TaskStatus.PENDING})


async def test_a_window_in_your_transaction(database_url: str) -> None:
    engine = create_async_engine(database_url)
    table = background_tasks_table(sa.MetaData(), f"dedupe_tx_{uuid.uuid4().hex[:8]}")
    async with engine.begin() as conn:
        await conn.run_sync(table.metadata.create_all)
    store = BackgroundTaskDbStore(engine, table=table)
    try:
        key = "order:1"
        holder = (await store.enqueue(NewTask("k", "tx", dedupe_key=key))).record
        (claimed,) = await store.claim_due_for_lane("tx", 10, "test", timedelta(minutes=5))
        assert claimed.id == holder.id
        windowed = NewTask("k", "tx", dedupe_key=TaskDedupeKey(key, held_while=_PENDING))

        async with engine.connect() as conn:
            await conn.begin()
            (made,) = await store.enqueue_many([windowed], connection=conn)
            assert made.created
            await conn.rollback()
        kept = await store.get_task(holder.id)
        assert kept is not None and kept.dedupe_key == key, "a rolled-back enqueue took the key"
        assert len((await store.list_tasks(lane="tx")).items) == 1

        async with engine.begin() as conn:
            (made,) = await store.enqueue_many([windowed], connection=conn)
        assert made.created and made.record.dedupe_key == key
        old = await store.get_task(holder.id)
        assert old is not None and old.dedupe_key is None and old.status is TaskStatus.RUNNING

        # Replace in your transaction: the pending holder takes the new payload on commit.
        replacing = NewTask(
            "k", "tx", payload_json='{"v": 2}', dedupe_key=TaskDedupeKey(key, replace=True)
        )
        async with engine.begin() as conn:
            (hit,) = await store.enqueue_many([replacing], connection=conn)
        assert not hit.created and hit.record.id == made.record.id
        stored = await store.get_task(made.record.id)
        assert stored is not None and json.loads(stored.payload_json) == {"v": 2}
    finally:
        async with engine.begin() as conn:
            await conn.run_sync(table.metadata.drop_all)
        await engine.dispose()
