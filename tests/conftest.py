"""Shared fixtures: real database URLs for SQLite, PostgreSQL and MariaDB.

PostgreSQL and MariaDB tests use a fresh database per test session (so concurrent
runs never collide) and drop every table after each test. Locally they skip when
the server is absent; under ``CI=true`` they fail instead, so CI never silently
skips the real databases.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import os
import uuid
import warnings
from collections.abc import AsyncIterator, Generator, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import MetaData, text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from ._tracing import clear_tracer_provider

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}

DEFAULT_POSTGRES_URL = "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
DEFAULT_MYSQL_URL = "mysql+aiomysql://root@127.0.0.1:3306/test"

BACKENDS = ["sqlite", "postgres", "mysql"]


def _unavailable(what: str, reason: str) -> None:
    if IN_CI:
        pytest.fail(f"{what} is unavailable under CI=true: {reason}", pytrace=False)
    pytest.skip(f"{what} unavailable: {reason}")


def _admin(url: str, statements: list[str]) -> None:
    # Run on a private thread: asyncio.run() here would clobber pytest-asyncio's loop.
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="af-admin") as pool:
        pool.submit(asyncio.run, _admin_async(url, statements)).result()


async def _admin_async(url: str, statements: list[str]) -> None:
    engine = create_async_engine(url, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            for statement in statements:
                await conn.execute(text(statement))
    finally:
        await engine.dispose()


def _session_database(env_var: str, default: str, what: str) -> Iterator[str]:
    base = os.environ.get(env_var, default)
    name = f"af_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    quote = '"' if base.startswith("postgresql") else "`"
    try:
        _admin(base, [f"CREATE DATABASE {quote}{name}{quote}"])
    except Exception as exc:  # pragma: no cover - depends on the machine
        _unavailable(what, f"{type(exc).__name__}: {exc}")
    url = make_url(base).set(database=name).render_as_string(hide_password=False)
    try:
        yield url
    finally:
        drop = f"DROP DATABASE IF EXISTS {quote}{name}{quote}"
        if base.startswith("postgresql"):
            drop += " WITH (FORCE)"
        _admin(base, [drop])


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """URL of a fresh PostgreSQL database for this test session."""
    yield from _session_database(
        "ASTER_FORGE_TEST_POSTGRES_URL", DEFAULT_POSTGRES_URL, "PostgreSQL"
    )


@pytest.fixture(scope="session")
def mysql_url() -> Iterator[str]:
    """URL of a fresh MariaDB/MySQL database for this test session."""
    yield from _session_database("ASTER_FORGE_TEST_MYSQL_URL", DEFAULT_MYSQL_URL, "MariaDB")


@pytest.fixture(
    params=[
        pytest.param("sqlite", id="sqlite"),
        pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
        pytest.param("mysql", id="mysql", marks=pytest.mark.mysql),
    ]
)
def backend(request: pytest.FixtureRequest) -> str:
    """The name of the database backend this test runs on."""
    return str(request.param)


@pytest.fixture
def database_url(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database URL for :func:`backend` (SQLite: a fresh file in ``tmp_path``)."""
    if backend == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'aster-forge-test.db'}"
    fixture = "postgres_url" if backend == "postgres" else "mysql_url"
    return str(request.getfixturevalue(fixture))


async def drop_all_tables(engine: AsyncEngine) -> None:
    """Drop every table in the engine's database (test cleanup)."""
    async with engine.begin() as conn:
        metadata = MetaData()
        await conn.run_sync(metadata.reflect)
        await conn.run_sync(metadata.drop_all)


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    """An async engine on :func:`database_url`; every table is dropped afterwards."""
    eng = create_async_engine(database_url)
    try:
        yield eng
    finally:
        await drop_all_tables(eng)
        await eng.dispose()


@pytest.fixture(autouse=True)
def _no_tracer_provider_left() -> Iterator[None]:
    """Clear an OpenTelemetry provider a test or a docs example set (see tests/_tracing)."""
    yield
    clear_tracer_provider()


@pytest.fixture(autouse=True)
def _close_idle_event_loop(request: pytest.FixtureRequest) -> None:
    """Close the idle loop pytest-asyncio leaves current before a sync test runs.

    A sync test that ends in ``asyncio.run`` (the CLI, docs examples) calls
    ``set_event_loop(None)``, which would orphan that loop unclosed; its ResourceWarning
    then fails whichever later test happens to trigger garbage collection.
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
    if not loop.is_running() and not loop.is_closed():
        loop.close()


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(
    fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest
) -> Generator[None, object, object]:
    """End what a test left running before pytest-asyncio closes the test's loop."""
    result = yield
    if fixturedef.argname == "event_loop" and isinstance(result, asyncio.AbstractEventLoop):
        loop = result
        # Registered after the fixture's own teardown: runs before it closes the loop.
        fixturedef.addfinalizer(lambda: _end_leftover_tasks(loop))
    return result


def _end_leftover_tasks(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel the loop's pending tasks and wait for them, as ``asyncio.run`` does.

    pytest-asyncio closes a test's loop with them still pending. One with a statement
    on the wire (a store's trailing NOTIFY, say) is then closed by the garbage collector
    in some later test, its connection never closed: a ResourceWarning, and an error,
    in whichever test happens to collect it.
    """
    if loop.is_closed():
        return

    async def end() -> None:
        # Again while cancelling one starts others (a shielded release).
        for _ in range(10):
            current = asyncio.current_task()
            left = [t for t in asyncio.all_tasks() if t is not current and not t.done()]
            if not left:
                return
            for task in left:
                task.cancel()
            await asyncio.wait(left, timeout=10)

    loop.run_until_complete(end())
