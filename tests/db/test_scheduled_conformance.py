"""The scheduled catalog conformance suite on in-memory, SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from aster_forge.db import ScheduledTaskDbStore
from aster_forge.testing import (
    InMemoryScheduledTaskStore,
    ManualClock,
    ScheduledTaskStoreConformance,
)

from ._support import advance_for, create_tables


@pytest.mark.parametrize("check", ScheduledTaskStoreConformance.CHECKS)
async def test_in_memory_store(check: str) -> None:
    clock = ManualClock()
    store = InMemoryScheduledTaskStore(clock)
    await ScheduledTaskStoreConformance(lambda: store, advance=clock.advance).run(check)


@pytest.mark.parametrize("check", ScheduledTaskStoreConformance.CHECKS)
async def test_db_store(check: str, engine: AsyncEngine, backend: str) -> None:
    await create_tables(engine)
    clock = ManualClock()
    suite = ScheduledTaskStoreConformance(
        lambda: ScheduledTaskDbStore(engine, clock=clock), advance=advance_for(backend, clock)
    )
    await suite.run(check)


async def test_run_all_on_in_memory_store() -> None:
    clock = ManualClock()
    store = InMemoryScheduledTaskStore(clock)
    await ScheduledTaskStoreConformance(lambda: store, advance=clock.advance).run_all()
