"""Component value types: kinds, descriptors and the bundle protocol."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, runtime_checkable

from ._startup import StartupPhaseFailurePolicy
from .errors import RuntimeComponentRegistrationError

if TYPE_CHECKING:
    from ._component import RuntimeComponentRegistry

__all__ = [
    "RuntimeComponentBundle",
    "RuntimeComponentBundleRegistration",
    "RuntimeComponentDescriptor",
    "RuntimeComponentKind",
    "RuntimeShutdownDescriptor",
    "RuntimeStartupDescriptor",
    "runtime_component",
]

B = TypeVar("B", bound="RuntimeComponentBundle")


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
