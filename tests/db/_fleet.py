"""Worker processes on one PostgreSQL or MariaDB database (see ``_fleet_worker``)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from ..conftest import drop_all_tables
from ._fleet_worker import build

ROOT = Path(__file__).resolve().parents[2]

ON_SERVERS = pytest.mark.parametrize(
    "server",
    [
        pytest.param("postgres_url", id="postgres", marks=pytest.mark.postgres),
        pytest.param("mysql_url", id="mysql", marks=pytest.mark.mysql),
    ],
)
"""Run a test on each server database (its ``server`` names the URL fixture)."""


async def fleet_engine(url: str, mode: str, value: int) -> AsyncIterator[AsyncEngine]:
    """An engine on ``url`` with the forge's tables (dropped afterwards)."""
    engine = create_async_engine(url)
    forge = build(url, mode, value)
    try:
        await drop_all_tables(engine)
        await forge.migrate()
        yield engine
    finally:
        await forge.aclose()
        await drop_all_tables(engine)
        await engine.dispose()


async def start_worker(url: str, mode: str, value: int) -> asyncio.subprocess.Process:
    """A worker process serving ``mode``'s lane; returns once it is ready."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.db._fleet_worker",
        url,
        mode,
        str(value),
        cwd=str(ROOT),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    assert process.stdout is not None
    line = await asyncio.wait_for(process.stdout.readline(), 60)
    assert line.strip() == b"ready", line
    return process
