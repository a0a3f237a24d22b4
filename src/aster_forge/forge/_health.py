"""Health by process role: a web-only process is judged by what it does, not by workers.

A process that runs the forge's workers answers its runtime's checks. A process that
only serves the product's web app (the workers run as ``aster-forge worker`` elsewhere)
never starts them, so "workers not running" says nothing about it: it is live while it
answers, and ready while its database does.
"""

from __future__ import annotations

import enum
from datetime import timedelta

from ..db import database_health_component
from ..runtime import (
    HealthCheckOptions,
    HealthCheckScopes,
    HealthComponentDetailValue,
    HealthComponentReport,
    RuntimeComponentKind,
    RuntimeComponentRegistry,
)
from ._backend import ForgeBackend

__all__ = ["ROLE_CHECK", "WEB_DATABASE_TIMEOUT", "ProcessRole", "web_process_health"]

ROLE_CHECK = "role"
"""The check (and component) a web-only process's reports carry, naming its role."""

WEB_DATABASE_TIMEOUT = timedelta(seconds=2)
"""How long a web-only process's readiness waits for its database's ``SELECT 1``."""


class ProcessRole(enum.StrEnum):
    """What a process does with its forge."""

    WEB = "web"
    """Serves the web app; the workers run in other processes."""

    WORKER = "worker"
    """Runs the forge's workers (alone, or next to the web app through ``lifespan=``)."""


def web_process_health(backend: ForgeBackend) -> RuntimeComponentRegistry:
    """The checks of a web-only process: its role (every scope) and, on a database,
    a ping within :data:`WEB_DATABASE_TIMEOUT` (readiness and diagnostics)."""
    registry = RuntimeComponentRegistry()
    role = HealthComponentReport.healthy(
        ROLE_CHECK, "web process: the workers run in other processes"
    ).with_detail("role", HealthComponentDetailValue.text(ProcessRole.WEB.value))

    async def report_role() -> HealthComponentReport:
        return role

    registry.component_health_with_options(
        ROLE_CHECK,
        RuntimeComponentKind.HTTP,
        ROLE_CHECK,
        HealthCheckOptions.required(timedelta(seconds=1)).with_scopes(HealthCheckScopes.all()),
        report_role,
    )
    if backend.engine is not None:
        registry.register_bundle(
            database_health_component(backend.engine, timeout=WEB_DATABASE_TIMEOUT)
        )
    return registry
