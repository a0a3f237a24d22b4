"""AsterRuntime: the product entrypoint that ties components, signals and shutdown together."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Generic, NoReturn, TypeVar

from ._cancellation import CancellationToken
from ._clock import Clock
from ._component import (
    RuntimeComponentBundle,
    RuntimeComponentDescriptor,
    RuntimeComponentKind,
    RuntimeComponentRegistry,
)
from ._health import SystemHealthReport
from ._health_registry import HealthCheckScope
from ._isolation import DEFAULT_ABANDON_GRACE, OutcomeKind, run_isolated
from ._phases import ShutdownReport, StartupReport, log_shutdown_report
from ._signals import TerminationSignal, _default_force_exit, _SignalInstallation
from .errors import (
    AsterRuntimeBeforeShutdownError,
    AsterRuntimeComponentGraphError,
    AsterRuntimeServiceError,
    AsterRuntimeShutdownError,
    AsterRuntimeStartupError,
    RuntimeComponentGraphError,
    RuntimeComponentRegistrationError,
    RuntimeSignalError,
)

__all__ = [
    "AsterRuntime",
    "RuntimeComponentWithShutdown",
    "RuntimeServiceComponent",
]

T = TypeVar("T")

logger = logging.getLogger("aster_forge.runtime")


@dataclass(eq=False, slots=True)
class RuntimeServiceComponent(Generic[T]):
    """The service the runtime runs until it ends or a stop is requested (e.g. an HTTP server).

    Attributes:
        name: The component name.
        kind: The component kind.
        service: The awaitable to run; its result is what ``AsterRuntime.run()`` returns.
        token: The token the service watches; cancelled on stop (with the root token).
        stop: Called once on a stop request (signal or ``request_stop()``) to stop the
            service gracefully; it may be cancelled once the service has ended.
    """

    name: str
    kind: RuntimeComponentKind
    service: Awaitable[T]
    token: CancellationToken
    stop: Callable[[], Awaitable[Any]] | None = None

    def register(self, registry: RuntimeComponentRegistry) -> None:
        """Register the service's descriptor (it owns no phases)."""
        registry.component(self.name, self.kind)

    def discard(self) -> None:
        """Close the service awaitable when it will never run (avoids 'never awaited')."""
        close = getattr(self.service, "close", None)
        if callable(close):
            close()


@dataclass(frozen=True, slots=True)
class RuntimeComponentWithShutdown:
    """A component built once the runtime hands ``build`` its shared shutdown token.

    ``build(token)`` returns a bundle or a ``RuntimeServiceComponent``; its exception
    comes out of ``AsterRuntime(...)`` unchanged (same type).
    """

    build: Callable[[CancellationToken], object]


