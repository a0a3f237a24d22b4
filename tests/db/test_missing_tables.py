"""A store on a database without its tables raises one typed error on every backend.

``TablesMissingError`` names the missing table and says how to create it, whichever
statement met it: SQLAlchemy's path, PostgreSQL's driver-level enqueue, a keyed or a
batched enqueue, the lane table, the lease and catalog stores.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from aster_forge import TablesMissingError
from aster_forge.db import (
    BackgroundTaskDbStore,
    DatabaseOperationError,
    RuntimeLeaseDbStore,
    ScheduledTaskDbStore,
    background_tasks_table,
    ensure_tables,
    runtime_leases_table,
    scheduled_tasks_table,
)
from aster_forge.tasks import NewTask

_HINT = "create the tables with 'aster-forge migrate MODULE:FORGE' or your Alembic migration"


def _task(key: str | None = None) -> NewTask:
    return NewTask(kind="mail", lane="default", payload_json="{}", dedupe_key=key)


def _calls(engine: AsyncEngine) -> list[tuple[str, Callable[[], Awaitable[Any]]]]:
    tasks = BackgroundTaskDbStore(engine)
    leases = RuntimeLeaseDbStore(engine)
    catalog = ScheduledTaskDbStore(engine)
    return [
        ("background_tasks", lambda: tasks.enqueue(_task())),
        ("background_tasks", lambda: tasks.enqueue(_task("k-1"))),
        ("background_tasks", lambda: tasks.enqueue_many([_task(), _task("k-2")])),
        ("background_tasks", lambda: tasks.get_task(1)),
        ("background_tasks", lambda: tasks.claim_due_for_lane("default", 1, "w", timedelta(30))),
        ("background_tasks_lanes", lambda: tasks.pause_lane("default")),
        ("runtime_leases", lambda: leases.try_acquire("shop.scheduler", "w", timedelta(30))),
        ("scheduled_tasks", lambda: catalog.list_scheduled_tasks("shop")),
    ]


async def test_every_store_names_the_missing_table_the_same_way(engine: AsyncEngine) -> None:
    for table, call in _calls(engine):
        with pytest.raises(TablesMissingError) as raised:
            await call()
        error = raised.value
        assert error.tables == (table,)
        assert isinstance(error, DatabaseOperationError)  # existing handlers still catch it
        assert f"table '{table}' does not exist" in str(error)
        assert _HINT in str(error)


async def test_ensure_tables_names_every_missing_table_or_creates_them(
    engine: AsyncEngine,
) -> None:
    metadata = sa.MetaData()
    tasks = background_tasks_table(metadata)
    runtime_leases_table(metadata)
    scheduled_tasks_table(metadata)
    with pytest.raises(TablesMissingError) as raised:
        await ensure_tables(engine, metadata)
    assert raised.value.tables == (
        "background_tasks",
        "background_tasks_deps",
        "background_tasks_lanes",
        "background_tasks_partition_rates",
        "runtime_leases",
        "scheduled_tasks",
    )
    assert str(raised.value).startswith("check tables failed: tables 'background_tasks', ")
    await ensure_tables(engine, metadata, tables=[tasks], create=True)
    with pytest.raises(TablesMissingError) as raised:
        await ensure_tables(engine, metadata)
    assert raised.value.tables == (
        "background_tasks_deps",
        "background_tasks_lanes",
        "background_tasks_partition_rates",
        "runtime_leases",
        "scheduled_tasks",
    )
    await ensure_tables(engine, metadata, tables=[tasks])  # present: nothing raised
    await ensure_tables(engine, metadata, create=True)
    await ensure_tables(engine, metadata, create=True)  # idempotent
    await ensure_tables(engine, metadata)
    created = await BackgroundTaskDbStore(engine, table=tasks).enqueue(_task())
    assert created.created
