"""RuntimeComponentRegistry: graph validation, dependency-ordered isolated shutdown."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterator
from datetime import timedelta

import pytest

from aster_forge.runtime import (
    AsterRuntime,
    CancellationToken,
    HealthCheckOptions,
    HealthCheckScope,
    HealthCheckScopes,
    HealthComponentReport,
    HealthStatus,
    RuntimeComponentKind,
    RuntimeComponentRegistry,
    runtime_component,
    shutdown_resource_component_after,
)
from aster_forge.runtime._component_task import COMPONENT_TASK_FAILED
from aster_forge.runtime._reports import (
    SHUTDOWN_PHASE_PANICKED,
    SHUTDOWN_RESOURCE_CONSUMED,
    ShutdownPhaseStatus,
)
from aster_forge.runtime.errors import (
    AsterRuntimeShutdownError,
    RuntimeComponentGraphError,
    RuntimeComponentRegistrationError,
)
from aster_forge.runtime.protocols import RuntimeComponentBundle
from aster_forge.testing import ManualClock

from .._logs import ErrorSeen, errors_of

Kind = RuntimeComponentKind


def closer(log: list[str], label: str) -> Callable[[], Awaitable[None]]:
    async def phase() -> None:
        log.append(label)

    return phase


def seed_graph(registry: RuntimeComponentRegistry, log: list[str]) -> None:
    """The seed's five components, registered in reverse of their shutdown order."""
    registry.component_shutdown(
        "database",
        Kind.DATABASE,
        "database_close",
        ["background_tasks", "mail_outbox", "audit_manager"],
        closer(log, "database"),
    )
    registry.component_shutdown(
        "audit_manager", Kind.AUDIT, "audit_flush", ["audit_logs"], closer(log, "audit_manager")
    )
    registry.component_shutdown(
        "audit_logs", Kind.AUDIT, "audit_logs_drain", ["mail_outbox"], closer(log, "audit_logs")
    )
    registry.component_shutdown(
        "mail_outbox",
        Kind.MAIL,
        "mail_outbox_drain",
        ["background_tasks"],
        closer(log, "mail_outbox"),
    )
    registry.component_shutdown(
        "background_tasks", Kind.TASKS, "background_tasks", None, closer(log, "background_tasks")
    )


async def test_seed_example_shuts_down_by_dependency_not_registration() -> None:
    log: list[str] = []
    registry = RuntimeComponentRegistry()
    seed_graph(registry, log)
    registry.validate()
    assert [d.name for d in registry.descriptors()] == [
        "database",
        "audit_manager",
        "audit_logs",
        "mail_outbox",
        "background_tasks",
    ]
    report = await registry.shutdown()
    expected = ["background_tasks", "mail_outbox", "audit_logs", "audit_manager", "database"]
    assert log == expected
    assert [p.component for p in report.phases] == expected
    assert registry.startup_order() == tuple(reversed(expected))
    assert registry.last_shutdown_report is report


def test_missing_dependency_names_both_components() -> None:
    registry = RuntimeComponentRegistry()
    registry.component("database", Kind.DATABASE, depends_on=["background_tasks"])
    with pytest.raises(RuntimeComponentGraphError) as caught:
        registry.validate()
    assert caught.value.missing == (("database", "background_tasks"),)
    assert "'database'" in str(caught.value) and "'background_tasks'" in str(caught.value)
    assert isinstance(caught.value, ValueError)


def test_cycle_names_the_components_in_it() -> None:
    registry = RuntimeComponentRegistry()
    registry.component("a", Kind.CORE, depends_on=["b"])
    registry.component("b", Kind.CORE, depends_on=["c"])
    registry.component("c", Kind.CORE, depends_on=["a"])
    registry.component("d", Kind.CORE, depends_on=["a"])
    with pytest.raises(RuntimeComponentGraphError) as caught:
        registry.validate()
    assert set(caught.value.cycle) == {"a", "b", "c"}
    assert "dependency cycle: a -> b -> c -> a" in str(caught.value)


async def test_unvalidated_cycle_and_missing_dependency_do_not_block_shutdown() -> None:
    log: list[str] = []
    registry = RuntimeComponentRegistry()
    registry.component_shutdown("a", Kind.CORE, "a", ["b", "ghost"], closer(log, "a"))
    registry.component_shutdown("b", Kind.CORE, "b", ["a"], closer(log, "b"))
    report = await registry.shutdown()
    assert sorted(log) == ["a", "b"]
    assert not report.has_failures()


async def test_dependency_without_phases_is_metadata_only() -> None:
    log: list[str] = []
    registry = RuntimeComponentRegistry()
    registry.component("config", Kind.CONFIG)
    registry.component_shutdown("cache", Kind.CACHE, "cache_close", ["config"], closer(log, "c"))
    registry.validate()
    report = await registry.shutdown()
    assert log == ["c"]
    assert report.phase_names() == ("cache_close",)
    descriptor = registry.descriptor("config")
    assert descriptor is not None and descriptor.shutdown_phases == ()


