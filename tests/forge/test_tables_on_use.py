"""A forge and its tables: an unmigrated database is one typed error, and a worker refuses
to start without its tables."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from aster_forge import Forge, TablesMissingError
from aster_forge.forge import ForgeTask
from aster_forge.runtime import AsterRuntimeStartupError

_ALL = ("background_tasks", "background_tasks_lanes", "runtime_leases", "scheduled_tasks")


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
