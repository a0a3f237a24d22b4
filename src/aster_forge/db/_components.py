"""Runtime components for a database: a readiness/diagnostics ping and engine disposal."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from ..runtime import (
    HealthCheckOptions,
    HealthCheckScopes,
    HealthComponentDetailValue,
    HealthComponentReport,
    RuntimeComponentBundleRegistration,
    RuntimeComponentKind,
    RuntimeComponentRegistry,
    runtime_component,
    shutdown_resource_component_after,
)
from ..runtime._internal import Clock, SystemClock
from ._time import DatabaseBackend

__all__ = ["DATABASE_COMPONENT", "database_component_after", "database_health_component"]

logger = logging.getLogger("aster_forge.db")

DATABASE_COMPONENT = "database"
"""The default component name of the database (other components depend on it)."""

_SYSTEM_CLOCK = SystemClock()


def database_health_component(
    engine: AsyncEngine,
    *,
    component: str = DATABASE_COMPONENT,
    check_name: str = "database",
    timeout: timedelta = timedelta(seconds=5),
    required: bool = True,
    clock: Clock = _SYSTEM_CLOCK,
) -> RuntimeComponentBundleRegistration[Any]:
    """A health check that pings the database (``SELECT 1``) with a latency detail.

    Runs in the readiness and diagnostics scopes (never liveness: a database outage
    should take the instance out of rotation, not restart it). Healthy reports carry
    ``backend`` (text) and ``latency`` (milliseconds) details; a failure is reported
    with a fixed text (the driver error is logged, never exposed).

    Args:
        engine: The engine to ping.
        component: The owning component's name.
        check_name: The health check's name.
        timeout: The per-check timeout (the registry maps a timeout to unhealthy/degraded).
        required: Whether a failure makes the whole report unhealthy (else degraded).
        clock: Measures the latency.

    Returns:
        A bundle for ``AsterRuntime(components=[...])`` or ``registry.register_bundle(...)``.
    """
    backend = DatabaseBackend.of(engine)
    options = (
        HealthCheckOptions.required(timeout) if required else HealthCheckOptions.optional(timeout)
    ).with_scopes(HealthCheckScopes.readiness_and_diagnostics())

    async def ping() -> HealthComponentReport:
        started = clock.monotonic()
        try:
            async with engine.connect() as conn:
                await conn.execute(sa.text("SELECT 1"))
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.warning("database health ping failed", exc_info=True)
            report = HealthComponentReport.unhealthy(check_name, "database ping failed")
        else:
            report = HealthComponentReport.healthy(check_name, "database reachable")
        elapsed = timedelta(seconds=max(clock.monotonic() - started, 0.0))
        report = report.with_detail("backend", HealthComponentDetailValue.text(backend.value))
        return report.with_detail("latency", HealthComponentDetailValue.duration(elapsed))

    def register(registry: RuntimeComponentRegistry) -> None:
        registry.component_health_with_options(
            component, RuntimeComponentKind.DATABASE, check_name, options, ping
        )

    return runtime_component(register)


def database_component_after(
    engine_or_handles: AsyncEngine | Sequence[AsyncEngine],
    depends_on: Sequence[str],
    *,
    component: str = DATABASE_COMPONENT,
    phase: str = "dispose database engine",
    timeout: timedelta | None = timedelta(seconds=10),
) -> RuntimeComponentBundleRegistration[Any]:
    """A shutdown phase that disposes the engine(s) after the named components stopped.

    Typical use: ``database_component_after(engine, ["background_tasks", "http"])`` so
    workers and request handlers finish their writes before the pool closes.

    Args:
        engine_or_handles: One engine, or several (e.g. writer and reader).
        depends_on: Components whose shutdown must finish first.
        component: The component name.
        phase: The shutdown phase name.
        timeout: The phase deadline.

    Returns:
        A bundle for ``.component(...)`` or ``registry.register_bundle(...)``.
    """
    engines: tuple[AsyncEngine, ...] = (
        (engine_or_handles,)
        if isinstance(engine_or_handles, AsyncEngine)
        else tuple(engine_or_handles)
    )
    if not engines or not all(isinstance(e, AsyncEngine) for e in engines):
        raise TypeError("database_component_after needs an AsyncEngine or a sequence of them")

    async def dispose(handles: tuple[AsyncEngine, ...]) -> None:
        for handle in handles:
            await handle.dispose()

    return shutdown_resource_component_after(
        component,
        RuntimeComponentKind.DATABASE,
        phase,
        depends_on,
        engines,
        dispose,
        timeout=timeout,
    )
