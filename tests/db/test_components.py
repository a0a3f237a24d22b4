"""database_health_component and database_component_after on a real registry."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import QueuePool

from aster_forge.db import database_component_after, database_health_component
from aster_forge.runtime import (
    HealthCheckScope,
    HealthStatus,
    RuntimeComponentKind,
    RuntimeComponentRegistry,
)
from aster_forge.runtime._health import HealthComponentDetailKind


async def test_health_ping_reports_backend_and_latency(engine: AsyncEngine, backend: str) -> None:
    registry = RuntimeComponentRegistry()
    registry.register_bundle(database_health_component(engine))
    report = await registry.run_health(HealthCheckScope.READINESS)
    (component,) = report.components
    assert component.status is HealthStatus.HEALTHY
    backend_detail = component.detail("backend")
    latency = component.detail("latency")
    assert backend_detail is not None and backend_detail.value == engine.dialect.name
    assert latency is not None and latency.kind is HealthComponentDetailKind.DURATION_MILLIS
    descriptor = registry.descriptor("database")
    assert descriptor is not None and descriptor.kind is RuntimeComponentKind.DATABASE
    # Not a liveness check: a database outage must not restart the process.
    liveness = await registry.run_health(HealthCheckScope.LIVENESS)
    assert list(liveness.components) == []


async def test_health_ping_failure_has_a_fixed_text(tmp_path: Path) -> None:
    engine = create_async_engine("postgresql+asyncpg://postgres@127.0.0.1:1/none")
    try:
        registry = RuntimeComponentRegistry()
        registry.register_bundle(database_health_component(engine, required=False, check_name="db"))
        report = await registry.run_health(HealthCheckScope.DIAGNOSTICS)
        (component,) = report.components
        assert component.status is HealthStatus.UNHEALTHY
        assert component.message == "database ping failed"
    finally:
        await engine.dispose()


async def test_engine_disposed_after_dependents(tmp_path: Path) -> None:
    order: list[str] = []
    writer = create_async_engine(f"sqlite+aiosqlite:///{tmp_path}/w.db")
    reader = create_async_engine(f"sqlite+aiosqlite:///{tmp_path}/r.db")
    for eng in (writer, reader):
        async with eng.connect():
            pass
    registry = RuntimeComponentRegistry()
    registry.register_bundle(database_component_after([writer, reader], ["background_tasks"]))

    async def stop_tasks() -> None:
        order.append("tasks")
        assert _pooled(writer) == 1, "engine must still be open while tasks stop"

    registry.component_shutdown(
        "background_tasks", RuntimeComponentKind.TASKS, "stop tasks", None, stop_tasks
    )
    registry.validate()
    assert registry.shutdown_order() == ("background_tasks", "database")
    report = await registry.shutdown()
    assert order == ["tasks"] and not report.has_failures()
    assert report.phase_names() == ("stop tasks", "dispose database engine")
    assert _pooled(writer) == 0 and _pooled(reader) == 0


def test_bad_handles_are_rejected() -> None:
    with pytest.raises(TypeError):
        database_component_after([], ["x"])
    with pytest.raises(TypeError):
        database_component_after(["not an engine"], ["x"])  # type: ignore[list-item]


def _pooled(engine: AsyncEngine) -> int:
    pool = engine.pool
    assert isinstance(pool, QueuePool)
    return pool.checkedin()
