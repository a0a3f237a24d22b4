"""AsterRuntime: entrypoint flow, error family, cleanup guarantees, cancellation."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from aster_forge.runtime import (
    AsterRuntime,
    AsterRuntimeError,
    CancellationToken,
    RuntimeComponentBundleRegistration,
    RuntimeComponentKind,
    RuntimeComponentRegistry,
    RuntimeComponentWithShutdown,
    RuntimeServiceComponent,
    runtime_component,
    shutdown_resource_component_after,
)
from aster_forge.runtime._phases import ShutdownPhaseStatus, StartupPhaseStatus
from aster_forge.runtime.errors import (
    AsterRuntimeBeforeShutdownError,
    AsterRuntimeComponentGraphError,
    AsterRuntimeServiceError,
    AsterRuntimeShutdownError,
    AsterRuntimeStartupError,
    RuntimeComponentRegistrationError,
)

Kind = RuntimeComponentKind


class ProductError(Exception):
    """A product failure."""


class Product:
    """A fake product: records lifecycle events, exposes *_component factories."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.serving = asyncio.Event()

    def note(self, event: str) -> Callable[[], Awaitable[None]]:
        async def hook() -> None:
            self.events.append(event)

        return hook

    def http_component(self, result: Any = 0, fail: BaseException | None = None) -> Any:
        def build(token: CancellationToken) -> RuntimeServiceComponent[Any]:
            async def serve() -> Any:
                self.serving.set()
                if fail is not None:
                    raise fail
                if result == "wait":
                    await token.wait()
                    self.events.append("http saw cancel")
                    return 0
                return result

            return RuntimeServiceComponent("http", Kind.HTTP, serve(), token, self.note("stop"))

        return RuntimeComponentWithShutdown(build)

    def tasks_component(self) -> RuntimeComponentBundleRegistration[Any]:
        def register(registry: RuntimeComponentRegistry) -> None:
            registry.component("background_tasks", Kind.TASKS, depends_on=["http"])
            registry.component_startup(
                "background_tasks", Kind.TASKS, "tasks_start", self.note("start tasks")
            )
            registry.component_shutdown(
                "background_tasks", Kind.TASKS, "tasks_stop", None, self.note("stop tasks")
            )

        return runtime_component(register)

    def database_component(
        self,
        startup: Callable[[], Awaitable[None]] | None = None,
        depends: tuple[str, ...] = ("background_tasks",),
    ) -> Any:
        def register(registry: RuntimeComponentRegistry) -> None:
            registry.component("database", Kind.DATABASE, depends_on=depends)
            registry.component_startup(
                "database", Kind.DATABASE, "db_connect", startup or self.note("connect db")
            )
            registry.component_shutdown(
                "database", Kind.DATABASE, "db_close", None, self.note("close db")
            )

        return runtime_component(register)

    def runtime(self, *components: object) -> AsterRuntime:
        return AsterRuntime(components=components, install_signal_handlers=False)


async def test_entrypoint_of_only_components_returns_the_service_value() -> None:
    product = Product()
    runtime = product.runtime(
        product.http_component(result=42), product.database_component(), product.tasks_component()
    )
    assert [d.name for d in runtime.descriptors()] == ["http", "database", "background_tasks"]
    assert runtime.service_name == "http"
    assert await runtime.run() == 42
    assert product.events == ["connect db", "start tasks", "stop tasks", "close db"]
    startup = runtime.last_startup_report
    shutdown = runtime.last_shutdown_report
    assert startup is not None and startup.phase_names() == ("db_connect", "tasks_start")
    assert shutdown is not None and shutdown.phase_names() == ("tasks_stop", "db_close")
    assert runtime.shutdown_token.cancelled


async def test_product_error_value_comes_back_unchanged() -> None:
    product = Product()
    value = ProductError("a returned value, not raised")
    assert await product.runtime(product.http_component(result=value)).run() is value


async def test_request_stop_cancels_tokens_and_calls_stop_once() -> None:
    product = Product()
    runtime = product.runtime(product.http_component(result="wait"), product.tasks_component())
    run = asyncio.create_task(runtime.run())
    await product.serving.wait()
    runtime.request_stop()
    runtime.request_stop()
    assert await run == 0
    assert product.events.count("stop") == 1
    assert "http saw cancel" in product.events
    assert product.events[-1] == "stop tasks"


