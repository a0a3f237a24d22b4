"""The demo's runtime components: one factory per subsystem, each owning its phases.

Shutdown order follows the graph: ``background_tasks`` (the lease-guarded scheduler)
and ``dispatcher`` stop first, then ``audit_log`` drains, then ``database`` closes.
Startup is the reverse: the database migrates before anything uses it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from aster_forge.db import database_component_after, database_health_component
from aster_forge.runtime import (
    BufferedWriterLifecycle,
    CancellationToken,
    HealthCheckOptions,
    HealthCheckScopes,
    HealthComponentDetailValue,
    HealthComponentReport,
    RuntimeComponentBundleRegistration,
    RuntimeComponentKind,
    RuntimeComponentRegistry,
    StartupPhaseFailurePolicy,
    runtime_component,
)
from aster_forge.tasks import BACKGROUND_TASKS_COMPONENT, TaskDispatcher

from ._audit import AuditLog
from ._model import LANE_LIMITS

__all__ = [
    "AUDIT_COMPONENT",
    "DATABASE_COMPONENT",
    "DISPATCHER_COMPONENT",
    "SAMPLE_WORK_COMPONENT",
    "audit_log_component",
    "database_component",
    "dispatcher_component",
    "sample_work_component",
]

DATABASE_COMPONENT = "database"
DISPATCHER_COMPONENT = "dispatcher"
AUDIT_COMPONENT = "audit_log"
SAMPLE_WORK_COMPONENT = "sample_work"

_READY = HealthCheckScopes.readiness_and_diagnostics()


def database_component(
    engine: AsyncEngine, migrate: Callable[[], Awaitable[None]]
) -> RuntimeComponentBundleRegistration[Any]:
    """The database: migrate at startup, ``SELECT 1`` health check, dispose at shutdown.

    Built from :func:`aster_forge.db.database_health_component` and
    :func:`aster_forge.db.database_component_after`, plus the demo's migration as a
    required startup phase. Depends on every component that uses the engine, so it
    closes last.
    """
    health = database_health_component(
        engine, component=DATABASE_COMPONENT, timeout=timedelta(seconds=3)
    )
    dispose = database_component_after(
        engine,
        [BACKGROUND_TASKS_COMPONENT, DISPATCHER_COMPONENT, AUDIT_COMPONENT, SAMPLE_WORK_COMPONENT],
        component=DATABASE_COMPONENT,
        phase="database_close",
        timeout=timedelta(seconds=10),
    )

    def register(registry: RuntimeComponentRegistry) -> None:
        registry.component(DATABASE_COMPONENT, RuntimeComponentKind.DATABASE).startup(
            "database_migrate", migrate, StartupPhaseFailurePolicy.REQUIRED
        )
        health.register(registry)
        dispose.register(registry)

    return runtime_component(register)


def dispatcher_component(
    dispatcher: TaskDispatcher[Any], worker: Callable[[CancellationToken], Awaitable[None]]
) -> RuntimeComponentBundleRegistration[Any]:
    """The lane dispatcher: its worker loop as a component task, and a health check.

    The worker runs on every instance (claims are fenced, so instances share the
    queue). Unhealthy when every claim failed; degraded while stopping.
    """

    async def check() -> HealthComponentReport:
        stats = dispatcher.stats
        total = stats.total()
        failing = total.claim_calls > 0 and total.claim_errors == total.claim_calls
        full = [
            str(lane.value)
            for lane, limit in LANE_LIMITS.items()
            if dispatcher.in_flight(lane) >= limit
        ]
        if failing:
            report = HealthComponentReport.unhealthy(DISPATCHER_COMPONENT, "every claim failed")
        elif dispatcher.stopping:
            report = HealthComponentReport.degraded(DISPATCHER_COMPONENT, "dispatcher stopping")
        elif full:
            # A lane at its limit is normal back-pressure, not a health problem.
            report = HealthComponentReport.healthy(
                DISPATCHER_COMPONENT, f"dispatching; at their limit: {', '.join(sorted(full))}"
            )
        else:
            report = HealthComponentReport.healthy(DISPATCHER_COMPONENT, "dispatching")
        return (
            report.with_detail("in_flight", HealthComponentDetailValue.unsigned(total.in_flight))
            .with_detail("claimed", HealthComponentDetailValue.unsigned(total.claimed))
            .with_detail("succeeded", HealthComponentDetailValue.unsigned(total.succeeded))
            .with_detail("claim_errors", HealthComponentDetailValue.unsigned(total.claim_errors))
        )

    def register(registry: RuntimeComponentRegistry) -> None:
        registry.component(DISPATCHER_COMPONENT, RuntimeComponentKind.TASKS).health_with_options(
            DISPATCHER_COMPONENT,
            HealthCheckOptions.required(timedelta(seconds=1)).with_scopes(_READY),
            check,
        ).task("dispatch_worker", worker)

    return runtime_component(register)


def audit_log_component(audit: AuditLog) -> RuntimeComponentBundleRegistration[Any]:
    """The audit writer: started at startup, drained after the task producers stopped."""

    async def check() -> HealthComponentReport:
        snap = audit.writer.snapshot()
        if snap.quarantined:
            report = HealthComponentReport.degraded(AUDIT_COMPONENT, "audit writer quarantined")
        elif snap.batch_failure is not None:
            report = HealthComponentReport.degraded(AUDIT_COMPONENT, "audit writes paused")
        elif snap.lifecycle is not BufferedWriterLifecycle.RUNNING:
            report = HealthComponentReport.degraded(
                AUDIT_COMPONENT, f"audit writer {snap.lifecycle.value}"
            )
        else:
            report = HealthComponentReport.healthy(AUDIT_COMPONENT, "audit writer running")
        return report.with_detail(
            "pending", HealthComponentDetailValue.unsigned(snap.queued_pending)
        ).with_detail("confirmed", HealthComponentDetailValue.unsigned(snap.batch_confirmed))

    async def drain() -> None:
        await audit.stop(timedelta(seconds=5))

    def register(registry: RuntimeComponentRegistry) -> None:
        registry.component(AUDIT_COMPONENT, RuntimeComponentKind.AUDIT).depends_on(
            BACKGROUND_TASKS_COMPONENT, DISPATCHER_COMPONENT, SAMPLE_WORK_COMPONENT
        ).startup("audit_writer_start", audit.start).health_with_options(
            AUDIT_COMPONENT,
            HealthCheckOptions.optional(timedelta(seconds=1)).with_scopes(
                HealthCheckScopes.diagnostics()
            ),
            check,
        ).task("audit_retry", audit.run_retry_loop).shutdown(
            "audit_writer_drain", timedelta(seconds=8), drain
        )

    return runtime_component(register)


def sample_work_component(
    seed: Callable[[], Awaitable[Any]],
) -> RuntimeComponentBundleRegistration[Any]:
    """Enqueue the sample work once the database is migrated (optional startup phase).

    Starts after the audit log (which depends on it), so the seeding is audited too.
    """

    def register(registry: RuntimeComponentRegistry) -> None:
        registry.component(SAMPLE_WORK_COMPONENT, RuntimeComponentKind.PRODUCT).depends_on(
            DISPATCHER_COMPONENT
        ).startup("seed_sample_tasks", seed, StartupPhaseFailurePolicy.OPTIONAL)

    return runtime_component(register)
