"""Fixtures for CLI tests: a PostgreSQL URL whose tables are dropped afterwards, loop hygiene."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Iterator

import pytest
from sqlalchemy.ext.asyncio import create_async_engine

from tests.conftest import drop_all_tables


async def _drop(url: str) -> None:
    engine = create_async_engine(url)
    try:
        await drop_all_tables(engine)
    finally:
        await engine.dispose()


@pytest.fixture
def demo_postgres_url(postgres_url: str) -> Iterator[str]:
    """The session's PostgreSQL database, emptied after the test."""
    yield postgres_url
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, _drop(postgres_url)).result()
