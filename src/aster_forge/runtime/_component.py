"""Runtime components: kinds, descriptors, bundles and the registry that runs them in order."""

from __future__ import annotations

import asyncio
import enum
import heapq
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from ._cancellation import CancellationToken
from ._clock import Clock, SystemClock
from ._health import HealthComponentReport, SystemHealthReport
from ._health_registry import HealthCheckOptions, HealthCheckRegistry, HealthCheckScope
from ._isolation import DEFAULT_ABANDON_GRACE, _Escape, _guarded
from ._phases import (
    ShutdownReport,
    ShutdownRun,
    StartupPhase,
    StartupPhaseFailurePolicy,
    StartupPhaseStatus,
    StartupReport,
    StartupRun,
    _check_phase,
    _Phase,
    once_phase,
    run_startup_phases,
)
from ._phases import run_shutdown_phases as _run_shutdown_phases
from .errors import (
    RuntimeComponentGraphError,
    RuntimeComponentRegistrationError,
    ShutdownPhaseFailure,
)

__all__ = [
    "COMPONENT_TASK_FAILED",
    "RuntimeComponentBundle",
    "RuntimeComponentBundleRegistration",
    "RuntimeComponentDescriptor",
    "RuntimeComponentKind",
    "RuntimeComponentRegistry",
    "RuntimeShutdownDescriptor",
    "RuntimeStartupDescriptor",
    "find_cycle",
    "runtime_component",
    "shutdown_resource_component_after",
    "topological_order",
]

B = TypeVar("B", bound="RuntimeComponentBundle")
logger = logging.getLogger("aster_forge.runtime")
R = TypeVar("R")


class RuntimeComponentKind(enum.StrEnum):
    """What kind of subsystem a component is (for catalogs and admin views)."""

    CORE = "core"
    HTTP = "http"
    TASKS = "tasks"
    MAIL = "mail"
    DATABASE = "database"
    CACHE = "cache"
    STORAGE = "storage"
    AUDIT = "audit"
    CONFIG = "config"
    METRICS = "metrics"
    PRODUCT = "product"
    OTHER = "other"


@dataclass(frozen=True, slots=True)
class RuntimeShutdownDescriptor:
    """A registered shutdown phase: its component, name and timeout."""

    component: str
    phase: str
    timeout: timedelta | None


@dataclass(frozen=True, slots=True)
class RuntimeStartupDescriptor:
    """A registered startup phase: its component, name and failure policy."""

    component: str
    phase: str
    policy: StartupPhaseFailurePolicy


@dataclass(frozen=True, slots=True)
class RuntimeComponentDescriptor:
    """What a component declared: kind, dependencies, checks, phases and tasks.

    ``depends_on`` names the components that shut down *before* this one (a database
    depends on the background tasks that use it, so the tasks stop first).
    """

    name: str
    kind: RuntimeComponentKind
    depends_on: tuple[str, ...] = ()
    health_checks: tuple[str, ...] = ()
    startup_phases: tuple[RuntimeStartupDescriptor, ...] = ()
    shutdown_phases: tuple[RuntimeShutdownDescriptor, ...] = ()
    tasks: tuple[str, ...] = ()


@runtime_checkable
class RuntimeComponentBundle(Protocol):
    """Anything that registers components into a :class:`RuntimeComponentRegistry`."""

    def register(self, registry: RuntimeComponentRegistry) -> None:
        """Register this bundle's components, checks and phases into ``registry``."""
        ...


class _FnBundle:
    __slots__ = ("_fn",)

    def __init__(self, fn: Callable[[RuntimeComponentRegistry], object]) -> None:
        self._fn = fn

    def register(self, registry: RuntimeComponentRegistry) -> None:
        self._fn(registry)


