"""The background-task runtime components inside AsterRuntime."""

from __future__ import annotations

import asyncio
import enum
from datetime import timedelta

import pytest

from aster_forge.runtime import (
    AsterRuntime,
    CancellationToken,
    RuntimeComponentKind,
    RuntimeComponentRegistry,
    runtime_component,
)
from aster_forge.runtime._reports import ShutdownPhaseStatusKind
from aster_forge.runtime.errors import AsterRuntimeShutdownError, AsterRuntimeStartupError
from aster_forge.tasks import (
    BACKGROUND_TASKS_COMPONENT,
    BackgroundTasks,
    RuntimeTaskCatalog,
    RuntimeTaskDefinition,
    background_task_component_with_definitions_from_shutdown,
)
from aster_forge.tasks._components import (
    BACKGROUND_TASKS_SHUTDOWN_PHASE,
    BACKGROUND_TASKS_SPAWN_PHASE,
    BackgroundTaskComponent,
)
from aster_forge.tasks.errors import BackgroundTaskSpawnError
from aster_forge.testing import ManualClock

from ._schedule_support import until


class SystemTask(enum.Enum):
    HEALTH = "health"
    CLEANUP = "cleanup"


CATALOG = RuntimeTaskCatalog(
    SystemTask,
    [
        RuntimeTaskDefinition(SystemTask.HEALTH, "system-health-check", "Health check", "p.h"),
        RuntimeTaskDefinition(SystemTask.CLEANUP, "audit-cleanup", "Audit cleanup", "p.c"),
    ],
)


def _database(log: list[str]) -> object:
    async def close() -> None:
        log.append("database closed")

    def register(registry: RuntimeComponentRegistry) -> None:
        registry.component_shutdown(
            "database",
            RuntimeComponentKind.DATABASE,
            "database",
            [BACKGROUND_TASKS_COMPONENT],
            close,
        )

    return runtime_component(register)


async def test_from_shutdown_spawns_with_the_root_token_and_stops_before_the_database() -> None:
    log: list[str] = []
    tokens: list[CancellationToken] = []

    def spawn(token: CancellationToken) -> BackgroundTasks:
        tokens.append(token)
        group = BackgroundTasks(token)

        async def worker(t: CancellationToken) -> None:
            log.append("worker started")
            await t.wait()
            log.append("worker stopped")

        group.spawn("worker", worker)
        return group

    runtime = AsterRuntime(
        components=[
            _database(log),  # registered first: order comes from the graph
            background_task_component_with_definitions_from_shutdown(CATALOG.definitions(), spawn),
        ],
        install_signal_handlers=False,
    )
    descriptor = next(d for d in runtime.descriptors() if d.name == BACKGROUND_TASKS_COMPONENT)
    assert descriptor.kind is RuntimeComponentKind.TASKS
    assert [p.phase for p in descriptor.startup_phases] == [BACKGROUND_TASKS_SPAWN_PHASE]
    assert [p.phase for p in descriptor.shutdown_phases] == [BACKGROUND_TASKS_SHUTDOWN_PHASE]
    run = asyncio.create_task(runtime.run())
    await until(lambda: "worker started" in log)
    assert tokens == [runtime.shutdown_token]
    runtime.request_stop()
    await asyncio.wait_for(run, 5)
    assert log == ["worker started", "worker stopped", "database closed"]
    report = runtime.last_shutdown_report
    assert report is not None
    assert [(p.component, p.name) for p in report.phases] == [
        (BACKGROUND_TASKS_COMPONENT, BACKGROUND_TASKS_SHUTDOWN_PHASE),
        ("database", "database"),
    ]
    assert not report.has_failures()


def test_the_component_carries_the_task_definitions() -> None:
    factory = background_task_component_with_definitions_from_shutdown(
        CATALOG.definitions(), BackgroundTasks
    )
    bundle = factory.build(CancellationToken())
    assert isinstance(bundle, BackgroundTaskComponent)
    assert bundle.task_names == ("system-health-check", "audit-cleanup")
    group = BackgroundTasks()
    bundle2 = BackgroundTaskComponent(group=group, definitions=CATALOG.definitions())
    assert bundle2.task_names == ("system-health-check", "audit-cleanup")
    with pytest.raises(BackgroundTaskSpawnError, match="RuntimeTaskDefinition"):
        BackgroundTaskComponent(group=group, definitions=["system-health-check"])  # type: ignore[arg-type]


