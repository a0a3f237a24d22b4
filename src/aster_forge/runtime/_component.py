"""The runtime component registry: descriptors, health, startup, tasks and shutdown."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any, Self, TypeVar

from ._cancellation import CancellationToken
from ._clock import Clock, SystemClock
from ._component_builder import (
    COMPONENT_TASK_FAILED,
    RuntimeComponentBuilder,
    _check_name,
    _Component,
)
from ._component_graph import find_cycle, topological_order
from ._component_types import (
    RuntimeComponentBundle,
    RuntimeComponentBundleRegistration,
    RuntimeComponentDescriptor,
    RuntimeComponentKind,
    RuntimeShutdownDescriptor,
    RuntimeStartupDescriptor,
    runtime_component,
)
from ._health import HealthComponentReport, SystemHealthReport
from ._health_options import HealthCheckOptions, HealthCheckScope
from ._health_registry import HealthCheckRegistry
from ._isolation import DEFAULT_ABANDON_GRACE
from ._shutdown import ShutdownReport, ShutdownRun, _check_phase, once_phase
from ._shutdown import run_shutdown_phases as _run_shutdown_phases
from ._startup import (
    StartupPhaseFailurePolicy,
    StartupPhaseStatus,
    StartupReport,
    StartupRun,
    run_startup_phases,
)
from .errors import (
    RuntimeComponentGraphError,
    RuntimeComponentRegistrationError,
)

__all__ = [
    "COMPONENT_TASK_FAILED",
    "RuntimeComponentBuilder",
    "RuntimeComponentBundle",
    "RuntimeComponentBundleRegistration",
    "RuntimeComponentDescriptor",
    "RuntimeComponentKind",
    "RuntimeComponentRegistry",
    "RuntimeShutdownDescriptor",
    "RuntimeStartupDescriptor",
    "runtime_component",
    "shutdown_resource_component_after",
]

R = TypeVar("R")
B = TypeVar("B", bound="RuntimeComponentBundle")

logger = logging.getLogger("aster_forge.runtime")


class RuntimeComponentRegistry:
    """The catalog of runtime components and their lifecycle hooks.

    Components declare a kind, dependencies, health checks, startup phases, background
    tasks and shutdown phases. :meth:`shutdown` follows the dependency graph (not the
    registration order); :meth:`validate` rejects missing dependencies and cycles.

    Example:
        >>> registry = RuntimeComponentRegistry()
        >>> async def close_db(handle: str) -> None: ...
        >>> _ = registry.component_shutdown_once(
        ...     "database", RuntimeComponentKind.DATABASE, "close", ["tasks"], "db", close_db
        ... )
        >>> registry.descriptor("database").depends_on
        ('tasks',)
    """

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        grace: timedelta = DEFAULT_ABANDON_GRACE,
        health_registry: HealthCheckRegistry | None = None,
    ) -> None:
        self._components: dict[str, _Component] = {}
        self._clock: Clock = clock or SystemClock()
        self._grace = grace
        self._health = health_registry if health_registry is not None else HealthCheckRegistry()
        self._startup_report: StartupReport | None = None
        self._shutdown_task: asyncio.Task[ShutdownRun] | None = None

    # -- registration -----------------------------------------------------------------

    def component(self, name: str, kind: RuntimeComponentKind) -> RuntimeComponentBuilder:
        """Declare (or extend) a component and return its builder.

        Raises:
            RuntimeComponentRegistrationError: Empty name, or the name exists with another kind.
        """
        _check_name(name, "component name")
        if not isinstance(kind, RuntimeComponentKind):
            raise RuntimeComponentRegistrationError(
                f"component {name!r}: kind must be a RuntimeComponentKind, got {kind!r}"
            )
        existing = self._components.get(name)
        if existing is None:
            existing = self._components[name] = _Component(name, kind)
        elif existing.kind is not kind:
            raise RuntimeComponentRegistrationError(
                f"component {name!r} is registered as {existing.kind.value}, not {kind.value}"
            )
        return RuntimeComponentBuilder(self, existing)

    def register_bundle(self, bundle: RuntimeComponentBundle) -> Self:
        """Let ``bundle`` register its components; returns ``self`` for chaining."""
        if not isinstance(bundle, RuntimeComponentBundle):
            raise RuntimeComponentRegistrationError(
                f"register_bundle() needs an object with register(registry), "
                f"got {type(bundle).__name__}"
            )
        bundle.register(self)
        return self

    def component_health_with_options(
        self,
        component: str,
        kind: RuntimeComponentKind,
        check_name: str,
        options: HealthCheckOptions,
        check: Callable[[], Awaitable[HealthComponentReport]],
    ) -> Self:
        """Shortcut: register a health check owned by ``component``."""
        self.component(component, kind).health_with_options(check_name, options, check)
        return self

    def component_startup(
        self,
        component: str,
        kind: RuntimeComponentKind,
        phase: str,
        fn: Callable[[], Awaitable[Any]],
        policy: StartupPhaseFailurePolicy = StartupPhaseFailurePolicy.REQUIRED,
    ) -> Self:
        """Shortcut: register a startup phase owned by ``component``."""
        self.component(component, kind).startup(phase, fn, policy)
        return self

    def component_task(
        self,
        component: str,
        kind: RuntimeComponentKind,
        task_name: str,
        fn: Callable[[CancellationToken], Awaitable[Any]],
    ) -> Self:
        """Shortcut: register a background task ``fn(token)`` owned by ``component``."""
        self.component(component, kind).task(task_name, fn)
        return self

    def component_shutdown(
        self,
        component: str,
        kind: RuntimeComponentKind,
        phase: str,
        depends_on: Sequence[str] | None,
        fn: Callable[[], Awaitable[Any]],
        *,
        timeout: timedelta | None = None,
    ) -> Self:
        """Shortcut: register a shutdown phase owned by ``component``."""
        builder = self.component(component, kind).depends_on(*(depends_on or ()))
        builder.shutdown(phase, timeout, fn)
        return self

    def component_shutdown_once(
        self,
        component: str,
        kind: RuntimeComponentKind,
        phase: str,
        depends_on: Sequence[str] | None,
        resource: R,
        fn: Callable[[R], Awaitable[None]],
        *,
        timeout: timedelta | None = None,
    ) -> Self:
        """Shortcut: a shutdown phase that consumes ``resource`` exactly once."""
        return self.component_shutdown(
            component, kind, phase, depends_on, once_phase(resource, fn), timeout=timeout
        )

    # -- introspection ----------------------------------------------------------------

    @property
    def health_registry(self) -> HealthCheckRegistry:
        """The health check registry the components' checks are registered into."""
        return self._health

    def descriptors(self) -> tuple[RuntimeComponentDescriptor, ...]:
        """Return every component's descriptor, in registration order."""
        return tuple(c.descriptor() for c in self._components.values())

    def descriptor(self, name: str) -> RuntimeComponentDescriptor | None:
        """Return one component's descriptor, or ``None`` when it is not registered."""
        component = self._components.get(name)
        return None if component is None else component.descriptor()

    def __contains__(self, name: object) -> bool:
        return name in self._components

    def __len__(self) -> int:
        return len(self._components)

    @property
    def last_startup_report(self) -> StartupReport | None:
        """The report of the last :meth:`startup`, if it ran."""
        return self._startup_report

    @property
    def last_shutdown_report(self) -> ShutdownReport | None:
        """The report of :meth:`shutdown`, once it finished."""
        task = self._shutdown_task
        if task is None or not task.done() or task.cancelled() or task.exception():
            return None
        return task.result().report

    # -- graph ------------------------------------------------------------------------

    def validate(self) -> None:
        """Check the dependency graph.

        Raises:
            RuntimeComponentGraphError: A dependency is not registered, or there is a cycle;
                the error names the components involved.
        """
        missing = tuple(
            (c.name, dep)
            for c in self._components.values()
            for dep in c.depends_on
            if dep not in self._components
        )
        cycle = find_cycle({c.name: c.depends_on for c in self._components.values()})
        if missing or cycle:
            raise RuntimeComponentGraphError(missing=missing, cycle=cycle)

    def shutdown_order(self) -> tuple[str, ...]:
        """Return component names in shutdown order (dependencies first, ties by registration)."""
        preds = {
            c.name: {d for d in c.depends_on if d in self._components}
            for c in self._components.values()
        }
        return topological_order(list(self._components), preds)

    def startup_order(self) -> tuple[str, ...]:
        """Return component names in startup order (the reverse relation of shutdown)."""
        preds: dict[str, set[str]] = {name: set() for name in self._components}
        for c in self._components.values():
            for dep in c.depends_on:
                if dep in preds:
                    preds[dep].add(c.name)
        return topological_order(list(self._components), preds)

    # -- lifecycle --------------------------------------------------------------------

    async def run_health(self, scope: HealthCheckScope) -> SystemHealthReport:
        """Run the components' health checks registered for ``scope``."""
        return await self._health.run_scope(scope)

    async def startup(self, token: CancellationToken | None = None) -> StartupReport:
        """Run every component's startup phases in startup order.

        Args:
            token: A stop request; cancelling it cancels the remaining phases.

        Returns:
            The startup report.
        """
        result = await self._run_startup(token)
        if result.escaped is not None:
            raise result.escaped
        return result.report

    async def _run_startup(self, token: CancellationToken | None) -> StartupRun:
        phases = [p for name in self.startup_order() for p in self._components[name].startup]
        result = await run_startup_phases(phases, token=token, clock=self._clock, grace=self._grace)
        self._startup_report = result.report
        return result

    def start_tasks(self, token: CancellationToken) -> None:
        """Start every component task (each gets a child of ``token``); idempotent."""
        for name in self.startup_order():
            for task in self._components[name].tasks.values():
                task.start(token)

    def _component_started(self, component: str | None) -> bool | None:
        if component is None or not self._components[component].startup:
            return None
        report = self._startup_report
        if report is None:
            return False
        statuses = [p.status for p in report.phases if p.component == component]
        expected = len(self._components[component].startup)
        return len(statuses) == expected and all(
            s is StartupPhaseStatus.SUCCEEDED for s in statuses
        )

    async def shutdown(self) -> ShutdownReport:
        """Run every shutdown phase in dependency order, once (idempotent).

        Each phase is isolated and time-limited; later phases always run. Concurrent and
        later calls return the same report.
        """
        result = await self._run_shutdown()
        if result.escaped is not None:
            raise result.escaped
        return result.report

    async def _run_shutdown(self) -> ShutdownRun:
        if self._shutdown_task is None:
            phases = [p for name in self.shutdown_order() for p in self._components[name].shutdown]
            self._shutdown_task = asyncio.create_task(
                _run_shutdown_phases(
                    phases, clock=self._clock, grace=self._grace, started=self._component_started
                ),
                name="aster-forge:component-shutdown",
            )
        # Shielded: a cancelled caller must not abort cleanup half-way.
        return await asyncio.shield(self._shutdown_task)


def shutdown_resource_component_after(
    name: str,
    kind: RuntimeComponentKind,
    phase: str,
    depends_on: Sequence[str],
    resource: R,
    fn: Callable[[R], Awaitable[None]],
    *,
    timeout: timedelta | None = None,
) -> RuntimeComponentBundleRegistration[Any]:
    """A component owning a shutdown-only resource, consumed once by one phase.

    Args:
        name: The component name.
        kind: Its kind.
        phase: The shutdown phase name.
        depends_on: Components that must shut down first.
        resource: Handed to ``fn`` exactly once.
        fn: The shutdown action; raise ``ShutdownPhaseFailure(text)`` to report a failure.
        timeout: The phase deadline (``None``: no limit).

    Returns:
        A bundle for ``.component(...)`` or ``registry.register_bundle(...)``.
    """
    _check_name(name, "component name")
    _check_phase(phase, timeout)
    depends = tuple(depends_on)
    # One wrapper for every registration: a bundle registered twice still hands the
    # resource to one phase only (the duplicate reports it as already consumed).
    consume = once_phase(resource, fn)

    def register(registry: RuntimeComponentRegistry) -> None:
        registry.component_shutdown(name, kind, phase, depends, consume, timeout=timeout)

    return runtime_component(register)
