"""Runtime component factories that put a BackgroundTasks group under AsterRuntime's lifecycle."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from ..runtime import (
    CancellationToken,
    RuntimeComponentBundle,
    RuntimeComponentKind,
    RuntimeComponentRegistry,
    RuntimeComponentWithShutdown,
    runtime_component,
)
from ._background import BACKGROUND_TASKS_COMPONENT, BackgroundTasks
from ._catalog import RuntimeTaskDefinition
from .errors import BackgroundTaskSpawnError

__all__ = [
    "BACKGROUND_TASKS_SHUTDOWN_PHASE",
    "BACKGROUND_TASKS_SPAWN_PHASE",
    "DEFAULT_BACKGROUND_TASKS_SHUTDOWN_TIMEOUT",
    "BackgroundTaskComponent",
    "background_task_component_with_definitions_from_shutdown",
]

SpawnGroup = Callable[[CancellationToken], BackgroundTasks | Awaitable[BackgroundTasks]]
"""Builds a worker group from the token that stops it (plain or ``async`` function)."""


BACKGROUND_TASKS_SHUTDOWN_PHASE = "background_tasks"
"""The shutdown phase that stops and joins the group (in the shutdown report)."""

BACKGROUND_TASKS_SPAWN_PHASE = "background_tasks_spawn"
"""The startup phase in which the ``*_from_shutdown`` factories spawn the group."""

DEFAULT_BACKGROUND_TASKS_SHUTDOWN_TIMEOUT = timedelta(seconds=30)
"""The shutdown phase deadline; past it the remaining workers are cancelled at once."""


@dataclass(eq=False, slots=True)
class BackgroundTaskComponent:
    """The ``background_tasks`` runtime component: one group, its catalog and its phases.

    Registers the component (kind ``TASKS``), a shutdown phase
    :data:`BACKGROUND_TASKS_SHUTDOWN_PHASE` that calls :meth:`BackgroundTasks.shutdown`
    once, and, when built from a spawner, a required startup phase
    :data:`BACKGROUND_TASKS_SPAWN_PHASE` that spawns the group with the runtime's
    shutdown token. The shutdown phase tolerates a group that was never spawned (a
    startup abort before it). Components such as the database declare
    ``depends_on=[BACKGROUND_TASKS_COMPONENT]`` so workers stop before they close.

    Attributes:
        definitions: The runtime-task catalog entries the group runs (for admin views).
        group: The group, once spawned (or as given, already running).
        spawn: ``spawn(shutdown_token) -> BackgroundTasks`` (plain or ``async``), called
            in the startup phase, when no ``group`` is given.
        shutdown_token: The token ``spawn`` receives (the runtime's).
        timeout: The shutdown phase deadline (``None``: none).

    Raises:
        BackgroundTaskSpawnError: A definition that is not a ``RuntimeTaskDefinition``,
            or a ``group`` that is not a ``BackgroundTasks``.
    """

    definitions: tuple[RuntimeTaskDefinition[Any, Any], ...] = ()
    group: BackgroundTasks | None = None
    spawn: SpawnGroup | None = None
    shutdown_token: CancellationToken | None = None
    timeout: timedelta | None = DEFAULT_BACKGROUND_TASKS_SHUTDOWN_TIMEOUT
    _stopped: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        self.definitions = tuple(self.definitions)
        for item in self.definitions:
            if not isinstance(item, RuntimeTaskDefinition):
                raise BackgroundTaskSpawnError(
                    f"definitions must be RuntimeTaskDefinition values, got {type(item).__name__}"
                )
        if self.group is not None and not isinstance(self.group, BackgroundTasks):
            raise BackgroundTaskSpawnError(
                f"expected BackgroundTasks, got {type(self.group).__name__}"
            )

    @property
    def task_names(self) -> tuple[str, ...]:
        """The wire values of :attr:`definitions`, in declaration order."""
        return tuple(d.wire for d in self.definitions)

    def register(self, registry: RuntimeComponentRegistry) -> None:
        """Register the component, its startup phase (if spawning) and its shutdown phase."""
        name, kind = BACKGROUND_TASKS_COMPONENT, RuntimeComponentKind.TASKS
        registry.component(name, kind, task_names=self.task_names)
        if self.spawn is not None:
            registry.component_startup(
                name,
                kind,
                BACKGROUND_TASKS_SPAWN_PHASE,
                self._spawn,
            )
        registry.component_shutdown(
            name, kind, BACKGROUND_TASKS_SHUTDOWN_PHASE, None, self._shutdown, timeout=self.timeout
        )

    async def _spawn(self) -> None:
        if self.group is not None:
            return
        if self.spawn is None or self.shutdown_token is None:
            raise BackgroundTaskSpawnError("background task component has no spawner")
        if self.shutdown_token.cancelled:
            # Stop requested during startup: spawning workers now would be wasted work.
            return
        group = self.spawn(self.shutdown_token)
        if inspect.isawaitable(group):
            group = await group
        if not isinstance(group, BackgroundTasks):
            raise BackgroundTaskSpawnError(
                f"the group spawner must return BackgroundTasks, got {type(group).__name__}"
            )
        self.group = group

    async def _shutdown(self) -> None:
        # Once only, even if the bundle was registered twice.
        if self._stopped or self.group is None:
            return
        self._stopped = True
        await self.group.shutdown()


def background_task_component_with_definitions_from_shutdown(
    definitions: Iterable[RuntimeTaskDefinition[Any, Any]],
    spawn: SpawnGroup,
    *,
    timeout: timedelta | None = DEFAULT_BACKGROUND_TASKS_SHUTDOWN_TIMEOUT,
) -> RuntimeComponentWithShutdown:
    """The recommended entry: catalog + group spawned from the runtime's shutdown token.

    ``AsterRuntime(components=[...])`` hands the shared token over; the group is
    spawned in a required startup phase and stopped in the component's shutdown phase
    (before every component that depends on ``background_tasks``).

    Examples:
        >>> from aster_forge.runtime import AsterRuntime
        >>> def spawn(token: CancellationToken) -> BackgroundTasks:
        ...     return BackgroundTasks(token)
        >>> runtime = AsterRuntime(
        ...     components=[background_task_component_with_definitions_from_shutdown((), spawn)],
        ...     install_signal_handlers=False,
        ... )
        >>> [d.name for d in runtime.descriptors()]
        ['background_tasks']
    """
    if not callable(spawn):
        raise BackgroundTaskSpawnError("spawn is not callable")
    items = BackgroundTaskComponent(definitions=tuple(definitions)).definitions

    def build(shutdown_token: CancellationToken) -> RuntimeComponentBundle:
        return runtime_component(
            BackgroundTaskComponent(
                definitions=items, spawn=spawn, shutdown_token=shutdown_token, timeout=timeout
            )
        )

    return RuntimeComponentWithShutdown(build)
