"""Database access for CLI commands: open, check, migrate; every failure is one line."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from aster_forge._demo import open_demo_engine
from aster_forge.db import background_tasks_table, runtime_leases_table, scheduled_tasks_table
from aster_forge.db._internal import normalize_database_url

from ._errors import EXIT_UNREACHABLE, CliError, database_error, safe_url
from ._output import console

__all__ = [
    "CONNECT_TIMEOUT_SECONDS",
    "check_sqlite_path",
    "checked_engine",
    "reference_metadata",
    "require_table",
    "run_migrate",
]

CONNECT_TIMEOUT_SECONDS = 10.0


def check_sqlite_path(url: str, *, must_exist: bool = False) -> None:
    """Reject a SQLite file URL whose directory does not exist, before any driver runs.

    (aiosqlite's worker thread outlives a failed connect; checking first keeps the
    error one line and leaves no thread behind.)

    Args:
        url: The database URL (anything but a SQLite file passes).
        must_exist: Also reject a file that does not exist: connecting would create
            an empty database, which a command reading one must not leave behind.

    Raises:
        CliError: The directory (or, with ``must_exist``, the file) is missing.
    """
    try:
        parsed = make_url(url)
    except Exception:
        return  # reported by the engine factory with the URL's own error
    if parsed.get_backend_name() != "sqlite" or not parsed.database:
        return
    if parsed.database == ":memory:" or parsed.database.startswith("file:"):
        return
    try:
        path = Path(parsed.database).expanduser().resolve()
    except (OSError, ValueError, RuntimeError) as exc:  # NUL byte, unknown ~user, loop
        raise CliError(
            f"cannot use the database at {safe_url(url)}: invalid SQLite path ({exc})",
            EXIT_UNREACHABLE,
        ) from None
    if not path.parent.is_dir():
        raise CliError(
            f"cannot use the database at {safe_url(url)}: directory {path.parent} does not exist",
            EXIT_UNREACHABLE,
        )
    if must_exist and not path.is_file():
        raise CliError(
            f"no SQLite database at {path} (create it with 'aster-forge migrate', or pick "
            "another with --database-url)",
            EXIT_UNREACHABLE,
        )


@asynccontextmanager
async def checked_engine(url: str, *, must_exist: bool = False) -> AsyncIterator[AsyncEngine]:
    """Open an engine for ``url`` and prove it answers ``SELECT 1``; dispose on exit.

    Args:
        url: The database URL.
        must_exist: Refuse a SQLite file that does not exist instead of creating it.

    Raises:
        CliError: Bad URL, missing driver, unreachable database, or with ``must_exist``
            a missing SQLite file (one line each).
    """
    await asyncio.to_thread(check_sqlite_path, url, must_exist=must_exist)
    try:
        engine = open_demo_engine(normalize_database_url(url))
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


def reference_metadata(tasks_table: str) -> sa.MetaData:
    """The reference tables (runtime leases, scheduled catalog, tasks named ``tasks_table``)."""
    metadata = sa.MetaData()
    runtime_leases_table(metadata)
    scheduled_tasks_table(metadata)
    background_tasks_table(metadata, tasks_table)
    return metadata


async def require_table(engine: AsyncEngine, name: str, url: str) -> None:
    """Fail with one line when the table ``name`` does not exist.

    Raises:
        CliError: The table is missing (exit 2, with the command that creates it).
    """
    async with engine.connect() as conn:
        exists = await conn.run_sync(lambda sync: sa.inspect(sync).has_table(name))
    if not exists:
        raise CliError(
            f"no table {name!r} in {safe_url(url)} (create it with 'aster-forge migrate "
            f"--table {name}' or your migrations, or pick another with --table)",
            EXIT_UNREACHABLE,
        )


async def run_migrate(url: str, tasks_table: str) -> int:
    """Create every missing reference table and index; print what exists afterwards."""
    metadata = reference_metadata(tasks_table)
    async with checked_engine(url) as engine, engine.begin() as conn:
        await conn.run_sync(lambda sync: metadata.create_all(sync, checkfirst=True))
    names = ", ".join(sorted(metadata.tables))
    console().print(f"migrated {safe_url(url)}: {names}")
    return 0
