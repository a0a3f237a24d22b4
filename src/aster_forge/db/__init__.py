"""SQLAlchemy 2 (async) tables and stores for SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

from .errors import AsterForgeDbError

# --- runtime leases, scheduled tasks, health/shutdown components (issue 5) ---

# --- background task store (issue 7) ---

__all__ = [
    "AsterForgeDbError",
]
