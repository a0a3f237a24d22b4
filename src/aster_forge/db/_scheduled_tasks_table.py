"""The ``scheduled_tasks`` catalog table: its definition and the migration DDL helpers."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects import mysql
from sqlalchemy.schema import CreateIndex, CreateTable

from ..tasks._internal import (
    MAX_CRON_EXPRESSION_LENGTH,
    MAX_CRON_TIMEZONE_LENGTH,
    MAX_SCHEDULED_TASK_NAME_LENGTH,
)
from ._time import DatabaseBackend, UtcDateTime

__all__ = [
    "NAMESPACE_NAME_UNIQUE_INDEX",
    "NEXT_RUN_INDEX",
    "SCHEDULED_TASKS_TABLE",
    "create_scheduled_tasks_namespace_name_unique_index",
    "create_scheduled_tasks_next_run_index",
    "create_scheduled_tasks_table",
    "scheduled_task_index",
    "scheduled_tasks_table",
]

SCHEDULED_TASKS_TABLE = "scheduled_tasks"
NAMESPACE_NAME_UNIQUE_INDEX = "ux_scheduled_tasks_namespace_name"
NEXT_RUN_INDEX = "ix_scheduled_tasks_next_run_at"

_LONG_TEXT = sa.Text().with_variant(mysql.LONGTEXT(), "mysql")
_BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def scheduled_tasks_table(metadata: sa.MetaData) -> sa.Table:
    """Define (or return the already defined) ``scheduled_tasks`` table on ``metadata``.

    Includes the unique ``(namespace, name)`` index and the ``next_run_at`` index, so
    ``metadata.create_all`` creates everything.

    Args:
        metadata: The caller's ``MetaData``.
    """
    existing = metadata.tables.get(SCHEDULED_TASKS_TABLE)
    if existing is not None:
        return existing
    length = MAX_SCHEDULED_TASK_NAME_LENGTH
    table = sa.Table(
        SCHEDULED_TASKS_TABLE,
        metadata,
        sa.Column("id", _BIG_ID, primary_key=True, autoincrement=True),
        sa.Column("namespace", sa.String(length), nullable=False),
        sa.Column("name", sa.String(length), nullable=False),
        sa.Column("interval_micros", sa.BigInteger(), nullable=False),
        sa.Column("next_run_at", UtcDateTime(), nullable=False),
        sa.Column("claimed_by", sa.String(length), nullable=True),
        sa.Column("last_claimed_at", UtcDateTime(), nullable=True),
        sa.Column("claim_expires_at", UtcDateTime(), nullable=True),
        sa.Column("last_run_status", sa.String(32), nullable=True),
        sa.Column("last_run_error", _LONG_TEXT, nullable=True),
        sa.Column("last_run_duration_micros", sa.BigInteger(), nullable=True),
        sa.Column("last_run_finished_at", UtcDateTime(), nullable=True),
        sa.Column("run_count", sa.BigInteger(), nullable=False, server_default=sa.text("0")),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.Column("updated_at", UtcDateTime(), nullable=False),
        # NULL on interval rows; a cron row stores interval_micros = 0.
        sa.Column("cron_expression", sa.String(MAX_CRON_EXPRESSION_LENGTH), nullable=True),
        sa.Column("cron_timezone", sa.String(MAX_CRON_TIMEZONE_LENGTH), nullable=True),
        mysql_engine="InnoDB",
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
    )
    sa.Index(NAMESPACE_NAME_UNIQUE_INDEX, table.c.namespace, table.c.name, unique=True)
    sa.Index(NEXT_RUN_INDEX, table.c.next_run_at)
    return table


def scheduled_task_index(name: str) -> sa.Index:
    """Return the named index of a freshly defined ``scheduled_tasks`` table (for DDL)."""
    table = scheduled_tasks_table(sa.MetaData())
    return next(index for index in table.indexes if index.name == name)


def create_scheduled_tasks_table(backend: object, *, if_not_exists: bool = False) -> CreateTable:
    """Return the ``CREATE TABLE scheduled_tasks`` DDL (without indexes) for a migration.

    Follow it with :func:`create_scheduled_tasks_namespace_name_unique_index` and
    :func:`create_scheduled_tasks_next_run_index`.

    Args:
        backend: The target backend (name, dialect, engine or connection); validated.
        if_not_exists: Emit ``CREATE TABLE IF NOT EXISTS``.

    Raises:
        UnsupportedDatabaseBackendError: For an unsupported backend.
    """
    DatabaseBackend.of(backend)
    return CreateTable(scheduled_tasks_table(sa.MetaData()), if_not_exists=if_not_exists)


def create_scheduled_tasks_namespace_name_unique_index(
    *, if_not_exists: bool = False
) -> CreateIndex:
    """Return the DDL of the unique ``(namespace, name)`` index.

    The index is named ``ux_scheduled_tasks_namespace_name``.
    """
    return CreateIndex(
        scheduled_task_index(NAMESPACE_NAME_UNIQUE_INDEX), if_not_exists=if_not_exists
    )


def create_scheduled_tasks_next_run_index(*, if_not_exists: bool = False) -> CreateIndex:
    """Return the DDL of the ``next_run_at`` index (``ix_scheduled_tasks_next_run_at``)."""
    return CreateIndex(scheduled_task_index(NEXT_RUN_INDEX), if_not_exists=if_not_exists)