async def test_phases_of_one_component_run_in_registration_order() -> None:
    log: list[str] = []
    registry = RuntimeComponentRegistry()
    audit = ("audit", Kind.AUDIT)
    registry.component_shutdown(*audit, "stop_accepting", None, closer(log, "stop"))
    registry.component_shutdown(
        *audit, "flush", None, closer(log, "flush"), timeout=timedelta(seconds=5)
    )
    registry.component_shutdown(*audit, "close_writer", None, closer(log, "close"))
    report = await registry.shutdown()
    assert log == ["stop", "flush", "close"]
    assert report.phase_names() == ("stop_accepting", "flush", "close_writer")


async def test_duplicate_phase_name_warns_and_still_runs(caplog: pytest.LogCaptureFixture) -> None:
    log: list[str] = []

    def bundle(registry: RuntimeComponentRegistry) -> None:
        registry.component_shutdown("audit", Kind.AUDIT, "flush", None, closer(log, "flush"))

    registry = RuntimeComponentRegistry()
    component = runtime_component(bundle)
    registry.register_bundle(component)
    registry.register_bundle(component)  # the classic accident
    assert "registers shutdown phase flush more than once" in caplog.text
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
    report = await registry.shutdown()
    assert log == ["flush", "flush"]
    assert report.phase_names() == ("flush", "flush")


async def test_every_phase_is_isolated_and_later_phases_still_run() -> None:
    clock = ManualClock()
    log: list[str] = []
    never = asyncio.Event()

    async def raises() -> None:
        raise RuntimeError("user=alice token=xyz")

    async def hangs() -> None:
        await never.wait()

    async def raises_on_cancel() -> None:
        try:
            await never.wait()
        finally:
            raise RuntimeError("while closing")

    registry = RuntimeComponentRegistry(clock=clock)
    registry.component_shutdown("tasks", Kind.TASKS, "tasks", None, raises)
    registry.component_shutdown(
        "mail", Kind.MAIL, "mail", ["tasks"], hangs, timeout=timedelta(seconds=2)
    )
    registry.component_shutdown(
        "audit", Kind.AUDIT, "audit", ["mail"], raises_on_cancel, timeout=timedelta(seconds=2)
    )
    registry.component_shutdown("database", Kind.DATABASE, "db", ["audit"], closer(log, "db"))
    run = asyncio.create_task(registry.shutdown())
    await clock.wait_for_sleepers(1)
    await clock.advance(2)
    await clock.wait_for_sleepers(1)
    await clock.advance(2)
    report = await run
    assert [p.status for p in report.phases] == [
        ShutdownPhaseStatus.FAILED(SHUTDOWN_PHASE_PANICKED),
        ShutdownPhaseStatus.TIMED_OUT,
        ShutdownPhaseStatus.FAILED(SHUTDOWN_PHASE_PANICKED),
        ShutdownPhaseStatus.SUCCEEDED,
    ]
    assert log == ["db"]
    assert "alice" not in repr(report)


async def test_shutdown_resource_component_after_consumes_once() -> None:
    drained: list[str] = []

    async def drain(resources: str) -> None:
        drained.append(resources)

    bundle = shutdown_resource_component_after(
        "mail_outbox", Kind.MAIL, "mail_outbox_drain", ["background_tasks"], "outbox", drain
    )
    registry = RuntimeComponentRegistry()
    registry.component("background_tasks", Kind.TASKS)
    registry.register_bundle(bundle)
    registry.register_bundle(bundle)
    registry.validate()
    report = await registry.shutdown()
    assert drained == ["outbox"]
    assert [p.status for p in report.phases] == [
        ShutdownPhaseStatus.SUCCEEDED,
        ShutdownPhaseStatus.FAILED(SHUTDOWN_RESOURCE_CONSUMED),
    ]
    again = await registry.shutdown()
    assert again is report and drained == ["outbox"]


async def test_component_shutdown_once_shortcut() -> None:
    closed: list[int] = []

    async def close(handle: int) -> None:
        closed.append(handle)

    registry = RuntimeComponentRegistry()
    registry.component_shutdown_once(
        "background_tasks", Kind.TASKS, "background_tasks", None, 42, close
    )
    await registry.shutdown()
    assert closed == [42]