@pytest.mark.skipif(os.name != "posix", reason="POSIX signals")
async def test_signal_and_programmatic_stop_together_stop_once() -> None:
    product = Product()
    runtime = AsterRuntime(
        components=[product.http_component(result="wait"), product.tasks_component()]
    )
    before = signal.getsignal(signal.SIGTERM)
    run = asyncio.create_task(runtime.run())
    await product.serving.wait()
    signal.raise_signal(signal.SIGTERM)
    runtime.request_stop()
    assert await run == 0
    assert product.events.count("stop") == 1
    assert product.events.count("stop tasks") == 1
    assert signal.getsignal(signal.SIGTERM) is before


async def test_runtime_without_service_runs_until_stopped() -> None:
    product = Product()
    worker_running = asyncio.Event()

    async def worker(token: CancellationToken) -> None:
        worker_running.set()
        await token.wait()
        product.events.append("worker stopped")

    def register(registry: RuntimeComponentRegistry) -> None:
        registry.component_task("background_tasks", Kind.TASKS, "dispatcher", worker)

    runtime = product.runtime(
        runtime_component(register), product.database_component(depends=("background_tasks",))
    )
    run = asyncio.create_task(runtime.run())
    await worker_running.wait()  # tasks start only after startup completed
    runtime.request_stop()
    assert await run is None
    assert product.events == ["connect db", "worker stopped", "close db"]


async def test_required_startup_failure_runs_best_effort_shutdown_first() -> None:
    product = Product()
    original = ProductError("cannot connect: password=hunter2")
    started_tasks: list[str] = []

    async def connect() -> None:
        raise original

    def tasks(registry: RuntimeComponentRegistry) -> None:
        registry.component_startup(
            "background_tasks", Kind.TASKS, "tasks_start", product.note("start tasks")
        )
        registry.component_shutdown(
            "background_tasks", Kind.TASKS, "tasks_stop", None, product.note("stop tasks")
        )

    def database(registry: RuntimeComponentRegistry) -> None:
        # The database starts after the tasks here (tasks depend on nothing, db on tasks
        # reversed); its shutdown must tolerate "never started".
        async def close() -> None:
            started_tasks.append("db close called")

        registry.component_startup("database", Kind.DATABASE, "db_connect", connect)
        registry.component_shutdown("database", Kind.DATABASE, "db_close", None, close)
        registry.component("background_tasks", Kind.TASKS, depends_on=["database"])

    runtime = product.runtime(
        product.http_component(result=1), runtime_component(database), runtime_component(tasks)
    )
    with pytest.raises(AsterRuntimeStartupError) as caught:
        await runtime.run()
    error = caught.value
    assert isinstance(error, AsterRuntimeError)
    assert error.__cause__ is original
    assert [p.status for p in error.report.phases] == [
        StartupPhaseStatus.SUCCEEDED,
        StartupPhaseStatus.FAILED,
    ]
    assert error.report.phase_names() == ("tasks_start", "db_connect")
    started = {p.component: p.component_started for p in error.shutdown_report.phases}
    assert started == {"background_tasks": True, "database": False}
    assert product.events == ["start tasks", "stop tasks"]
    assert started_tasks == ["db close called"]
    assert not product.serving.is_set()
    assert "hunter2" not in repr(error.report) + repr(error.shutdown_report)


async def test_stop_during_startup_cancels_remaining_phases() -> None:
    product = Product()
    entered = asyncio.Event()

    async def slow_connect() -> None:
        entered.set()
        await asyncio.Event().wait()

    runtime = product.runtime(
        product.http_component(result=1),
        product.database_component(startup=slow_connect),
        product.tasks_component(),
    )
    run = asyncio.create_task(runtime.run())
    await entered.wait()
    runtime.request_stop()
    with pytest.raises(AsterRuntimeStartupError) as caught:
        await run
    assert caught.value.report.cancelled
    assert caught.value.report.phase_names() == ("db_connect",)
    assert "start tasks" not in product.events
    assert caught.value.shutdown_report.phase_names() == ("tasks_stop", "db_close")


