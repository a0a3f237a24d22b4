"""Per-component registration state and the chainable RuntimeComponentBuilder."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Self, TypeVar

from ._cancellation import CancellationToken
from ._component_types import (
    RuntimeComponentDescriptor,
    RuntimeComponentKind,
    RuntimeShutdownDescriptor,
    RuntimeStartupDescriptor,
)
from ._health import HealthComponentReport
from ._health_options import HealthCheckOptions
from ._isolation import _Escape, _guarded
from ._shutdown import _check_phase, _Phase, once_phase
from ._startup import StartupPhase, StartupPhaseFailurePolicy
from .errors import RuntimeComponentRegistrationError, ShutdownPhaseFailure

if TYPE_CHECKING:
    from ._component import RuntimeComponentRegistry

__all__ = ["COMPONENT_TASK_FAILED", "RuntimeComponentBuilder"]

R = TypeVar("R")

logger = logging.getLogger("aster_forge.runtime")

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


class RuntimeComponentBuilder:
    """Adds dependencies, checks and phases to one component (see ``registry.component``)."""

    __slots__ = ("_component", "_registry")

    def __init__(self, registry: RuntimeComponentRegistry, component: _Component) -> None:
        self._registry = registry
        self._component = component

    @property
    def name(self) -> str:
        """The component name."""
        return self._component.name

    def depends_on(self, *names: str) -> Self:
        """Declare components that must shut down before this one (start after it)."""
        for dep in names:
            _check_name(dep, "dependency name")
            if dep not in self._component.depends_on:
                self._component.depends_on.append(dep)
        return self

    def health_with_options(
        self,
        check_name: str,
        options: HealthCheckOptions,
        check: Callable[[], Awaitable[HealthComponentReport]],
    ) -> Self:
        """Register a health check owned by this component."""
        self._registry.health_registry.register_with_options(check_name, options, check)
        self._component.checks.append(check_name)
        return self

    def startup(
        self,
        phase: str,
        fn: Callable[[], Awaitable[Any]],
        policy: StartupPhaseFailurePolicy = StartupPhaseFailurePolicy.REQUIRED,
    ) -> Self:
        """Register a startup phase (components start in reverse shutdown order)."""
        _check_name(phase, "startup phase name")
        if not callable(fn):
            raise RuntimeComponentRegistrationError(f"startup phase {phase!r}: fn is not callable")
        if any(p.name == phase for p in self._component.startup):
            _warn_duplicate(self._component.name, phase, "startup")
        self._component.startup.append(StartupPhase(phase, policy, fn, self._component.name))
        return self

    def task(
        self,
        name: str,
        fn: Callable[[CancellationToken], Awaitable[Any]],
        *,
        critical: bool = False,
    ) -> Self:
        """Register a background task ``fn(token)`` started after startup.

        Shutdown cancels its token and joins it in a phase named ``name``. A task that
        ends by raising is logged at ERROR with its traceback when it ends, and its phase
        fails in the shutdown report. ``critical``: its crash also stops the runtime (a
        stop request: every component shuts down in order, and ``run()`` raises
        ``AsterRuntimeShutdownError``), for a loop the process is useless without.
        """
        _check_name(name, "task name")
        if name in self._component.tasks:
            raise RuntimeComponentRegistrationError(
                f"component {self._component.name!r} already has a task named {name!r}"
            )
        task = _ComponentTask(self._component.name, name, fn, critical=critical)
        self._component.tasks[name] = task
        return self.shutdown(name, None, task.join)

    def task_descriptor(self, name: str) -> Self:
        """Declare a task this component runs, as catalog metadata only.

        Nothing is started and no shutdown phase is added; the name appears in the
        component's descriptor (``tasks``) for admin UIs and diagnostics.
        """
        _check_name(name, "task name")
        if name not in self._component.task_names:
            self._component.task_names.append(name)
        return self

    def shutdown(
        self, phase: str, timeout: timedelta | None, fn: Callable[[], Awaitable[Any]]
    ) -> Self:
        """Register a shutdown phase; a component's phases run in registration order."""
        _check_phase(phase, timeout)
        if any(p.name == phase for p in self._component.shutdown):
            _warn_duplicate(self._component.name, phase, "shutdown")
        self._component.shutdown.append(_Phase(phase, timeout, fn, self._component.name))
        return self

    def shutdown_once(
        self,
        phase: str,
        timeout: timedelta | None,
        resource: R,
        fn: Callable[[R], Awaitable[None]],
    ) -> Self:
        """Register a shutdown phase that consumes ``resource`` exactly once."""
        return self.shutdown(phase, timeout, once_phase(resource, fn))


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
