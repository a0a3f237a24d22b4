"""The example product run by ``aster-forge demo`` and ``make demo``.

A small media/report pipeline built only from aster-forge's public API, the way a
product integrates it: its own task kind and lane enums, pydantic payload/result
models, multi-step task bodies (fetch -> transform -> publish) with retryable and
permanent failures, a runtime-task catalog (health check, cleanup of finished tasks,
temp-dir sweep) fired by lease-guarded scheduled tasks, an audit table written by
``ManagedBatchWriter``, health checks for the database and the dispatcher, and an
entrypoint (:meth:`DemoApp.build_runtime`) that only declares ``.component(...)`` calls.

Serving HTTP needs the ``web`` extra; the CLI needs the ``cli`` extra.
"""

from __future__ import annotations

from ._app import DATABASE_URL_ENV, DemoApp, DemoSettings, create_runtime
from ._audit import AuditEvent, AuditLog, audit_events_table, recent_audit_events
from ._database import (
    DEFAULT_DATABASE_URL,
    DemoTables,
    demo_tables,
    migrate_demo_database,
    open_demo_engine,
    purge_finished_tasks,
)
from ._model import (
    LANE_LIMITS,
    DemoLane,
    DemoTaskKind,
    MaintenancePayload,
    MaintenanceResult,
    MediaPayload,
    MediaResult,
    ReportPayload,
    ReportResult,
)
from ._runtime_tasks import RUNTIME_TASKS, DemoRuntimeTask
from ._schedule import DEMO_LEASE_ID, DEMO_NAMESPACE, DemoSchedule
from ._seed import sample_tasks, seed_demo_tasks
from ._state import DemoState
from ._tasks import build_task_registry
from .errors import DemoError, DemoPortInUseError

__all__ = [
    "AuditEvent",
    "AuditLog",
    "DATABASE_URL_ENV",
    "DEFAULT_DATABASE_URL",
    "DEMO_LEASE_ID",
    "DEMO_NAMESPACE",
    "DemoApp",
    "DemoError",
    "DemoLane",
    "DemoPortInUseError",
    "DemoRuntimeTask",
    "DemoSchedule",
    "DemoSettings",
    "DemoState",
    "DemoTables",
    "DemoTaskKind",
    "LANE_LIMITS",
    "MaintenancePayload",
    "MaintenanceResult",
    "MediaPayload",
    "MediaResult",
    "RUNTIME_TASKS",
    "ReportPayload",
    "ReportResult",
    "audit_events_table",
    "build_task_registry",
    "create_runtime",
    "demo_tables",
    "migrate_demo_database",
    "open_demo_engine",
    "purge_finished_tasks",
    "recent_audit_events",
    "sample_tasks",
    "seed_demo_tasks",
]