async def test_service_exception_still_runs_cleanup_and_keeps_the_root_cause() -> None:
    product = Product()
    original = ProductError("service crashed")
    runtime = product.runtime(
        product.http_component(fail=original),
        product.tasks_component(),
        product.database_component(),
    )
    with pytest.raises(AsterRuntimeServiceError) as caught:
        await runtime.run()
    assert caught.value.__cause__ is original
    assert caught.value.before_shutdown_panicked is False
    assert caught.value.shutdown_report.phase_names() == ("tasks_stop", "db_close")
    assert product.events[-2:] == ["stop tasks", "close db"]


async def test_before_shutdown_exception_does_not_skip_component_cleanup() -> None:
    product = Product()
    hook_error = ProductError("hook")

    async def hook() -> None:
        raise hook_error

    runtime = AsterRuntime(
        components=[product.http_component(result=3), product.database_component(depends=())],
        before_shutdown=[hook, product.note("second hook")],
        install_signal_handlers=False,
    )
    with pytest.raises(AsterRuntimeBeforeShutdownError) as caught:
        await runtime.run()
    assert caught.value.__cause__ is hook_error
    assert product.events[-2:] == ["second hook", "close db"]
    assert not caught.value.shutdown_report.has_failures()


async def test_service_and_before_shutdown_both_fail() -> None:
    product = Product()
    original = ProductError("service")

    async def hook() -> None:
        raise ProductError("hook")

    async def drain() -> None:
        raise RuntimeError("drain")

    mail = shutdown_resource_component_after(
        "mail", Kind.MAIL, "mail_drain", ["http"], None, lambda _none: drain()
    )
    runtime = AsterRuntime(
        components=[
            product.http_component(fail=original),
            mail,
            product.database_component(depends=("mail",)),
        ],
        before_shutdown=[hook],
        install_signal_handlers=False,
    )
    with pytest.raises(AsterRuntimeServiceError) as caught:
        await runtime.run()
    error = caught.value
    assert error.__cause__ is original
    assert error.before_shutdown_panicked is True
    statuses = {p.name: p.status for p in error.shutdown_report.phases}
    assert statuses["mail_drain"].is_failure()
    assert statuses["db_close"] is ShutdownPhaseStatus.SUCCEEDED


async def test_failed_shutdown_phase_raises_after_all_cleanup() -> None:
    product = Product()

    async def drain(_resource: str) -> None:
        raise RuntimeError("mandatory audit drain failed")

    runtime = product.runtime(
        product.http_component(result=5),
        shutdown_resource_component_after("audit", Kind.AUDIT, "audit_drain", [], "r", drain),
        product.database_component(depends=("audit",)),
    )
    with pytest.raises(AsterRuntimeShutdownError) as caught:
        await runtime.run()
    report = caught.value.report
    assert report.phase_names()[-1] == "db_close"
    assert [p.name for p in report.failures()] == ["audit_drain"]
    assert product.events[-1] == "close db"
    assert isinstance(caught.value.__cause__, RuntimeError)


def test_graph_errors_fail_the_build() -> None:
    product = Product()
    components = [
        product.http_component(),
        product.database_component(),  # depends on missing background_tasks
    ]
    with pytest.raises(AsterRuntimeComponentGraphError) as caught:
        AsterRuntime(components=components)
    assert isinstance(caught.value, AsterRuntimeError)
    assert caught.value.graph_error.missing == (("database", "background_tasks"),)


def test_a_component_constructors_error_surfaces_unchanged() -> None:
    original = OSError("address in use")

    def build(token: CancellationToken) -> RuntimeServiceComponent[int]:
        raise original

    with pytest.raises(OSError) as caught:
        AsterRuntime(components=[RuntimeComponentWithShutdown(build)])
    assert caught.value is original


async def test_component_gets_the_shared_root_token_and_bad_values_are_rejected() -> None:
    seen: list[CancellationToken] = []

    def build(token: CancellationToken) -> RuntimeComponentBundleRegistration[Any]:
        seen.append(token)
        return runtime_component(lambda registry: registry.component("x", Kind.CORE))

    with pytest.raises(RuntimeComponentRegistrationError):
        AsterRuntime(components=[42])
    product = Product()
    with pytest.raises(RuntimeComponentRegistrationError, match="already has service"):
        AsterRuntime(components=[product.http_component(), product.http_component()])
    runtime = AsterRuntime(
        components=[RuntimeComponentWithShutdown(build), product.http_component()],
        install_signal_handlers=False,
    )
    assert seen == [runtime.shutdown_token]
    assert await runtime.run() == 0
    with pytest.raises(RuntimeComponentRegistrationError):
        await runtime.run()


