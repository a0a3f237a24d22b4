"""Database access for CLI commands: open, check, migrate; every failure is one line."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from aster_forge.demo import demo_tables, migrate_demo_database, open_demo_engine

from ._errors import CliError, database_error, safe_url
from ._output import console

__all__ = ["CONNECT_TIMEOUT_SECONDS", "checked_engine", "run_migrate"]

CONNECT_TIMEOUT_SECONDS = 10.0


@asynccontextmanager
async def checked_engine(url: str) -> AsyncIterator[AsyncEngine]:
    """Open an engine for ``url`` and prove it answers ``SELECT 1``; dispose on exit.

    Raises:
        CliError: Bad URL, missing driver, unreachable database (one line each).
    """
    try:
        engine = open_demo_engine(url)
    except Exception as exc:
        raise database_error(exc, url) from None
    try:
        try:
            async with engine.connect() as conn:
                await conn.execute(sa.text("SELECT 1"))
        except Exception as exc:
            raise database_error(exc, url) from None
        try:
            yield engine
        except CliError:
            raise
        except Exception as exc:
            raise database_error(exc, url) from None
    finally:
        await engine.dispose()


async def run_migrate(url: str) -> int:
    """Create every missing table and index; print what exists afterwards."""
    tables = demo_tables()
    async with checked_engine(url) as engine:
        await migrate_demo_database(engine, tables)
    names = ", ".join(sorted(tables.metadata.tables))
    console().print(f"migrated {safe_url(url)}: {names}")
    return 0
