"""Fixtures of the Forge tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import create_async_engine

from ..conftest import drop_all_tables


@pytest.fixture
async def forge_url(database_url: str) -> AsyncIterator[str]:
    """The backend's URL; every table is dropped afterwards."""
    yield database_url
    engine = create_async_engine(database_url)
    try:
        await drop_all_tables(engine)
    finally:
        await engine.dispose()


@pytest.fixture(
    params=[
        pytest.param("memory", id="memory"),
        pytest.param("sqlite", id="sqlite"),
        pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
        pytest.param("mysql", id="mysql", marks=pytest.mark.mysql),
    ]
)
async def forge_at(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """A forge URL: ``memory://`` and each database (its tables dropped afterwards)."""
    if request.param == "memory":
        yield "memory://"
        return
    if request.param == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp_path / 'forge.db'}"
    else:
        url = str(request.getfixturevalue(f"{request.param}_url"))
    yield url
    engine = create_async_engine(url)
    try:
        await drop_all_tables(engine)
    finally:
        await engine.dispose()