async def test_cancelling_run_cancels_root_and_service_tokens() -> None:
    service_token = CancellationToken()
    serving = asyncio.Event()

    async def serve() -> int:
        serving.set()
        await asyncio.Event().wait()
        return 0

    service = RuntimeServiceComponent("svc", Kind.CORE, serve(), service_token)
    runtime = AsterRuntime(components=[service], install_signal_handlers=False)
    run = asyncio.create_task(runtime.run())
    await serving.wait()
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert runtime.shutdown_token.cancelled and service_token.cancelled


async def test_cancelling_run_mid_service_still_runs_every_shutdown_phase() -> None:
    product = Product()
    runtime = product.runtime(
        product.http_component(result="wait"),
        product.database_component(),
        product.tasks_component(),
    )
    run = asyncio.create_task(runtime.run(), name="test-runtime-run")
    await product.serving.wait()
    assert product.events == ["connect db", "start tasks"]
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    # Dependency order, as after a normal stop: tasks before the database they use.
    assert product.events[-2:] == ["stop tasks", "close db"]
    report = runtime.last_shutdown_report
    assert report is not None and not report.has_failures()
    assert [phase.name for phase in report.phases] == ["tasks_stop", "db_close"]


async def test_keyboard_interrupt_is_reraised_after_cleanup() -> None:
    product = Product()
    runtime = product.runtime(
        product.http_component(fail=KeyboardInterrupt()), product.database_component(depends=())
    )
    with pytest.raises(KeyboardInterrupt):
        await runtime.run()
    assert product.events[-1] == "close db"


async def test_stop_hook_is_cancelled_when_the_service_ends() -> None:
    stop_entered = asyncio.Event()
    stop_cancelled = asyncio.Event()
    token = CancellationToken()

    async def serve() -> str:
        await stop_entered.wait()
        return "ended while stop hook hung"

    async def stop() -> None:
        stop_entered.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            stop_cancelled.set()
            raise

    service = RuntimeServiceComponent("svc", Kind.CORE, serve(), token, stop)
    runtime = AsterRuntime(components=[service], install_signal_handlers=False)
    runtime.request_stop()  # before run: the stop hook fires as soon as the service starts
    assert await runtime.run() == "ended while stop hook hung"
    assert stop_cancelled.is_set()


async def test_run_outside_the_main_thread_is_a_clear_signal_error() -> None:
    from aster_forge.runtime.errors import RuntimeSignalError

    errors: list[BaseException] = []

    def worker() -> None:
        async def main() -> None:
            async def serve() -> int:
                return 0

            token = CancellationToken()
            service = RuntimeServiceComponent("svc", Kind.CORE, serve(), token)
            await AsterRuntime(components=[service]).run()

        try:
            asyncio.run(main())
        except BaseException as exc:  # collected for the assertion below
            errors.append(exc)

    await asyncio.to_thread(worker)
    assert len(errors) == 1 and isinstance(errors[0], RuntimeSignalError)


async def test_a_stop_hook_that_raises_is_logged_and_the_runtime_still_stops(
    caplog: pytest.LogCaptureFixture,
) -> None:
    token = CancellationToken()

    async def serve() -> str:
        await token.wait()  # the service ends once the runtime cancels its token
        return "stopped"

    async def stop() -> None:
        raise ProductError("the stop hook broke")

    service = RuntimeServiceComponent("svc", Kind.CORE, serve(), token, stop)
    runtime = AsterRuntime(components=[service], install_signal_handlers=False)
    runtime.request_stop()
    with caplog.at_level("ERROR", logger="aster_forge.runtime"):
        assert await runtime.run() == "stopped"
    (logged,) = [r for r in caplog.records if "stop hook" in r.getMessage()]
    assert "svc" in logged.getMessage() and "ProductError" in logged.getMessage()
    assert "the stop hook broke" not in logged.getMessage()  # the type, not the text