async def test_health_checks_run_through_the_registry() -> None:
    async def database() -> HealthComponentReport:
        return HealthComponentReport.healthy("database", "ping ok")

    async def remote() -> HealthComponentReport:
        raise RuntimeError("remote down")

    registry = RuntimeComponentRegistry()
    registry.component_health_with_options(
        "database",
        Kind.DATABASE,
        "database",
        HealthCheckOptions.required(timedelta(seconds=5)).with_scopes(
            HealthCheckScopes.readiness_and_diagnostics()
        ),
        database,
    )
    registry.component_health_with_options(
        "remote_nodes",
        Kind.PRODUCT,
        "remote_nodes",
        HealthCheckOptions.optional(timedelta(seconds=5)).with_scopes(
            HealthCheckScopes.diagnostics()
        ),
        remote,
    )
    readiness = await registry.run_health(HealthCheckScope.READINESS)
    assert [c.name for c in readiness.components] == ["database"]
    diagnostics = await registry.run_health(HealthCheckScope.DIAGNOSTICS)
    assert [c.name for c in diagnostics.components] == ["database", "remote_nodes"]
    assert diagnostics.components[1].status is HealthStatus.DEGRADED
    descriptor = registry.descriptor("database")
    assert descriptor is not None and descriptor.health_checks == ("database",)


async def test_component_task_starts_with_runtime_and_is_joined_at_shutdown() -> None:
    events: list[str] = []
    running = asyncio.Event()

    async def worker(token: CancellationToken) -> None:
        running.set()
        await token.wait()
        events.append("worker saw cancel")

    async def crashing(token: CancellationToken) -> None:
        raise RuntimeError("crash")

    registry = RuntimeComponentRegistry()
    registry.component_task("tasks", Kind.TASKS, "dispatcher", worker)
    registry.component_task("janitor", Kind.TASKS, "cleanup", crashing)
    root = CancellationToken()
    registry.start_tasks(root)
    await running.wait()
    report = await registry.shutdown()
    assert events == ["worker saw cancel"]
    assert not root.cancelled  # only the task's child token was cancelled
    statuses = {p.name: p.status for p in report.phases}
    assert statuses["dispatcher"] is ShutdownPhaseStatus.SUCCEEDED
    assert statuses["cleanup"] == ShutdownPhaseStatus.FAILED(COMPONENT_TASK_FAILED)


async def test_task_phase_tolerates_never_started() -> None:
    async def worker(token: CancellationToken) -> None:
        await token.wait()

    registry = RuntimeComponentRegistry()
    registry.component_task("tasks", Kind.TASKS, "dispatcher", worker)
    report = await registry.shutdown()
    assert report.phases[0].status is ShutdownPhaseStatus.SUCCEEDED


async def test_startup_runs_in_reverse_dependency_order_and_report_tells_who_started() -> None:
    log: list[str] = []

    async def fail() -> None:
        raise RuntimeError("no")

    registry = RuntimeComponentRegistry()
    registry.component_startup("tasks", Kind.TASKS, "tasks_start", closer(log, "start tasks"))
    registry.component_shutdown("tasks", Kind.TASKS, "tasks_stop", None, closer(log, "stop tasks"))
    registry.component("database", Kind.DATABASE, depends_on=["tasks"])
    registry.component_startup("database", Kind.DATABASE, "db_connect", closer(log, "connect db"))
    registry.component_shutdown(
        "database", Kind.DATABASE, "db_close", None, closer(log, "close db")
    )
    registry.component_startup("mail", Kind.MAIL, "mail_warm", fail, optional=True)
    startup = await registry.startup()
    assert log == ["connect db", "start tasks"]
    assert startup.succeeded()
    registry2 = RuntimeComponentRegistry()
    registry2.component_startup("database", Kind.DATABASE, "db_connect", fail)
    registry2.component_shutdown(
        "database", Kind.DATABASE, "db_close", None, closer(log, "close db 2")
    )
    registry2.component("tasks", Kind.TASKS, depends_on=["database"])
    registry2.component_startup("tasks", Kind.TASKS, "tasks_start", closer(log, "never"))
    registry2.component_shutdown(
        "tasks", Kind.TASKS, "tasks_stop", None, closer(log, "stop tasks 2")
    )
    registry2.component_shutdown("plain", Kind.CORE, "plain_stop", None, closer(log, "plain"))
    aborted = await registry2.startup()
    assert aborted.aborted and aborted.phase_names() == ("tasks_start", "db_connect")
    report = await registry2.shutdown()
    started = {p.component: p.component_started for p in report.phases}
    assert started == {"database": False, "tasks": True, "plain": None}