def test_the_task_definitions_appear_in_the_component_descriptor() -> None:
    registry = RuntimeComponentRegistry()
    group = BackgroundTasks()
    registry.register_bundle(
        runtime_component(BackgroundTaskComponent(group=group, definitions=CATALOG.definitions()))
    )
    descriptor = registry.descriptor(BACKGROUND_TASKS_COMPONENT)
    assert descriptor is not None
    assert descriptor.tasks == ("system-health-check", "audit-cleanup")
    # Catalog metadata only: the one shutdown phase is the group's, none per task.
    assert [p.phase for p in descriptor.shutdown_phases] == [BACKGROUND_TASKS_SHUTDOWN_PHASE]


async def test_async_spawner_via_background_task_component_from_shutdown() -> None:
    groups: list[BackgroundTasks] = []

    async def spawn(token: CancellationToken) -> BackgroundTasks:
        groups.append(BackgroundTasks(token))
        return groups[-1]

    runtime = AsterRuntime(
        components=[background_task_component_with_definitions_from_shutdown((), spawn)],
        install_signal_handlers=False,
    )
    run = asyncio.create_task(runtime.run())
    await until(lambda: len(groups) == 1)
    runtime.request_stop()
    await asyncio.wait_for(run, 5)
    assert groups[0].is_shutting_down


async def test_existing_group_is_shut_down_once_even_if_registered_twice() -> None:
    group = BackgroundTasks()
    stops: list[str] = []

    async def worker(t: CancellationToken) -> None:
        await t.wait()
        stops.append("stopped")

    component = runtime_component(BackgroundTaskComponent(group=group))
    registry = RuntimeComponentRegistry()
    registry.register_bundle(component)
    registry.register_bundle(component)
    group.spawn("w", worker)
    await asyncio.sleep(0)
    report = await registry.shutdown()
    assert stops == ["stopped"]
    assert report.phase_names() == (
        BACKGROUND_TASKS_SHUTDOWN_PHASE,
        BACKGROUND_TASKS_SHUTDOWN_PHASE,
    )
    assert not report.has_failures()
    with pytest.raises(BackgroundTaskSpawnError):
        BackgroundTaskComponent(group="not a group")  # type: ignore[arg-type]


async def test_spawn_failure_aborts_startup_and_shutdown_tolerates_the_missing_group() -> None:
    def spawn(token: CancellationToken) -> BackgroundTasks:
        raise OSError("worker pool unavailable")

    log: list[str] = []
    runtime = AsterRuntime(
        components=[
            background_task_component_with_definitions_from_shutdown((), spawn),
            _database(log),
        ],
        install_signal_handlers=False,
    )
    with pytest.raises(AsterRuntimeStartupError) as caught:
        await runtime.run()
    statuses = {p.name: p.status.kind for p in caught.value.shutdown_report.phases}
    assert statuses[BACKGROUND_TASKS_SHUTDOWN_PHASE] is ShutdownPhaseStatusKind.SUCCEEDED
    assert log == ["database closed"]


async def test_shutdown_phase_timeout_aborts_stubborn_workers() -> None:
    clock = ManualClock()
    cancelled = asyncio.Event()

    def spawn(token: CancellationToken) -> BackgroundTasks:
        group = BackgroundTasks(token, shutdown_grace=timedelta(minutes=10), clock=clock)

        async def stubborn(t: CancellationToken) -> None:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancelled.set()
                raise

        group.spawn("stubborn", stubborn)
        return group

    runtime = AsterRuntime(
        components=[
            background_task_component_with_definitions_from_shutdown(
                (), spawn, timeout=timedelta(seconds=2)
            )
        ],
        install_signal_handlers=False,
        clock=clock,
    )
    run = asyncio.create_task(runtime.run())
    await until(lambda: runtime.last_startup_report is not None)
    runtime.request_stop()
    await clock.wait_for_sleepers(2)  # the phase deadline and the group's grace
    await clock.advance(2)
    with pytest.raises(AsterRuntimeShutdownError) as caught:
        await asyncio.wait_for(run, 5)
    assert cancelled.is_set()
    (phase,) = caught.value.report.phases
    assert phase.status.kind is ShutdownPhaseStatusKind.TIMED_OUT
