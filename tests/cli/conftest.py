"""Fixtures for CLI tests: a PostgreSQL URL whose tables are dropped afterwards, loop hygiene."""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import warnings
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


@pytest.fixture(autouse=True)
def _close_idle_event_loop(request: pytest.FixtureRequest) -> None:
    """Close the idle loop pytest-asyncio leaves current after an async test.

    The sync tests here run the CLI, whose ``asyncio.run`` ends with
    ``set_event_loop(None)``: that would orphan the idle loop unclosed and fail the
    next test with a ResourceWarning (seen when tests/demo runs before tests/cli).
    """
    if inspect.iscoroutinefunction(request.function):
        return
    policy = asyncio.get_event_loop_policy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            loop = policy.get_event_loop()
        except RuntimeError:
            return
    if not loop.is_running():
        loop.close()
