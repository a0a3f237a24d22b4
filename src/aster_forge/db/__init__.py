"""SQLAlchemy 2 (async) tables and stores for SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

__all__: list[str] = []
