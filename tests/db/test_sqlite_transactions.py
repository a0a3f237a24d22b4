"""SQLite transactions: the store's ``BEGIN IMMEDIATE`` ... ``COMMIT`` and the pool's reset.

A store transaction whose body sends only driver-level statements commits on the
driver; one that ran SQLAlchemy statements commits through SQLAlchemy. The engine of
:func:`create_database_engine` rolls a connection back when it goes back to the pool
only if a transaction is open on it. These tests count the driver's rollbacks and read
what another connection sees.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiosqlite
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from aster_forge.db import DatabaseIntegrityError, create_database_engine
from aster_forge.db._sqlite import SqliteSql, driver_connection
from aster_forge.db._tables import background_tasks_table
from aster_forge.db._tasks_sql import TaskSql
from aster_forge.testing import ManualClock


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    """The product's SQLite engine, with a deferred foreign key to fail a ``COMMIT``."""
    engine = create_database_engine(f"sqlite+aiosqlite:///{tmp_path / 'app.db'}")

    @sa.event.listens_for(engine.sync_engine, "connect")
    def _foreign_keys(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    async with engine.begin() as conn:
        await conn.exec_driver_sql("CREATE TABLE parent (id INTEGER PRIMARY KEY)")
        await conn.exec_driver_sql(
            "CREATE TABLE child (pid INTEGER REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED)"
        )
    try:
        yield engine
    finally:
        await engine.dispose()


@pytest.fixture
def rollbacks(monkeypatch: pytest.MonkeyPatch) -> list[None]:
    """One entry per rollback the driver was asked for."""
    calls: list[None] = []
    original = aiosqlite.Connection.rollback

    async def rollback(self: aiosqlite.Connection) -> None:
        calls.append(None)
        await original(self)

    monkeypatch.setattr(aiosqlite.Connection, "rollback", rollback)
    return calls


def _sql(engine: AsyncEngine) -> TaskSql:
    return TaskSql(engine, background_tasks_table(sa.MetaData()), ManualClock(), SqliteSql())


async def _insert_on_the_driver(conn: AsyncConnection, parent: int) -> Any:
    """Begin on the driver and insert ``parent``: SQLAlchemy does not know a
    transaction is open. Returns the driver connection."""
    driver = await driver_connection(conn)
    await driver.execute("BEGIN IMMEDIATE")
    await driver.execute("INSERT INTO parent (id) VALUES (?)", (parent,))
    return driver


async def _parents(engine: AsyncEngine) -> list[int]:
    # SQLAlchemy begins (and at the end rolls back) a transaction for this read.
    async with engine.connect() as conn:
        rows = await conn.exec_driver_sql("SELECT id FROM parent ORDER BY id")
        return [row[0] for row in rows]


async def test_a_connection_returned_with_a_transaction_open_is_rolled_back(
    engine: AsyncEngine, rollbacks: list[None]
) -> None:
    async with engine.connect() as conn:
        await _insert_on_the_driver(conn, 1)
        assert not conn.in_transaction()
    assert len(rollbacks) == 1
    # The pool's connection (the same one) holds no write and no lock: a write goes through.
    async with engine.begin() as conn:
        await conn.exec_driver_sql("INSERT INTO parent (id) VALUES (2)")
    assert await _parents(engine) == [2]


async def test_a_connection_returned_with_nothing_open_is_not_rolled_back(
    engine: AsyncEngine, rollbacks: list[None]
) -> None:
    async with engine.connect() as conn:
        driver = await _insert_on_the_driver(conn, 1)
        await driver.commit()
    async with engine.connect():
        pass  # checked out and back in with nothing begun
    assert rollbacks == []
    assert await _parents(engine) == [1]


async def test_a_driver_level_body_is_committed_on_the_driver(
    engine: AsyncEngine, rollbacks: list[None]
) -> None:
    async def body(conn: AsyncConnection) -> None:
        driver = await driver_connection(conn)
        await driver.execute("INSERT INTO parent (id) VALUES (7)")

    await _sql(engine).run("insert a parent", body)
    assert rollbacks == []
    assert await _parents(engine) == [7]


async def test_a_body_with_sqlalchemy_statements_is_committed_through_sqlalchemy(
    engine: AsyncEngine, rollbacks: list[None]
) -> None:
    async def body(conn: AsyncConnection) -> None:
        await conn.exec_driver_sql("INSERT INTO parent (id) VALUES (8)")
        assert conn.in_transaction()

    await _sql(engine).run("insert a parent", body)
    assert rollbacks == []
    assert await _parents(engine) == [8]


async def test_a_failed_commit_is_a_typed_error_and_leaves_nothing_behind(
    engine: AsyncEngine,
) -> None:
    async def body(conn: AsyncConnection) -> None:
        driver = await driver_connection(conn)
        await driver.execute("INSERT INTO parent (id) VALUES (3)")
        await driver.execute("INSERT INTO child (pid) VALUES (42)")  # fails at COMMIT

    with pytest.raises(DatabaseIntegrityError):
        await _sql(engine).run("insert an orphan", body)
    assert await _parents(engine) == []

    async def next_body(conn: AsyncConnection) -> None:
        driver = await driver_connection(conn)
        await driver.execute("INSERT INTO parent (id) VALUES (4)")

    await _sql(engine).run("insert a parent", next_body)  # the write lock was released
    assert await _parents(engine) == [4]