class RuntimeComponentBundleRegistration(Generic[B]):
    """A bundle ready for ``.component(...)`` or :meth:`RuntimeComponentRegistry.register_bundle`.

    Subsystems return this from their ``*_component(...)`` factories.
    """

    __slots__ = ("bundle",)

    def __init__(self, bundle: B) -> None:
        self.bundle = bundle

    def register(self, registry: RuntimeComponentRegistry) -> None:
        """Register the wrapped bundle into ``registry``."""
        self.bundle.register(registry)

    def __repr__(self) -> str:
        return f"RuntimeComponentBundleRegistration({self.bundle!r})"


def runtime_component(
    bundle: B | Callable[[RuntimeComponentRegistry], object],
) -> RuntimeComponentBundleRegistration[Any]:
    """Adapt a bundle, or a ``fn(registry)`` that registers things, for ``.component(...)``.

    Example:
        >>> def core_component() -> RuntimeComponentBundleRegistration[Any]:
        ...     def register(registry: RuntimeComponentRegistry) -> None:
        ...         registry.component("core", RuntimeComponentKind.CORE)
        ...     return runtime_component(register)
    """
    if isinstance(bundle, RuntimeComponentBundle):
        return RuntimeComponentBundleRegistration(bundle)
    if callable(bundle):
        return RuntimeComponentBundleRegistration(_FnBundle(bundle))
    raise RuntimeComponentRegistrationError(
        f"runtime_component() needs a bundle or a callable, got {type(bundle).__name__}"
    )


def topological_order(nodes: list[str], preds: Mapping[str, Iterable[str]]) -> tuple[str, ...]:
    """Order ``nodes`` so each comes after its ``preds``; ties keep the input order."""
    index = {name: i for i, name in enumerate(nodes)}
    remaining = {name: set(preds[name]) for name in nodes}
    followers: dict[str, list[str]] = {name: [] for name in nodes}
    for name, before in remaining.items():
        for dep in before:
            followers[dep].append(name)
    ready = [(index[n], n) for n in nodes if not remaining[n]]
    heapq.heapify(ready)
    order: list[str] = []
    while ready:
        _, name = heapq.heappop(ready)
        order.append(name)
        for follower in followers[name]:
            remaining[follower].discard(name)
            if not remaining[follower]:
                heapq.heappush(ready, (index[follower], follower))
    if len(order) < len(nodes):
        # A cycle (validate() would have refused it): keep going in registration order.
        rest = [n for n in nodes if n not in set(order)]
        logger.error("component dependency cycle among %s", ", ".join(rest))
        order.extend(rest)
    return tuple(order)


def find_cycle(graph: Mapping[str, Sequence[str]]) -> tuple[str, ...]:
    """Return one dependency cycle (in dependency order), or ``()`` when there is none.

    Iterative depth-first search, so long dependency chains cannot hit the recursion limit.
    Edges to nodes outside ``graph`` are ignored (they are reported as missing elsewhere).
    """
    done: set[str] = set()
    for root in graph:
        if root in done:
            continue
        path: list[str] = [root]
        on_path = {root}
        iterators = [iter(graph[root])]
        while iterators:
            dep = next(iterators[-1], None)
            if dep is None:
                finished = path.pop()
                on_path.discard(finished)
                done.add(finished)
                iterators.pop()
                continue
            if dep not in graph or dep in done:
                continue
            if dep in on_path:
                return tuple(path[path.index(dep) :])
            path.append(dep)
            on_path.add(dep)
            iterators.append(iter(graph[dep]))
    return ()


#: The fixed text of a component task's shutdown phase when the task had raised.
COMPONENT_TASK_FAILED = "component task failed"


class _Component:
    __slots__ = (
        "checks",
        "depends_on",
        "kind",
        "name",
        "shutdown",
        "startup",
        "task_names",
        "tasks",
    )

    def __init__(self, name: str, kind: RuntimeComponentKind) -> None:
        self.name = name
        self.kind = kind
        self.depends_on: list[str] = []
        self.checks: list[str] = []
        self.startup: list[StartupPhase] = []
        self.shutdown: list[_Phase] = []
        self.tasks: dict[str, _ComponentTask] = {}
        # Catalog-only task names (nothing started, no phase), e.g. runtime-task definitions.
        self.task_names: list[str] = []

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