def test_registration_errors() -> None:
    registry = RuntimeComponentRegistry()
    registry.component("db", Kind.DATABASE)
    with pytest.raises(RuntimeComponentRegistrationError, match="registered as database"):
        registry.component("db", Kind.CACHE)
    with pytest.raises(RuntimeComponentRegistrationError):
        registry.component("", Kind.CORE)
    with pytest.raises(RuntimeComponentRegistrationError):
        registry.component("x", "core")  # type: ignore[arg-type]
    with pytest.raises(RuntimeComponentRegistrationError):
        registry.register_bundle(object())  # type: ignore[arg-type]
    with pytest.raises(RuntimeComponentRegistrationError):
        runtime_component(42)  # type: ignore[arg-type]

    async def worker(token: CancellationToken) -> None:
        return None

    registry.component_task("db", Kind.DATABASE, "t", worker)
    with pytest.raises(RuntimeComponentRegistrationError):
        registry.component_task("db", Kind.DATABASE, "t", worker)


def test_bundle_protocol_and_descriptors() -> None:
    class DatabaseComponents:
        def register(self, registry: RuntimeComponentRegistry) -> None:
            async def close() -> None:
                return None

            registry.component_shutdown(
                "database",
                Kind.DATABASE,
                "database_close",
                ["tasks"],
                close,
                timeout=timedelta(seconds=5),
            )

    bundle = DatabaseComponents()
    assert isinstance(bundle, RuntimeComponentBundle)
    registry = RuntimeComponentRegistry()
    registry.register_bundle(runtime_component(bundle))
    (descriptor,) = registry.descriptors()
    assert descriptor.kind is Kind.DATABASE
    assert descriptor.depends_on == ("tasks",)
    assert descriptor.shutdown_phases[0].phase == "database_close"
    assert descriptor.shutdown_phases[0].timeout == timedelta(seconds=5)
    assert "database" in registry and len(registry) == 1


def test_long_chains_validate_without_recursion_and_cycles_are_found() -> None:
    registry = RuntimeComponentRegistry()
    size = 5000
    for i in reversed(range(size)):
        registry.component(f"c{i}", Kind.CORE, depends_on=[f"c{i - 1}"] if i else [])
    registry.validate()
    assert registry.shutdown_order()[:3] == ("c0", "c1", "c2")
    registry.component("c0", Kind.CORE, depends_on=[f"c{size - 1}"])
    with pytest.raises(RuntimeComponentGraphError) as caught:
        registry.validate()
    assert len(caught.value.cycle) == size


def test_self_dependency_is_a_cycle() -> None:
    registry = RuntimeComponentRegistry()
    registry.component("a", Kind.CORE, depends_on=["a"])
    with pytest.raises(RuntimeComponentGraphError) as caught:
        registry.validate()
    assert caught.value.cycle == ("a",)


@pytest.fixture
def runtime_errors() -> Iterator[ErrorSeen]:
    with errors_of("aster_forge.runtime") as handler:
        yield handler


async def test_a_crashed_component_task_is_logged_when_it_crashes(
    runtime_errors: ErrorSeen,
) -> None:
    crash = asyncio.Event()

    async def listener(token: CancellationToken) -> None:
        await crash.wait()
        raise ConnectionResetError("server closed the connection")

    registry = RuntimeComponentRegistry()
    registry.component_task("tasks", Kind.TASKS, "listener", listener)
    root = CancellationToken()
    registry.start_tasks(root)
    crash.set()
    async with asyncio.timeout(10):
        await runtime_errors.seen.wait()  # logged now, not at shutdown
    (record,) = runtime_errors.records
    assert record.getMessage() == (
        "component task listener of tasks crashed: "
        "ConnectionResetError: server closed the connection"
    )
    assert record.exc_info is not None and isinstance(record.exc_info[1], ConnectionResetError)
    assert not root.cancelled  # not critical: the runtime keeps running
    report = await registry.shutdown()
    assert report.phases[0].status == ShutdownPhaseStatus.FAILED(COMPONENT_TASK_FAILED)


async def test_a_critical_task_crash_stops_the_runtime(runtime_errors: ErrorSeen) -> None:
    stopped: list[str] = []

    async def dispatcher(token: CancellationToken) -> None:
        raise AttributeError("'timedelta' object has no attribute 'base_interval'")

    async def service(token: CancellationToken) -> None:
        await token.wait()
        stopped.append("service saw the stop")

    def register(registry: RuntimeComponentRegistry) -> None:
        registry.component_task("tasks", Kind.TASKS, "dispatch", dispatcher, critical=True)
        registry.component_task("tasks", Kind.TASKS, "service", service)

    bundle = runtime_component(register)
    runtime = AsterRuntime(components=[bundle], install_signal_handlers=False)
    with pytest.raises(AsterRuntimeShutdownError) as caught:
        async with asyncio.timeout(10):  # a runtime that kept running would fail here
            await runtime.run()
    assert stopped == ["service saw the stop"]
    assert [p.name for p in caught.value.report.failures()] == ["dispatch"]
    (record,) = runtime_errors.records
    assert record.getMessage().endswith("; stopping the runtime")