class AsterRuntime:
    """Runs a service with its components: startup, signals, dependency-ordered shutdown.

    The constructor registers every component and validates the dependency graph.
    ``run()``: install signal handlers; run component startup phases (a stop request
    cancels the remaining ones; a failed required phase aborts); start component tasks;
    run the service until it ends (a signal or :meth:`request_stop` cancels the tokens
    and calls the service's stop hook); cancel and join the stop listener; run the
    before-shutdown hooks; shut components down in dependency order; log the report.
    Failures surface as :class:`~aster_forge.runtime.AsterRuntimeError` subclasses
    *after* all cleanup; ``KeyboardInterrupt``/``SystemExit`` are re-raised after cleanup.

    Args:
        components: Bundles, at most one ``RuntimeServiceComponent``, and
            ``RuntimeComponentWithShutdown`` values (built with ``shutdown_token``).
        install_signal_handlers: Whether ``run()`` installs SIGINT/SIGTERM handlers.
        before_shutdown: Hooks run after the service ended, before component shutdown.
        clock: The clock for phase deadlines and durations (tests use a manual clock).
        abandon_grace: How long a phase that ignores cancellation gets before it is
            abandoned.
        shutdown_token: The shared root token every component receives (default: new).

    Raises:
        RuntimeComponentRegistrationError: Not a component, or a second service.
        AsterRuntimeComponentGraphError: A missing dependency or a cycle.
        Exception: A ``RuntimeComponentWithShutdown.build`` error, unchanged.

    Example:
        >>> runtime = AsterRuntime(install_signal_handlers=False)
        >>> runtime.descriptors()
        ()
    """

    def __init__(
        self,
        *,
        components: Iterable[object] = (),
        install_signal_handlers: bool = True,
        before_shutdown: Iterable[Callable[[], Awaitable[Any]]] = (),
        clock: Clock | None = None,
        abandon_grace: timedelta = DEFAULT_ABANDON_GRACE,
        shutdown_token: CancellationToken | None = None,
    ) -> None:
        self._token = shutdown_token if shutdown_token is not None else CancellationToken()
        self._service: RuntimeServiceComponent[Any] | None = None
        self._before_shutdown = tuple(before_shutdown)
        self._install_signals = install_signal_handlers
        self._force_exit: Callable[[TerminationSignal], None] = _default_force_exit
        self._ran = False
        self._signals_received = 0
        self._registry = RuntimeComponentRegistry(clock=clock, grace=abandon_grace)
        try:
            for component in components:
                self._add(component)
            self._registry.validate()
        except RuntimeComponentGraphError as exc:
            self._discard_service()
            raise AsterRuntimeComponentGraphError(exc) from exc
        except BaseException:
            self._discard_service()
            raise

    def _add(self, component: object) -> None:
        if isinstance(component, RuntimeComponentWithShutdown):
            component = component.build(self._token)
        if isinstance(component, RuntimeServiceComponent):
            if self._service is not None:
                component.discard()
                raise RuntimeComponentRegistrationError(
                    f"runtime already has service {self._service.name!r}; "
                    f"cannot add {component.name!r}"
                )
            self._service = component
        elif not isinstance(component, RuntimeComponentBundle):
            raise RuntimeComponentRegistrationError(
                f"components needs bundles, a RuntimeServiceComponent or "
                f"*_with_shutdown values, got {type(component).__name__}"
            )
        self._registry.register_bundle(component)

    def _discard_service(self) -> None:
        if self._service is not None:
            self._service.discard()

    @property
    def registry(self) -> RuntimeComponentRegistry:
        """The component registry (for health endpoints and admin views)."""
        return self._registry

    @property
    def shutdown_token(self) -> CancellationToken:
        """The shared root token."""
        return self._token

    @property
    def service_name(self) -> str | None:
        """The service component's name, if there is one."""
        return None if self._service is None else self._service.name

    @property
    def last_startup_report(self) -> StartupReport | None:
        """The startup report of :meth:`run`, once startup ended."""
        return self._registry.last_startup_report

    @property
    def last_shutdown_report(self) -> ShutdownReport | None:
        """The shutdown report of :meth:`run`, once shutdown ended."""
        return self._registry.last_shutdown_report

    def descriptors(self) -> tuple[RuntimeComponentDescriptor, ...]:
        """Every component's descriptor (name, kind, depends_on, checks, phases)."""
        return self._registry.descriptors()

    async def run_health(self, scope: HealthCheckScope) -> SystemHealthReport:
        """Run the components' health checks for ``scope``."""
        return await self._registry.run_health(scope)

    def request_stop(self) -> None:
        """Ask the runtime to stop (as a termination signal would); idempotent."""
        self._token.cancel()

    def _on_signal(self, label: TerminationSignal) -> None:
        self._signals_received += 1
        if self._signals_received == 1:
            logger.warning(
                "received %s; shutting down (send it again to force exit)",
                label.value,
                extra={"signal": label.value},
            )
            self._token.cancel()
            return
        self._force(label)

    def _on_repeated_signal(self, label: TerminationSignal) -> None:
        # Runs in the signal handler itself: the loop may be blocked by a task body.
        self._signals_received += 1
        self._force(label)

    def _force(self, label: TerminationSignal) -> None:
        logger.error("received %s again; forcing exit", label.value)
        self._force_exit(label)

    def _cancel_tokens(self) -> None:
        self._token.cancel()
        if self._service is not None:
            self._service.token.cancel()

    async def _stop_service(self, service: RuntimeServiceComponent[Any]) -> None:
        await self._token.wait()
        service.token.cancel()
        if service.stop is None:
            return
        try:
            await service.stop()
        except Exception as exc:
            logger.error("service %s stop hook raised %s", service.name, type(exc).__name__)

    async def run(self) -> Any:
        """Run until the service ends (or, without a service, until a stop request).

        Returns:
            The service's own return value, unchanged, when all cleanup succeeded.

        Raises:
            AsterRuntimeStartupError: Startup aborted or was interrupted (after cleanup).
            AsterRuntimeServiceError: The service raised (chained as ``__cause__``).
            AsterRuntimeBeforeShutdownError: A before-shutdown hook raised.
            AsterRuntimeShutdownError: A shutdown phase failed or timed out.
            RuntimeSignalError: Signal handlers could not be installed.
        """
        if self._ran:
            raise RuntimeComponentRegistrationError("AsterRuntime.run() can only be called once")
        self._ran = True
        installation = _SignalInstallation(self._on_signal, on_repeat=self._on_repeated_signal)
        stopper: asyncio.Task[None] | None = None
        try:
            if self._install_signals:
                try:
                    installation.install()
                except RuntimeSignalError:
                    if self._service is not None:
                        self._service.discard()
                    raise
            startup = await self._registry._run_startup(self._token)
            if startup.escaped is not None or not startup.report.succeeded():
                return await self._abort_startup(
                    startup.report, startup.escaped, startup.first_error
                )
            self._registry.start_tasks(self._token)
            service = self._service
            if service is None:
                outcome = await run_isolated("service", self._token.wait)
            else:
                stopper = asyncio.create_task(
                    self._stop_service(service), name="aster-forge:service-stop"
                )
                outcome = await run_isolated(service.name, lambda: service.service)
            # The listener only stops the service: cancel and join it before cleanup.
            await _join(stopper)
            stopper = None
            self._cancel_tokens()
            return await self._cleanup(outcome.kind, outcome.value, outcome.error)
        except asyncio.CancelledError:
            # Cancelled from outside: stop everything, but still run the component
            # shutdown (shielded, each phase bounded by its timeout) before propagating.
            self._cancel_tokens()
            await _join(stopper)
            stopper = None
            shutdown = await self._registry._run_shutdown()
            log_shutdown_report(shutdown.report)
            raise
        finally:
            await _join(stopper)
            installation.restore()

    async def _abort_startup(
        self,
        report: StartupReport,
        escaped: BaseException | None,
        first_error: BaseException | None,
    ) -> NoReturn:
        self._cancel_tokens()
        if self._service is not None:
            self._service.discard()
        shutdown = await self._registry._run_shutdown()
        log_shutdown_report(shutdown.report)
        for interrupt in (escaped, shutdown.escaped):
            if interrupt is not None:
                raise interrupt
        raise AsterRuntimeStartupError(report, shutdown.report) from first_error

    async def _cleanup(self, kind: OutcomeKind, value: Any, error: BaseException | None) -> Any:
        before_error: BaseException | None = None
        interrupt = error if kind is OutcomeKind.ESCAPED else None
        for hook in self._before_shutdown:
            hook_outcome = await run_isolated("before_shutdown", hook)
            if hook_outcome.kind is OutcomeKind.ESCAPED:
                interrupt = interrupt or hook_outcome.error
            elif hook_outcome.kind is not OutcomeKind.OK:
                logger.error("before-shutdown hook failed; component cleanup continues")
                before_error = before_error or hook_outcome.error
        shutdown = await self._registry._run_shutdown()
        log_shutdown_report(shutdown.report)
        interrupt = interrupt or shutdown.escaped
        if interrupt is not None:
            raise interrupt
        if kind is not OutcomeKind.OK:
            raise AsterRuntimeServiceError(shutdown.report, before_error is not None) from error
        if before_error is not None:
            raise AsterRuntimeBeforeShutdownError(shutdown.report) from before_error
        if shutdown.report.has_failures():
            raise AsterRuntimeShutdownError(shutdown.report) from shutdown.first_error
        return value


async def _join(task: asyncio.Task[None] | None) -> None:
    if task is not None:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
