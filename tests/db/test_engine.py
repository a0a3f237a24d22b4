"""``create_database_engine``: each backend's connection defaults, on the real servers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.util import greenlet_spawn

from aster_forge.db import (
    BackgroundTaskDbStore,
    create_background_tasks_table,
    create_database_engine,
)
from aster_forge.db._engine import LAST_CHECKOUT, MAX_IDLE
from aster_forge.db.errors import InvalidDatabaseUrlError
from aster_forge.tasks import NewTask

from ..conftest import drop_all_tables
from ._pg_driver_support import wait_closed


@pytest.fixture
async def server_engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    """``create_database_engine`` on the backend's database; tables dropped afterwards."""
    engine = create_database_engine(database_url)
    try:
        yield engine
    finally:
        await drop_all_tables(engine)
        await engine.dispose()


async def _pooled_session(engine: AsyncEngine) -> tuple[Any, int]:
    """Check a connection out, read its server session id, and put it back in the pool."""
    connection = await engine.raw_connection()
    try:
        driver: Any = connection.driver_connection
        if engine.dialect.name == "postgresql":
            session = int(await driver.fetchval("SELECT pg_backend_pid()"))
        else:
            async with driver.cursor() as cursor:
                await cursor.execute("SELECT CONNECTION_ID()")
                session = int((await cursor.fetchone())[0])
    finally:
        await greenlet_spawn(connection.close)
    return driver, session


async def _end_session(url: str, engine: AsyncEngine, session: int) -> None:
    """End ``session`` from another connection, as a restart or a failover does."""
    admin = create_async_engine(url, isolation_level="AUTOCOMMIT", poolclass=sa.NullPool)
    try:
        async with admin.connect() as conn:
            if engine.dialect.name == "postgresql":
                await conn.execute(sa.text(f"SELECT pg_terminate_backend({session})"))
            else:
                await conn.execute(sa.text(f"KILL {session}"))
    finally:
        await admin.dispose()


@pytest.mark.parametrize("backend", ["postgres", "mysql"], indirect=True)
async def test_a_pooled_connection_the_server_ended_is_replaced_at_checkout(
    server_engine: AsyncEngine, database_url: str
) -> None:
    await create_background_tasks_table(server_engine)
    store = BackgroundTaskDbStore(server_engine)
    await store.enqueue(NewTask("k", "default", payload_json="1"))
    driver, session = await _pooled_session(server_engine)

    await _end_session(database_url, server_engine, session)
    if server_engine.dialect.name == "postgresql":
        await wait_closed(driver)

    # The next enqueue gets a new session, not an error.
    result = await store.enqueue(NewTask("k", "default", payload_json="2"))
    assert result.created
    _, replacement = await _pooled_session(server_engine)
    assert replacement != session
    page = await store.list_tasks(limit=10)
    assert sorted(record.payload_json for record in page.items) == ["1", "2"]


@pytest.mark.postgres
async def test_postgres_checkout_sends_nothing_to_the_server(postgres_url: str) -> None:
    # pool_pre_ping would send BEGIN, a ping and ROLLBACK on every checkout.
    engine = create_database_engine(postgres_url)
    try:
        driver, _ = await _pooled_session(engine)
        sent: list[str] = []
        driver.add_query_logger(lambda record: sent.append(record.query))
        connection = await engine.raw_connection()
        assert connection.driver_connection is driver  # the pooled session, reused
        await greenlet_spawn(connection.close)
        await asyncio.sleep(0)  # asyncpg calls its query loggers in the next loop turn
        assert sent == []
    finally:
        await engine.dispose()


@pytest.mark.postgres
async def test_postgres_a_connection_unused_for_five_minutes_is_replaced_at_checkout(
    postgres_url: str,
) -> None:
    # A NAT or a load balancer may have dropped it without a word: no statement on it.
    engine = create_database_engine(postgres_url)
    try:
        driver, session = await _pooled_session(engine)
        connection = await engine.raw_connection()
        assert connection.driver_connection is driver  # within the limit: reused
        connection.info[LAST_CHECKOUT] -= MAX_IDLE + 1  # its checkout, five minutes ago
        await greenlet_spawn(connection.close)
        _, replacement = await _pooled_session(engine)
        assert replacement != session
    finally:
        await engine.dispose()


async def test_sqlite_uses_wal_and_waits_for_the_write_lock(tmp_path: Path) -> None:
    engine = create_database_engine(f"sqlite:///{tmp_path / 'app.db'}")
    try:
        async with engine.connect() as conn:
            mode = (await conn.exec_driver_sql("PRAGMA journal_mode")).scalar_one()
            timeout = (await conn.exec_driver_sql("PRAGMA busy_timeout")).scalar_one()
        assert (mode, timeout) == ("wal", 10_000)
    finally:
        await engine.dispose()


def test_a_bad_url_is_a_typed_error() -> None:
    with pytest.raises(InvalidDatabaseUrlError):
        create_database_engine("not a url")
