"""The runtime component registry: the one place components' hooks are declared and run in order."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

from ._cancellation import CancellationToken
from ._clock import Clock, SystemClock
from ._component_task import ComponentTask
from ._descriptors import (
    RuntimeComponentDescriptor,
    RuntimeComponentKind,
    RuntimeShutdownDescriptor,
    RuntimeStartupDescriptor,
)
from ._graph import find_cycle, missing_dependencies, shutdown_order, startup_order
from ._health import HealthComponentReport, SystemHealthReport
from ._health_options import HealthCheckOptions, HealthCheckScope
from ._health_registry import HealthCheckRegistry
from ._isolation import DEFAULT_ABANDON_GRACE
from ._phases import (
    ShutdownPhase,
    ShutdownRun,
    StartupPhase,
    StartupRun,
    check_name,
    check_shutdown_phase,
    once_phase,
    run_shutdown_phases,
    run_startup_phases,
)
from ._reports import ShutdownReport, StartupPhaseFailurePolicy, StartupPhaseStatus, StartupReport
from .errors import (
    RuntimeComponentGraphError,
    RuntimeComponentRegistrationError,
)
from .protocols import RuntimeComponentBundle

__all__ = [
    "RuntimeComponentRegistry",
]

logger = logging.getLogger("aster_forge.runtime")
R = TypeVar("R")


@dataclass(eq=False, slots=True)
class _Component:
    name: str
    kind: RuntimeComponentKind
    depends_on: list[str] = field(default_factory=list)
    checks: list[str] = field(default_factory=list)
    startup: list[StartupPhase] = field(default_factory=list)
    shutdown: list[ShutdownPhase] = field(default_factory=list)
    tasks: dict[str, ComponentTask] = field(default_factory=dict)
    # Catalog-only task names (nothing started, no phase), e.g. runtime-task definitions.
    task_names: list[str] = field(default_factory=list)

    def descriptor(self) -> RuntimeComponentDescriptor:
        return RuntimeComponentDescriptor(
            name=self.name,
            kind=self.kind,
            depends_on=tuple(self.depends_on),
            health_checks=tuple(self.checks),
            startup_phases=tuple(
                RuntimeStartupDescriptor(self.name, p.name, p.policy) for p in self.startup
            ),
            shutdown_phases=tuple(
                RuntimeShutdownDescriptor(self.name, p.name, p.timeout) for p in self.shutdown
            ),
            tasks=tuple(self.tasks) + tuple(n for n in self.task_names if n not in self.tasks),
        )


def _warn_duplicate(component: str, phase: str, what: str) -> None:
    # Almost always a bundle registered twice; every phase still runs.
    logger.warning(
        "component %s registers %s phase %s more than once; all of them will run",
        component,
        what,
        phase,
        extra={"component": component, "phase": phase},
    )


class RuntimeComponentRegistry:
    """The catalog of runtime components and their lifecycle hooks.

    Components declare a kind, dependencies, health checks, startup phases, background
    tasks and shutdown phases. :meth:`shutdown` follows the dependency graph (not the
    registration order); :meth:`validate` rejects missing dependencies and cycles.

    Example:
        >>> registry = RuntimeComponentRegistry()
        >>> async def close_db(handle: str) -> None: ...
        >>> registry.component_shutdown_once(
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

    def component(
        self,
        name: str,
        kind: RuntimeComponentKind,
        *,
        depends_on: Iterable[str] = (),
        task_names: Iterable[str] = (),
    ) -> None:
        """Declare (or extend) a component; declaring it again with another kind raises.

        ``depends_on`` shut down before it (and start after it); ``task_names`` are
        catalog metadata only (its descriptor's ``tasks``): nothing is started.
        """
        component = self._declare(name, kind)
        for dep in depends_on:
            check_name(dep, "dependency name")
            if dep not in component.depends_on:
                component.depends_on.append(dep)
        for task_name in task_names:
            check_name(task_name, "task name")
            if task_name not in component.task_names:
                component.task_names.append(task_name)

    def _declare(self, name: str, kind: RuntimeComponentKind) -> _Component:
        check_name(name, "component name")
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
        return existing

    def register_bundle(self, bundle: RuntimeComponentBundle) -> None:
        """Let ``bundle`` register its components."""
        if not isinstance(bundle, RuntimeComponentBundle):
            raise RuntimeComponentRegistrationError(
                f"register_bundle() needs an object with register(registry), "
                f"got {type(bundle).__name__}"
            )
        bundle.register(self)

    def component_health_with_options(
        self,
        component: str,
        kind: RuntimeComponentKind,
        check_name: str,
        options: HealthCheckOptions,
        check: Callable[[], Awaitable[HealthComponentReport]],
    ) -> None:
        """Register a health check owned by ``component`` (declared if new)."""
        owner = self._declare(component, kind)
        self._health.register_with_options(check_name, options, check)
        owner.checks.append(check_name)

    def component_startup(
        self,
        component: str,
        kind: RuntimeComponentKind,
        phase: str,
        fn: Callable[[], Awaitable[Any]],
        *,
        optional: bool = False,
    ) -> None:
        """Register a startup phase (components start in reverse shutdown order).

        A phase that fails aborts startup; an ``optional`` one is recorded as skipped
        after its failure and startup goes on.
        """
        owner = self._declare(component, kind)
        check_name(phase, "startup phase name")
        if not callable(fn):
            raise RuntimeComponentRegistrationError(f"startup phase {phase!r}: fn is not callable")
        if any(p.name == phase for p in owner.startup):
            _warn_duplicate(owner.name, phase, "startup")
        policy = (
            StartupPhaseFailurePolicy.OPTIONAL if optional else StartupPhaseFailurePolicy.REQUIRED
        )
        owner.startup.append(StartupPhase(phase, policy, fn, owner.name))

    def component_task(
        self,
        component: str,
        kind: RuntimeComponentKind,
        task_name: str,
        fn: Callable[[CancellationToken], Awaitable[Any]],
        *,
        critical: bool = False,
    ) -> None:
        """Register a background task ``fn(token)`` started after startup.

        Shutdown cancels its token and joins it in a phase named ``task_name``. A task
        that ends by raising is logged at ERROR with its traceback when it ends, and its
        phase fails in the shutdown report. ``critical``: its crash also stops the
        runtime (a stop request: every component shuts down in order, and ``run()``
        raises ``AsterRuntimeShutdownError``), for a loop the process is useless without.
        """
        owner = self._declare(component, kind)
        check_name(task_name, "task name")
        if task_name in owner.tasks:
            raise RuntimeComponentRegistrationError(
                f"component {owner.name!r} already has a task named {task_name!r}"
            )
        task = owner.tasks[task_name] = ComponentTask(owner.name, task_name, fn, critical=critical)
        self.component_shutdown(component, kind, task_name, None, task.join)

    def component_shutdown(
        self,
        component: str,
        kind: RuntimeComponentKind,
        phase: str,
        depends_on: Iterable[str] | None,
        fn: Callable[[], Awaitable[Any]],
        *,
        timeout: timedelta | None = None,
    ) -> None:
        """Register a shutdown phase; a component's phases run in registration order."""
        self.component(component, kind, depends_on=depends_on or ())
        owner = self._components[component]
        check_shutdown_phase(phase, timeout)
        if any(p.name == phase for p in owner.shutdown):
            _warn_duplicate(owner.name, phase, "shutdown")
        owner.shutdown.append(ShutdownPhase(phase, timeout, fn, owner.name))

    def component_shutdown_once(
        self,
        component: str,
        kind: RuntimeComponentKind,
        phase: str,
        depends_on: Iterable[str] | None,
        resource: R,
        fn: Callable[[R], Awaitable[None]],
        *,
        timeout: timedelta | None = None,
    ) -> None:
        """Register a shutdown phase that consumes ``resource`` exactly once."""
        self.component_shutdown(
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

    def _graph(self) -> dict[str, list[str]]:
        return {c.name: c.depends_on for c in self._components.values()}

    def validate(self) -> None:
        """Raise :class:`RuntimeComponentGraphError` naming missing dependencies or a cycle."""
        missing = missing_dependencies(self._graph())
        cycle = find_cycle(self._graph())
        if missing or cycle:
            raise RuntimeComponentGraphError(missing=missing, cycle=cycle)

    def shutdown_order(self) -> tuple[str, ...]:
        """Return component names in shutdown order (dependencies first, ties by registration)."""
        return shutdown_order(self._graph())

    def startup_order(self) -> tuple[str, ...]:
        """Return component names in startup order (the reverse relation of shutdown)."""
        return startup_order(self._graph())

    # -- lifecycle --------------------------------------------------------------------

    async def run_health(self, scope: HealthCheckScope) -> SystemHealthReport:
        """Run the components' health checks registered for ``scope``."""
        return await self._health.run_scope(scope)

    async def startup(self, token: CancellationToken | None = None) -> StartupReport:
        """Run every component's startup phases in startup order and return the report.

        A failed required phase aborts; cancelling ``token`` (a stop request) cancels the
        running phase and skips the rest.
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
                run_shutdown_phases(
                    phases, clock=self._clock, grace=self._grace, started=self._component_started
                ),
                name="aster-forge:component-shutdown",
            )
        # Shielded: a cancelled caller must not abort cleanup half-way.
        return await asyncio.shield(self._shutdown_task)
