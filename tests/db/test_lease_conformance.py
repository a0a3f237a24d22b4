"""The runtime lease conformance suite on the in-memory store, SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from aster_forge.db import RuntimeLeaseDbStore
from aster_forge.testing import (
    InMemoryRuntimeLeaseStore,
    ManualClock,
    RuntimeLeaseStoreConformance,
)

from ._support import advance_for, create_tables


@pytest.mark.parametrize("check", RuntimeLeaseStoreConformance.CHECKS)
async def test_in_memory_store(check: str) -> None:
    clock = ManualClock()
    store = InMemoryRuntimeLeaseStore(clock)
    await RuntimeLeaseStoreConformance(lambda: store, advance=clock.advance).run(check)


@pytest.mark.parametrize("check", RuntimeLeaseStoreConformance.CHECKS)
async def test_db_store(check: str, engine: AsyncEngine, backend: str) -> None:
    await create_tables(engine)
    clock = ManualClock()
    suite = RuntimeLeaseStoreConformance(
        lambda: RuntimeLeaseDbStore(engine, clock=clock), advance=advance_for(backend, clock)
    )
    await suite.run(check)


async def test_unknown_check_is_refused() -> None:
    clock = ManualClock()
    store = InMemoryRuntimeLeaseStore(clock)
    suite = RuntimeLeaseStoreConformance(lambda: store, advance=clock.advance)
    with pytest.raises(ValueError, match="unknown check"):
        await suite.run("check_nothing")


async def test_run_all_on_in_memory_store() -> None:
    clock = ManualClock()
    store = InMemoryRuntimeLeaseStore(clock)
    await RuntimeLeaseStoreConformance(lambda: store, advance=clock.advance).run_all()
