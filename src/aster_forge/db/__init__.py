"""SQLAlchemy 2 (async) tables and stores for SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

from .errors import AsterForgeDbError

# --- runtime leases, scheduled tasks, health/shutdown components ---
# isort: split
from ._components import database_component_after, database_health_component
from ._migrations import (
    alembic_create_runtime_leases,
    alembic_create_scheduled_tasks,
    alembic_drop_runtime_leases,
    alembic_drop_scheduled_tasks,
    alembic_render_item,
)
from ._runtime_leases import (
    RuntimeLeaseDbStore,
    create_runtime_leases_table,
    runtime_leases_table,
)
from ._scheduled_tasks import ScheduledTaskDbStore
from ._scheduled_tasks_table import (
    create_scheduled_tasks_namespace_name_unique_index,
    create_scheduled_tasks_next_run_index,
    create_scheduled_tasks_table,
    scheduled_tasks_table,
)
from ._engine import create_database_engine
from ._ensure_tables import ensure_tables
from ._time import DatabaseBackend, UtcDateTime
from ._url import normalize_database_url
from .errors import (
    DatabaseConflictError,
    DatabaseDataError,
    DatabaseDriverMissingError,
    DatabaseIntegrityError,
    DatabaseOperationError,
    DatabaseTimeoutError,
    DatabaseUnavailableError,
    InvalidDatabaseUrlError,
    TablesMissingError,
    UnsupportedDatabaseBackendError,
)

# --- background task store ---
# isort: split
from ._tasks import DEFAULT_TASK_NOTIFY_CHANNEL, BackgroundTaskDbStore
from ._tasks_notify import BackgroundTaskNotificationListener, listen_for_task_notifications
from ._tasks_table import (
    BACKGROUND_TASKS_TABLE,
    background_tasks_table,
    create_background_tasks_table,
    task_deps_table,
    task_lanes_table,
)

__all__ = [
    "AsterForgeDbError",
    "BACKGROUND_TASKS_TABLE",
    "BackgroundTaskDbStore",
    "BackgroundTaskNotificationListener",
    "DEFAULT_TASK_NOTIFY_CHANNEL",
    "DatabaseBackend",
    "DatabaseConflictError",
    "DatabaseDataError",
    "DatabaseDriverMissingError",
    "DatabaseIntegrityError",
    "DatabaseOperationError",
    "DatabaseTimeoutError",
    "DatabaseUnavailableError",
    "InvalidDatabaseUrlError",
    "RuntimeLeaseDbStore",
    "ScheduledTaskDbStore",
    "TablesMissingError",
    "UnsupportedDatabaseBackendError",
    "UtcDateTime",
    "alembic_create_runtime_leases",
    "alembic_create_scheduled_tasks",
    "alembic_drop_runtime_leases",
    "alembic_drop_scheduled_tasks",
    "alembic_render_item",
    "background_tasks_table",
    "create_background_tasks_table",
    "create_database_engine",
    "create_runtime_leases_table",
    "create_scheduled_tasks_namespace_name_unique_index",
    "create_scheduled_tasks_next_run_index",
    "create_scheduled_tasks_table",
    "database_component_after",
    "database_health_component",
    "ensure_tables",
    "listen_for_task_notifications",
    "normalize_database_url",
    "runtime_leases_table",
    "scheduled_tasks_table",
    "task_deps_table",
    "task_lanes_table",
]
