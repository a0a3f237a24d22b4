"""The partial dedupe key index: older full indexes keep working, the lookups use it."""

from __future__ import annotations

import re
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from aster_forge.db import (
    BackgroundTaskDbStore,
    background_tasks_table,
    create_background_tasks_table,
)
from aster_forge.db._postgres import PgEnqueueStatement
from aster_forge.tasks import NewTask

_INDEX = "ux_background_tasks_dedupe_key"


async def _key_index(engine: AsyncEngine) -> dict[str, Any]:
    async with engine.connect() as conn:
        indexes = await conn.run_sync(lambda sync: sa.inspect(sync).get_indexes("background_tasks"))
    (index,) = [index for index in indexes if index["name"] == _INDEX]
    return dict(index)


def _predicate(index: dict[str, Any]) -> str | None:
    options = index.get("dialect_options", {})
    where = options.get("postgresql_where") or options.get("sqlite_where")
    return None if where is None else str(where)


async def _dedupes(store: BackgroundTaskDbStore, key: str) -> None:
    first = await store.enqueue(NewTask("k", "l", payload_json="1", dedupe_key=key))
    again = await store.enqueue(NewTask("k", "l", payload_json="2", dedupe_key=key))
    assert first.created and not again.created
    assert again.record.id == first.record.id and again.record.payload_json == "1"
    batch = await store.enqueue_many(
        [
            NewTask("k", "l", payload_json="3", dedupe_key=key),
            NewTask("k", "l", payload_json="4", dedupe_key=f"{key}-new"),
            NewTask("k", "l", payload_json="5", dedupe_key=f"{key}-new"),
            NewTask("k", "l", payload_json="6"),
            NewTask("k", "l", payload_json="7"),
        ]
    )
    assert [result.created for result in batch] == [False, True, False, True, True]
    assert batch[0].record.id == first.record.id
    assert batch[2].record.id == batch[1].record.id


async def test_the_key_index_is_partial_where_the_database_allows(
    engine: AsyncEngine, backend: str
) -> None:
    await create_background_tasks_table(engine)
    index = await _key_index(engine)
    assert index["unique"]
    if backend == "mysql":
        assert _predicate(index) is None  # MariaDB has no partial indexes
    else:
        assert _predicate(index) is not None and "dedupe_key IS NOT NULL" in str(_predicate(index))
    store = BackgroundTaskDbStore(engine)
    await _dedupes(store, "partial")


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
async def test_key_lookups_can_use_the_partial_index(engine: AsyncEngine) -> None:
    await create_background_tasks_table(engine)
    store = BackgroundTaskDbStore(engine)
    await store.enqueue_many(
        [NewTask("k", "l", dedupe_key=f"key-{n}" if n % 2 else None) for n in range(2_000)]
    )
    pg = PgEnqueueStatement(
        background_tasks_table(sa.MetaData()), engine.dialect, channel="aster_forge_tasks"
    )
    keys = ["key-1", "key-3"]
    task = NewTask("k", "l", dedupe_key="key-1")
    # EXPLAIN plans the statements without running them (nothing is inserted).
    lookups = {
        "by key": (pg.by_key_sql, [keys]),
        "one task": (pg.single_sql, pg.single_arguments(task)),
        "a batch": (pg.sql, pg.arguments([task, NewTask("k", "l", dedupe_key="key-3")])),
    }
    async with engine.connect() as conn:
        await conn.execute(sa.text("ANALYZE background_tasks"))
        # Without a usable index the planner has to scan the table, whatever it costs.
        await conn.execute(sa.text("SET enable_seqscan = off"))
        await conn.execute(sa.text("SET plan_cache_mode = force_generic_plan"))
        driver = (await conn.get_raw_connection()).driver_connection
        assert driver is not None
        for what, (sql, arguments) in lookups.items():
            statement = await driver.prepare(f"EXPLAIN {sql}")
            plan = "\n".join(row[0] for row in await statement.fetch(*arguments))
            scans = re.findall(rf"Scan (?:using|on) {_INDEX}\b", plan)
            assert scans, f"{what}: the key lookup does not use the key index:\n{plan}"
        await conn.rollback()
    stored = await store.enqueue(NewTask("k", "l", dedupe_key="key-1"))
    assert not stored.created
