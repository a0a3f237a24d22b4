"""The example product run by ``aster-forge demo`` and ``make demo``, on the Forge API.

A small media/report pipeline: three lanes with their own limits, multi-step tasks
(fetch -> transform -> publish) with retryable, permanent and manual failures,
periodic jobs (``every=`` and ``cron=``) named by a runtime-task catalog, an audit
table written by ``ManagedBatchWriter`` as the forge's resources, and the forge's
runtime (workers, leased scheduler, database and dispatcher health, dashboard, admin
API and metrics over HTTP). :mod:`._forge` holds every declaration.

Serving HTTP needs the ``web`` extra; the CLI needs the ``cli`` extra.
"""

from __future__ import annotations

from ._app import (
    DATABASE_URL_ENV,
    DEFAULT_DATABASE_URL,
    DEMO_LEASE_ID,
    DEMO_NAMESPACE,
    DemoApp,
    DemoSettings,
    DemoTables,
    bind_listen_socket,
    create_runtime,
    demo_tables,
    migrate_demo_database,
    open_demo_engine,
)
from ._audit import AuditEvent, AuditLog, audit_events_table
from ._forge import DemoSchedule, DemoTasks, build_demo_forge
from ._model import (
    LANE_LIMITS,
    DemoLane,
    MaintenancePayload,
    MaintenanceResult,
    MediaPayload,
    MediaResult,
    ReportPayload,
    ReportResult,
)
from ._runtime_tasks import RUNTIME_TASKS, DemoRuntimeTask
from ._seed import SEED_PREFIX, seed_demo_tasks
from ._state import DemoState
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
    "DemoTasks",
    "LANE_LIMITS",
    "MaintenancePayload",
    "MaintenanceResult",
    "MediaPayload",
    "MediaResult",
    "RUNTIME_TASKS",
    "ReportPayload",
    "ReportResult",
    "SEED_PREFIX",
    "audit_events_table",
    "bind_listen_socket",
    "build_demo_forge",
    "create_runtime",
    "demo_tables",
    "migrate_demo_database",
    "open_demo_engine",
    "seed_demo_tasks",
]
