"""SQLAlchemy 2 (async) tables and stores for SQLite, PostgreSQL and MariaDB.

Every error is in :mod:`aster_forge.db.errors`; the door re-exports the ones a
statement can raise at run time (``TablesMissingError`` is :mod:`aster_forge`'s).
"""

from __future__ import annotations

# --- runtime leases, scheduled tasks, health/shutdown components ---
from ._components import database_component_after, database_health_component
from ._migrations import (
    alembic_create_runtime_leases,
    alembic_create_scheduled_tasks,
    alembic_drop_runtime_leases,
    alembic_drop_scheduled_tasks,
    alembic_render_item,
)
from ._runtime_leases import RuntimeLeaseDbStore
from ._scheduled_tasks import ScheduledTaskDbStore
from ._tables import runtime_leases_table, scheduled_tasks_table
from ._engine import create_database_engine
from ._ensure_tables import ensure_tables
from ._time import UtcDateTime
from .errors import (
    DatabaseConflictError,
    DatabaseDataError,
    DatabaseIntegrityError,
    DatabaseOperationError,
    DatabaseTimeoutError,
    DatabaseUnavailableError,
)

# --- background task store ---
# isort: split
from ._tasks import BackgroundTaskDbStore
from ._tasks_notify import listen_for_task_notifications
from ._tables import (
    background_tasks_table,
    create_background_tasks_table,
    task_deps_table,
    task_lanes_table,
)

__all__ = [
    "BackgroundTaskDbStore",
    "DatabaseConflictError",
    "DatabaseDataError",
    "DatabaseIntegrityError",
    "DatabaseOperationError",
    "DatabaseTimeoutError",
    "DatabaseUnavailableError",
    "RuntimeLeaseDbStore",
    "ScheduledTaskDbStore",
    "UtcDateTime",
    "alembic_create_runtime_leases",
    "alembic_create_scheduled_tasks",
    "alembic_drop_runtime_leases",
    "alembic_drop_scheduled_tasks",
    "alembic_render_item",
    "background_tasks_table",
    "create_background_tasks_table",
    "create_database_engine",
    "database_component_after",
    "database_health_component",
    "ensure_tables",
    "listen_for_task_notifications",
    "runtime_leases_table",
    "scheduled_tasks_table",
    "task_deps_table",
    "task_lanes_table",
]
