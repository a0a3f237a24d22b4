"""Fixtures of the Forge tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

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
