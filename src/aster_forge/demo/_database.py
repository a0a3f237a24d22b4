"""The demo's database: engine setup (SQLite in WAL mode), migration and retention."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from aster_forge.db import (
    background_tasks_table,
    normalize_database_url,
    runtime_leases_table,
    scheduled_tasks_table,
)
from aster_forge.runtime import utc_now
from aster_forge.tasks import TaskStatus

from ._audit import audit_events_table

__all__ = [
    "DEFAULT_DATABASE_URL",
    "DemoTables",
    "demo_tables",
    "migrate_demo_database",
    "open_demo_engine",
    "purge_finished_tasks",
]

DEFAULT_DATABASE_URL = "sqlite+aiosqlite:///./aster-forge.db"
"""The embedded default: a SQLite file in the working directory, created on first run."""

SQLITE_BUSY_TIMEOUT_MS = 10_000


@dataclass(frozen=True, slots=True)
class DemoTables:
    """The demo's tables on one ``MetaData``.

    Attributes:
        metadata: Holds every table (``metadata.create_all`` creates them all).
        tasks: The reference ``background_tasks`` table.
        audit: The ``demo_audit_events`` table.
    """

    metadata: sa.MetaData
    tasks: sa.Table
    audit: sa.Table


def demo_tables() -> DemoTables:
    """Define the runtime-lease, scheduled-catalog, task and audit tables."""
    metadata = sa.MetaData()
    runtime_leases_table(metadata)
    scheduled_tasks_table(metadata)
    return DemoTables(
        metadata=metadata,
        tasks=background_tasks_table(metadata),
        audit=audit_events_table(metadata),
    )


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        # WAL lets the HTTP readers and the workers' writers run side by side.
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA synchronous=NORMAL")
    finally:
        cursor.close()


def open_demo_engine(url: str) -> AsyncEngine:
    """Create the async engine for ``url`` (SQLite gets WAL mode and a busy timeout).

    The URL goes through :func:`aster_forge.db.normalize_database_url` first.

    Raises:
        aster_forge.db.InvalidDatabaseUrlError: The URL cannot be parsed or names a
            synchronous driver.
        aster_forge.db.DatabaseDriverMissingError: The async driver is not installed.
    """
    parsed = make_url(normalize_database_url(url))
    options: dict[str, Any] = {"pool_pre_ping": True}
    if parsed.get_backend_name() == "sqlite":
        options = {"connect_args": {"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000}}
    engine = create_async_engine(parsed, **options)
    if parsed.get_backend_name() == "sqlite":
        event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
    return engine


async def migrate_demo_database(engine: AsyncEngine, tables: DemoTables | None = None) -> None:
    """Create every demo table and index that is missing (idempotent)."""
    target = tables or demo_tables()
    async with engine.begin() as conn:
        await conn.run_sync(lambda sync: target.metadata.create_all(sync, checkfirst=True))


async def purge_finished_tasks(engine: AsyncEngine, table: sa.Table, older_than: timedelta) -> int:
    """Delete succeeded and cancelled tasks that finished more than ``older_than`` ago.

    Failed tasks are kept: an operator may still want to read or retry them.

    Returns:
        How many rows were deleted.
    """
    cutoff = utc_now() - older_than
    async with engine.begin() as conn:
        result = await conn.execute(
            sa.delete(table).where(
                table.c.status.in_([TaskStatus.SUCCEEDED.value, TaskStatus.CANCELLED.value]),
                table.c.finished_at < cutoff,
            )
        )
    return int(result.rowcount or 0)
