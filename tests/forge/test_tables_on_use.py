"""A forge and its tables: an unmigrated database is one typed error, a worker refuses to
start without its tables, and an embedded forge creates them at its first use."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from aster_forge import Forge, ForgeTask, TablesMissingError
from aster_forge.db import ensure_tables
from aster_forge.forge import _backend as forge_backend
from aster_forge.runtime.errors import AsterRuntimeStartupError

_ALL = (
    "background_tasks",
    "background_tasks_deps",
    "background_tasks_lanes",
    "background_tasks_partition_rates",
    "runtime_leases",
    "scheduled_tasks",
)


def _forge(url: str, **options: Any) -> tuple[Forge, ForgeTask]:
    forge = Forge(url, **options)

    @forge.task
    async def mail(payload: int) -> int:
        return payload

    return forge, mail


def _sync_enqueue_error(task: ForgeTask) -> TablesMissingError:
    with pytest.raises(TablesMissingError) as raised:
        task.enqueue_sync(2)
    return raised.value


@pytest.fixture
def creations(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Every table creation or check a forge runs (``True``: a creation)."""
    calls: list[bool] = []
    real = ensure_tables

    async def counted(*args: Any, create: bool = False, **options: Any) -> None:
        calls.append(create)
        await real(*args, create=create, **options)

    monkeypatch.setattr(forge_backend, "ensure_tables", counted)
    return calls


async def test_an_unmigrated_forge_raises_one_typed_error_on_every_backend(
    forge_url: str,
) -> None:
    forge, mail = _forge(forge_url, create_tables=False)
    try:
        with pytest.raises(TablesMissingError) as raised:
            await mail.enqueue(1)
        assert raised.value.tables == ("background_tasks",)
        assert "aster-forge migrate" in str(raised.value)
        synced = await asyncio.to_thread(_sync_enqueue_error, mail)
        assert synced.tables == ("background_tasks",)
        with pytest.raises(TablesMissingError) as raised:
            await forge.get_task(1)
        assert raised.value.tables == ("background_tasks",)
        with pytest.raises(TablesMissingError) as raised:
            await forge.pause_lane("default")
        assert raised.value.tables == ("background_tasks_lanes",)
    finally:
        await forge.aclose()


async def test_a_worker_without_its_tables_refuses_to_start_before_its_loops(
    forge_url: str,
) -> None:
    forge, _mail = _forge(forge_url, create_tables=False)
    try:
        with pytest.raises(AsterRuntimeStartupError) as raised:
            async with forge.running():
                pytest.fail("the workers started without their tables")
    finally:
        await forge.aclose()
    report = raised.value.report
    failed = report.failed_phase()
    assert failed is not None and (failed.component, failed.name) == ("database", "check_tables")
    # The database starts first: no worker phase ran, no loop claimed anything.
    assert report.phase_names() == ("check_tables",)
    cause = raised.value.__cause__
    assert isinstance(cause, TablesMissingError) and cause.tables == _ALL


async def test_an_embedded_forge_creates_its_tables_once_at_the_first_enqueue(
    tmp_path: Path, creations: list[bool]
) -> None:
    forge, mail = _forge(f"sqlite:///{tmp_path / 'fresh.db'}")
    try:
        assert forge.create_tables
        # Concurrent first enqueues: one creation, every enqueue written.
        made = await asyncio.gather(*(mail.enqueue(n) for n in range(20)))
        assert creations == [True]
        assert len({result.task_id for result in made}) == 20
        await mail.enqueue(20)
        await forge.list_tasks()
        assert creations == [True]  # after the first use, a flag says it is done
        assert (await forge.drain()).succeeded == 21
    finally:
        await forge.aclose()


def test_a_synchronous_first_enqueue_creates_the_tables_too(
    tmp_path: Path, creations: list[bool]
) -> None:
    forge, mail = _forge(f"sqlite:///{tmp_path / 'fresh.db'}")
    try:
        made = mail.enqueue_sync(1)
        assert made.created and creations == [True]
        assert mail.enqueue_sync(2).created and creations == [True]
    finally:
        asyncio.run(forge.aclose())


_OPERATIONS: dict[str, Callable[[Forge], Awaitable[Any]]] = {
    "get_task": lambda forge: forge.get_task(1),
    "list_tasks": lambda forge: forge.list_tasks(),
    "cancel_task": lambda forge: forge.cancel_task(1),
    "prune": lambda forge: forge.prune(),
    "pause_lane": lambda forge: forge.pause_lane("default"),
    "lane_states": lambda forge: forge.lane_states(),
    "drain": lambda forge: forge.drain(),
}


@pytest.mark.parametrize("operation", sorted(_OPERATIONS))
async def test_every_operation_of_an_embedded_forge_creates_the_tables_first(
    tmp_path: Path, operation: str
) -> None:
    forge, _mail = _forge(f"sqlite:///{tmp_path / 'fresh.db'}")
    try:
        await _OPERATIONS[operation](forge)
        await forge.backend.check_tables()
    finally:
        await forge.aclose()


async def test_a_server_forge_that_opts_in_creates_its_tables_at_first_use(
    forge_url: str,
) -> None:
    forge, mail = _forge(forge_url, create_tables=True)
    try:
        assert (await mail.enqueue(7)).created
        await forge.backend.check_tables()
    finally:
        await forge.aclose()
