"""Fixtures: a task store on the in-memory store and on SQLite, PostgreSQL and MariaDB.

Import the three ``*_fixture`` functions into a test module to run its tests
on all four (they shadow the shared ``backend``/``database_url`` fixtures there only).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import create_async_engine

from aster_forge.db import BackgroundTaskDbStore, create_background_tasks_table
from aster_forge.testing import InMemoryTaskStore
from tests.conftest import drop_all_tables

__all__ = ["AdminStore", "backend_fixture", "database_url_fixture", "store_fixture"]


@pytest.fixture(
    name="backend",
    params=[
        pytest.param("memory", id="memory"),
        pytest.param("sqlite", id="sqlite"),
        pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
        pytest.param("mysql", id="mysql", marks=pytest.mark.mysql),
    ],
)
def backend_fixture(request: pytest.FixtureRequest) -> str:
    """The in-memory store beside the three databases (shadows the shared fixture)."""
    return str(request.param)


@pytest.fixture(name="database_url")
def database_url_fixture(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> str | None:
    """No URL for the in-memory store (shadows the shared fixture)."""
    if backend == "memory":
        return None
    if backend == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'tasks.db'}"
    return str(request.getfixturevalue("postgres_url" if backend == "postgres" else "mysql_url"))


AdminStore = BackgroundTaskDbStore | InMemoryTaskStore
"""The stores the fixture yields (both offer the operator queries)."""


@pytest.fixture(name="store")
async def store_fixture(database_url: str | None) -> AsyncIterator[AdminStore]:
    """A fresh task store on :func:`backend_fixture` (tables dropped afterwards)."""
    if database_url is None:
        yield InMemoryTaskStore()
        return
    engine = create_async_engine(database_url)
    try:
        await create_background_tasks_table(engine)
        yield BackgroundTaskDbStore(engine)
    finally:
        await drop_all_tables(engine)
        await engine.dispose()
