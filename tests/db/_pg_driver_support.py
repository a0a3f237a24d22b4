"""Helpers for the tests of statements run on the asyncpg connection itself.

What those statements return must be what the SQLAlchemy path reads back: equal field
by field, of the same types, datetimes in UTC itself, also when a connection decodes
``timestamptz`` at another offset (:func:`offset_timestamps`).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from aster_forge import BackgroundTaskRecord
from aster_forge.db import BackgroundTaskDbStore, create_background_tasks_table
from aster_forge.db._tables import CORE_COLUMNS, record_from_row

EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
_PLUS_TWO = timezone(timedelta(hours=2))

RECORD_FIELDS = [field.name for field in dataclasses.fields(BackgroundTaskRecord)]
"""The record's field names, in order (the driver path builds records positionally)."""


@asynccontextmanager
async def pg_engine(postgres_url: str, **kwargs: Any) -> AsyncIterator[AsyncEngine]:
    """An engine with the task table created, dropped again afterwards."""
    engine = create_async_engine(postgres_url, **kwargs)
    try:
        await create_background_tasks_table(engine)
        yield engine
    finally:
        async with engine.begin() as conn:
            await conn.execute(sa.text("DROP TABLE IF EXISTS background_tasks_lanes"))
            await conn.execute(sa.text("DROP TABLE IF EXISTS background_tasks_deps"))
            await conn.execute(sa.text("DROP TABLE IF EXISTS background_tasks"))
        await engine.dispose()


async def read_back(
    engine: AsyncEngine, store: BackgroundTaskDbStore, ids: list[int]
) -> list[BackgroundTaskRecord]:
    """The rows ``ids`` as the SQLAlchemy path reads them (ordered by id)."""
    t = store.table
    query = sa.select(*[t.c[name] for name in CORE_COLUMNS]).where(t.c.id.in_(ids)).order_by(t.c.id)
    async with engine.connect() as conn:
        return [record_from_row(row) for row in await conn.execute(query)]


def assert_same(got: BackgroundTaskRecord, want: BackgroundTaskRecord) -> None:
    """Equal field by field, datetimes in UTC itself (aware datetimes compare across zones)."""
    for name in RECORD_FIELDS:
        value, expected = getattr(got, name), getattr(want, name)
        assert (name, value) == (name, expected)
        assert type(value) is type(expected), name
        if isinstance(value, datetime):
            assert value.tzinfo is UTC, (name, value)


def offset_timestamps(dbapi_connection: Any, _record: Any) -> None:
    """A ``connect`` listener: a codec that decodes ``timestamptz`` at +02:00."""

    async def install(conn: Any) -> None:
        await conn.set_type_codec(
            "timestamptz",
            schema="pg_catalog",
            format="tuple",
            encoder=lambda value: ((value - EPOCH) // timedelta(microseconds=1),),
            decoder=lambda value: (EPOCH + timedelta(microseconds=value[0])).astimezone(_PLUS_TWO),
        )

    dbapi_connection.run_async(install)


async def with_offset_codec(engine: AsyncEngine) -> None:
    """Every new connection of ``engine`` gets :func:`offset_timestamps`."""
    sa.event.listen(engine.sync_engine, "connect", offset_timestamps)
    await engine.dispose()  # connections made before the listener are dropped


async def wait_for_lock_wait(admin: AsyncConnection, what: str) -> None:
    """Until some backend of this database waits on a lock (``what`` blocked behind us).

    ``admin`` may be inside a transaction: PostgreSQL then serves ``pg_stat_activity``
    from a snapshot taken at its first read, so each poll clears it first.
    """
    query = sa.text(
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE wait_event_type = 'Lock' AND datname = current_database()"
    )
    for _ in range(500):
        await admin.execute(sa.text("SELECT pg_stat_clear_snapshot()"))
        if (await admin.execute(query)).scalar_one():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{what} never blocked on the lock")


async def wait_closed(driver: Any, *, deadline: float = 10.0) -> None:
    """Wait until asyncpg has seen the server close ``driver``'s socket (bounded)."""
    loop = asyncio.get_running_loop()
    give_up = loop.time() + deadline
    while not driver.is_closed():
        assert loop.time() < give_up, "the server did not close the terminated session"
        await asyncio.sleep(0.01)