class _ComponentTask:
    """A background task owned by a component: started with the runtime, joined at shutdown.

    It is supervised: when it ends by raising, the error is logged at once (not only in
    the shutdown report), and a ``critical`` task also stops the runtime.
    """

    def __init__(
        self,
        component: str,
        name: str,
        fn: Callable[[CancellationToken], Awaitable[Any]],
        *,
        critical: bool = False,
    ) -> None:
        self.component = component
        self.name = name
        self.fn = fn
        self.critical = critical
        self.token: CancellationToken | None = None
        self.parent: CancellationToken | None = None
        self.task: asyncio.Task[Any] | None = None

    def start(self, parent: CancellationToken) -> None:
        if self.task is not None:
            return
        self.parent = parent
        token = self.token = parent.child_token()
        fn = self.fn
        self.task = asyncio.create_task(
            _guarded(lambda: fn(token)), name=f"aster-forge:component-task:{self.name}"
        )
        self.task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[Any]) -> None:
        if task.cancelled():
            return
        error = task.exception()
        if error is None:
            return
        if not isinstance(error, _Escape):
            stopping = "; stopping the runtime" if self.critical else ""
            logger.error(
                "component task %s of %s crashed: %s: %s%s",
                self.name,
                self.component,
                type(error).__name__,
                error,
                stopping,
                exc_info=error,
                extra={"component": self.component, "component_task": self.name},
            )
        if self.critical and self.parent is not None:
            self.parent.cancel()  # as a stop request: every component shuts down in order

    async def join(self) -> None:
        # Tolerates "never started": the runtime may shut down after a startup abort.
        if self.token is not None:
            self.token.cancel()
        if self.task is None:
            return
        await asyncio.wait({self.task})
        if not self.task.cancelled() and self.task.exception() is not None:
            raise ShutdownPhaseFailure(COMPONENT_TASK_FAILED)


def _check_name(name: object, what: str) -> None:
    if not isinstance(name, str) or not name:
        raise RuntimeComponentRegistrationError(f"{what} must be a non-empty string, got {name!r}")


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
        """Declare (or extend) a component.

        Args:
            name: The component name.
            kind: Its kind; declaring the name again with another kind raises.
            depends_on: Components that must shut down before this one (start after it).
            task_names: Tasks it runs, as catalog metadata only (its descriptor's
                ``tasks``): nothing is started and no phase is added.

        Raises:
            RuntimeComponentRegistrationError: An empty name, or another kind.
        """
        component = self._declare(name, kind)
        for dep in depends_on:
            _check_name(dep, "dependency name")
            if dep not in component.depends_on:
                component.depends_on.append(dep)
        for task_name in task_names:
            _check_name(task_name, "task name")
            if task_name not in component.task_names:
                component.task_names.append(task_name)

    def _declare(self, name: str, kind: RuntimeComponentKind) -> _Component:
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
        policy: StartupPhaseFailurePolicy = StartupPhaseFailurePolicy.REQUIRED,
    ) -> None:
        """Register a startup phase (components start in reverse shutdown order)."""
        owner = self._declare(component, kind)
        _check_name(phase, "startup phase name")
        if not callable(fn):
            raise RuntimeComponentRegistrationError(f"startup phase {phase!r}: fn is not callable")
        if any(p.name == phase for p in owner.startup):
            _warn_duplicate(owner.name, phase, "startup")
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
        _check_name(task_name, "task name")
        if task_name in owner.tasks:
            raise RuntimeComponentRegistrationError(
                f"component {owner.name!r} already has a task named {task_name!r}"
            )
        task = owner.tasks[task_name] = _ComponentTask(owner.name, task_name, fn, critical=critical)
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
        _check_phase(phase, timeout)
        if any(p.name == phase for p in owner.shutdown):
            _warn_duplicate(owner.name, phase, "shutdown")
        owner.shutdown.append(_Phase(phase, timeout, fn, owner.name))

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
