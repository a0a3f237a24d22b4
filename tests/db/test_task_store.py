"""The task store conformance suite on the in-memory store, SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from aster_forge.db import BackgroundTaskDbStore, create_background_tasks_table
from aster_forge.tasks import BackgroundTaskStore
from aster_forge.testing import InMemoryTaskStore, ManualClock, TaskStoreConformance

from ._support import advance_for


@pytest.fixture
async def task_engine(engine: AsyncEngine) -> AsyncIterator[AsyncEngine]:
    """``engine`` with the background_tasks table created."""
    await create_background_tasks_table(engine)
    yield engine


@pytest.mark.parametrize("check", TaskStoreConformance.CHECKS)
async def test_in_memory_store(check: str) -> None:
    clock = ManualClock()
    store = InMemoryTaskStore(clock)
    await TaskStoreConformance(lambda: store, advance=clock.advance).run(check)


@pytest.mark.parametrize("check", TaskStoreConformance.CHECKS)
async def test_db_store(check: str, task_engine: AsyncEngine, backend: str) -> None:
    clock = ManualClock()
    suite = TaskStoreConformance(
        lambda: BackgroundTaskDbStore(task_engine, clock=clock),
        advance=advance_for(backend, clock),
    )
    await suite.run(check)


def test_stores_satisfy_the_protocol() -> None:
    assert isinstance(InMemoryTaskStore(ManualClock()), BackgroundTaskStore)


async def test_unknown_check_is_refused() -> None:
    clock = ManualClock()
    suite = TaskStoreConformance(lambda: InMemoryTaskStore(clock), advance=clock.advance)
    with pytest.raises(ValueError, match="unknown check"):
        await suite.run("check_nothing")


async def test_run_all_on_in_memory_store() -> None:
    clock = ManualClock()
    store = InMemoryTaskStore(clock)
    await TaskStoreConformance(lambda: store, advance=clock.advance).run_all()
