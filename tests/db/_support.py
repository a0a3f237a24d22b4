"""Helpers shared by the database tests (tables, clocks, cleanup, migration steps)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta

import sqlalchemy as sa
from alembic.migration import MigrationContext
from alembic.operations import Operations
from sqlalchemy.ext.asyncio import AsyncEngine

from aster_forge.db import runtime_leases_table, scheduled_tasks_table
from aster_forge.testing import ManualClock


async def create_tables(engine: AsyncEngine) -> None:
    """Create runtime_leases and scheduled_tasks (with indexes) on ``engine``."""
    metadata = sa.MetaData()
    runtime_leases_table(metadata)
    scheduled_tasks_table(metadata)
    async with engine.begin() as conn:
        await conn.run_sync(metadata.create_all)


def advance_for(backend: str, clock: ManualClock) -> Callable[[timedelta], Awaitable[None]]:
    """Time moves with the ManualClock on SQLite and in real time on a server clock."""
    if backend == "sqlite":
        return clock.advance

    async def real_sleep(delta: timedelta) -> None:
        # Server-clock expiry can only be observed by letting real time pass.
        await asyncio.sleep(delta.total_seconds())

    return real_sleep


async def drop_tables(engine: AsyncEngine) -> None:
    """Drop the tables :func:`create_tables` made (for tests with their own engines)."""
    metadata = sa.MetaData()
    runtime_leases_table(metadata)
    scheduled_tasks_table(metadata)
    async with engine.begin() as conn:
        await conn.run_sync(metadata.drop_all)


def migrate(sync: sa.Connection, step: Callable[[Operations], None]) -> None:
    """Run one Alembic helper (``step(op)``) on ``sync`` (use with ``conn.run_sync``)."""
    context = MigrationContext.configure(sync)
    with Operations.context(context):
        step(Operations(context))
