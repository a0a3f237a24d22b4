"""What a runtime component declared: its kind and the descriptors admin views show."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import timedelta

from ._reports import StartupPhaseFailurePolicy

__all__ = [
    "RuntimeComponentDescriptor",
    "RuntimeComponentKind",
    "RuntimeShutdownDescriptor",
    "RuntimeStartupDescriptor",
]


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
