"""A crashed worker loop: logged at ERROR when it crashes, readiness unhealthy from then
on, and the runtime (the ``aster-forge worker`` process) stops with an error."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from aster_forge import Forge, ForgeWorkerSettings, TaskExecutionContext, TaskStatus
from aster_forge.runtime import HealthCheckScope, HealthStatus
from aster_forge.runtime.errors import AsterRuntimeShutdownError

from .._logs import ErrorSeen, errors_of


@pytest.fixture
def errors() -> Iterator[ErrorSeen]:
    with errors_of("aster_forge") as handler:
        yield handler


def broken_settings() -> ForgeWorkerSettings:
    """Settings whose poll is a timedelta, slipped past their checks: the loop crashes."""
    settings = ForgeWorkerSettings(shutdown_grace=timedelta(minutes=5))
    wrong: Any = timedelta(milliseconds=200)
    object.__setattr__(settings, "poll", wrong)
    return settings


async def test_a_crashed_dispatch_loop_turns_readiness_unhealthy_and_stops_the_runtime(
    forge_url: str, errors: ErrorSeen
) -> None:
    forge = Forge(forge_url, settings=broken_settings())
    started, release = asyncio.Event(), asyncio.Event()

    @forge.task
    async def hold(ctx: TaskExecutionContext) -> None:
        started.set()
        await release.wait()

    try:
        await forge.migrate()
        task_id = (await hold.enqueue()).record.id
        runtime = forge.runtime(install_signal_handlers=False)
        running = asyncio.create_task(runtime.run(), name="test:crashing-runtime")
        async with asyncio.timeout(20):
            await errors.seen.wait()
            await started.wait()
        crash = errors.records[0]
        assert crash.name == "aster_forge.tasks.dispatch"
        assert crash.getMessage().startswith("the task worker's loop crashed (AttributeError")
        # While its claimed task still runs (the release can take the whole grace):
        ready = await forge.run_health(HealthCheckScope.READINESS)
        component = {c.name: c for c in ready.components}["background_tasks"]
        assert ready.status() is HealthStatus.UNHEALTHY
        assert component.message == "dispatch crashed (AttributeError)"
        release.set()
        with pytest.raises(AsterRuntimeShutdownError) as caught:
            async with asyncio.timeout(20):
                await running
        assert [p.name for p in caught.value.report.failures()] == ["dispatch"]
        assert any(
            r.name == "aster_forge.runtime" and r.getMessage().endswith("stopping the runtime")
            for r in errors.records
        )
        record = await forge.get_task(task_id)
        assert record is not None and record.status is TaskStatus.SUCCEEDED
    finally:
        await forge.aclose()
