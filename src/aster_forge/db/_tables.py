"""Every table of the library, the DDL helpers and the row mapping.

The task table with its lane and dependency tables, the ``scheduled_tasks`` catalog and
the ``runtime_leases`` table: the one module a migration's ``target_metadata`` reads.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.schema import CreateIndex, CreateTable

from ..runtime._internal import MAX_RUNTIME_LEASE_ID_LENGTH
from ..tasks._internal import (
    MAX_CRON_EXPRESSION_LENGTH,
    MAX_CRON_TIMEZONE_LENGTH,
    MAX_SCHEDULED_TASK_NAME_LENGTH,
    MAX_TASK_DEDUPE_KEY_LENGTH,
    MAX_TASK_KIND_LENGTH,
    MAX_TASK_PARTITION_LENGTH,
    BackgroundTaskRecord,
    TaskFailureReason,
    TaskStatus,
)
from ._time import DatabaseBackend, UtcDateTime

__all__ = [
    "BACKGROUND_TASKS_TABLE",
    "CORE_COLUMNS",
    "NAMESPACE_NAME_UNIQUE_INDEX",
    "NEXT_RUN_INDEX",
    "RUNTIME_LEASES_TABLE",
    "SCHEDULED_TASKS_TABLE",
    "background_tasks_table",
    "create_background_tasks_table",
    "create_runtime_leases_table",
    "create_scheduled_tasks_namespace_name_unique_index",
    "create_scheduled_tasks_next_run_index",
    "create_scheduled_tasks_table",
    "define_deps_table",
    "define_lanes_table",
    "define_partition_rates_table",
    "deps_table_name",
    "lanes_table_name",
    "partition_rates_table",
    "partition_rates_table_name",
    "record_from_row",
    "record_from_values",
    "runtime_leases_table",
    "scheduled_task_index",
    "scheduled_tasks_table",
    "task_deps_table",
    "task_lanes_table",
]

# Every table: InnoDB, utf8mb4 and a binary collation, so dedupe keys, wire values and
# ids compare exactly (case, accents; validation rejects the surrounding whitespace
# MariaDB's PAD SPACE collations would ignore).
_MYSQL_TABLE_OPTIONS: dict[str, Any] = {
    "mysql_engine": "InnoDB",
    "mysql_charset": "utf8mb4",
    "mysql_collate": "utf8mb4_bin",
}

BACKGROUND_TASKS_TABLE = "background_tasks"

_LONG_TEXT = sa.Text().with_variant(mysql.LONGTEXT(), "mysql")
_BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

CORE_COLUMNS = (
    "id",
    "kind",
    "lane",
    "status",
    "payload_json",
    "result_json",
    "steps_json",
    "attempt",
    "max_attempts",
    "run_at",
    "priority",
    "processing_token",
    "lease_expires_at",
    "claimed_by",
    "dedupe_key",
    "last_error",
    "failure_reason",
    "manual_retry_allowed",
    "cancel_requested",
    "rescued",
    "created_at",
    "updated_at",
    "started_at",
    "finished_at",
    "snooze_count",
    "last_traceback",
    "trace_context",
    "dependents_waiting",
    "partition_key",
)
"""The columns :class:`BackgroundTaskDbStore` reads and writes (in this order)."""

# ``waiting`` (an index hint), ``dependencies_left`` (a workflow count) and
# ``result_awaited`` (a waiter's flag) are the store's own, never part of a record.
_RESERVED_COLUMNS = frozenset({*CORE_COLUMNS, "waiting", "dependencies_left", "result_awaited"})


def background_tasks_table(
    metadata: sa.MetaData, name: str = BACKGROUND_TASKS_TABLE, *extra_columns: sa.Column[Any]
) -> sa.Table:
    """Define (or return the already defined) background task table on ``metadata``.

    Columns (see :class:`~aster_forge.tasks.BackgroundTaskRecord`): ``id`` (big integer
    primary key), ``kind``, ``lane``, ``status`` (wire values), ``payload_json``,
    ``result_json``, ``steps_json`` (JSON text), ``attempt``, ``max_attempts``,
    ``run_at``, ``priority``, ``processing_token``, ``lease_expires_at``,
    ``claimed_by``, ``dedupe_key`` (``UNIQUE NULL``), ``last_error``,
    ``failure_reason``, ``manual_retry_allowed``, ``cancel_requested``, ``rescued``,
    ``created_at``, ``updated_at``, ``started_at``, ``finished_at`` (aware UTC),
    ``snooze_count``, ``last_traceback`` (the bounded traceback beside ``last_error``),
    ``trace_context`` (the enqueuing side's trace context, JSON text, ``NULL`` unless
    tracing is on), ``partition_key`` (the task's partition, ``NULL`` for none),
    ``waiting`` (``NOT NULL DEFAULT false``; not part of a record) and
    ``dependents_waiting`` (``NOT NULL DEFAULT false``: workflow tasks wait for this
    one's outcome, see ``ix_<name>_dependents`` below) and ``dependencies_left``
    (``NOT NULL DEFAULT 0``: how many of a workflow task's dependencies have not told
    it their outcome; not part of a record) and ``result_awaited`` (``NOT NULL DEFAULT
    false``: on PostgreSQL a caller awaits the task's result, and the write that ends
    it sends a ``NOTIFY``; not part of a record).

    ``waiting`` keeps tasks that are not yet due out of the index claims walk. On
    PostgreSQL a write that makes a task pending with a ``run_at`` in the future (a
    delayed enqueue, a retry, a snooze) sets it, a claim clears it, and the worker
    clears it about once a second for tasks that came due. It is only a hint: lane
    claims also take due tasks that still carry it, so no value of it can hide a task
    (the success statement's refill takes them once cleared). On SQLite and MariaDB it
    stays false.

    Indexes: ``ux_<name>_dedupe_key`` (unique; partial ``WHERE dedupe_key IS NOT NULL``
    on PostgreSQL and SQLite), ``ix_<name>_due`` on ``(lane, status,
    priority DESC, run_at, id)`` (partial ``WHERE status = 'pending'`` on SQLite,
    ``WHERE status = 'pending' AND NOT waiting`` on PostgreSQL), ``ix_<name>_waiting``
    on ``run_at`` (partial ``WHERE status = 'pending' AND waiting`` on PostgreSQL and
    SQLite, where it stays empty), ``ix_<name>_lease`` on ``(lane, status,
    lease_expires_at)`` (partial ``WHERE status = 'running'``) and ``ix_<name>_finished``
    on ``(status, finished_at)`` (partial ``WHERE finished_at IS NOT NULL``) for the
    retention job, ``ix_<name>_dependents`` on ``dependents_waiting`` (partial ``WHERE
    dependents_waiting`` on PostgreSQL and SQLite).

    The dependency table ``<name>_deps`` (:func:`task_deps_table`) holds workflow edges.

    The lane state table ``<name>_lanes`` (:func:`task_lanes_table`) is defined on the
    same ``metadata``: claims read it to skip paused lanes. The partition rate table
    ``<name>_partition_rates`` is too: claims of a lane with a ``partition_rate_limit``
    count each partition's starts per window in it.

    Args:
        metadata: The caller's ``MetaData`` (e.g. the product's migration metadata).
        name: The table name.
        *extra_columns: Product columns appended to the core ones (they must be
            nullable or have a default unless every enqueue sets them via
            ``NewTask.extra``).

    Raises:
        ValueError: When an extra column reuses a core column name.
    """
    existing = metadata.tables.get(name)
    if existing is not None:
        return existing
    clash = [column.name for column in extra_columns if column.name in _RESERVED_COLUMNS]
    if clash:
        raise ValueError(f"extra columns reuse core background task columns: {clash}")
    key_len = MAX_TASK_KIND_LENGTH
    table = sa.Table(
        name,
        metadata,
        sa.Column("id", _BIG_ID, primary_key=True, autoincrement=True),
        sa.Column("kind", sa.String(key_len), nullable=False),
        sa.Column("lane", sa.String(key_len), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("payload_json", _LONG_TEXT, nullable=False),
        sa.Column("result_json", _LONG_TEXT, nullable=True),
        sa.Column("steps_json", _LONG_TEXT, nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("run_at", UtcDateTime(), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("processing_token", sa.String(64), nullable=True),
        sa.Column("lease_expires_at", UtcDateTime(), nullable=True),
        sa.Column("claimed_by", sa.String(255), nullable=True),
        sa.Column("dedupe_key", sa.String(MAX_TASK_DEDUPE_KEY_LENGTH), nullable=True),
        sa.Column("last_error", _LONG_TEXT, nullable=True),
        sa.Column("failure_reason", sa.String(32), nullable=True),
        sa.Column("manual_retry_allowed", sa.Boolean(), nullable=False),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False),
        sa.Column("rescued", sa.Boolean(), nullable=False),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.Column("updated_at", UtcDateTime(), nullable=False),
        sa.Column("started_at", UtcDateTime(), nullable=True),
        sa.Column("finished_at", UtcDateTime(), nullable=True),
        sa.Column("snooze_count", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("last_traceback", _LONG_TEXT, nullable=True),
        sa.Column("trace_context", sa.Text(), nullable=True),
        sa.Column("partition_key", sa.String(MAX_TASK_PARTITION_LENGTH), nullable=True),
        sa.Column("waiting", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("dependents_waiting", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("dependencies_left", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("result_awaited", sa.Boolean(), nullable=False, server_default=sa.false()),
        *extra_columns,
        **_MYSQL_TABLE_OPTIONS,
    )
    # Only keyed rows are indexed: most tasks have no key, and a NULL entry would cost
    # an index insert on every enqueue, claim and outcome write (each a new row version).
    keyed = table.c.dedupe_key.isnot(None)
    sa.Index(
        f"ux_{name}_dedupe_key",
        table.c.dedupe_key,
        unique=True,
        postgresql_where=keyed,
        sqlite_where=keyed,
    )
    pending = table.c.status == sa.literal_column("'pending'")
    running = table.c.status == sa.literal_column("'running'")
    sa.Index(
        f"ix_{name}_due",
        table.c.lane,
        table.c.status,
        table.c.priority.desc(),
        table.c.run_at,
        table.c.id,
        postgresql_where=sa.and_(pending, sa.not_(table.c.waiting)),
        sqlite_where=pending,
    )
    # Claims on PostgreSQL read the tasks written not yet due through this index (they
    # are kept out of the due one); empty on SQLite. Defined for every dialect, so that
    # Alembic's autogenerate (which ignores ``ddl_if``) and ``create_all`` agree.
    waiting = sa.and_(pending, table.c.waiting)
    sa.Index(f"ix_{name}_waiting", table.c.run_at, postgresql_where=waiting, sqlite_where=waiting)
    sa.Index(
        f"ix_{name}_lease",
        table.c.lane,
        table.c.status,
        table.c.lease_expires_at,
        postgresql_where=running,
        sqlite_where=running,
    )
    finished = table.c.finished_at.isnot(None)
    sa.Index(
        f"ix_{name}_finished",
        table.c.status,
        table.c.finished_at,
        postgresql_where=finished,
        sqlite_where=finished,
    )
    # Only rows workflow tasks wait for are indexed: the sweep for their endings reads it.
    flagged = table.c.dependents_waiting == sa.true()
    sa.Index(
        f"ix_{name}_dependents",
        table.c.dependents_waiting,
        postgresql_where=flagged,
        sqlite_where=flagged,
    )
    define_lanes_table(metadata, lanes_table_name(name))
    define_deps_table(metadata, deps_table_name(name))
    define_partition_rates_table(metadata, partition_rates_table_name(name))
    return table


def task_lanes_table(tasks: sa.Table) -> sa.Table:
    """The lane state table of the task table ``tasks``: ``<name>_lanes`` on its metadata.

    One row per lane ever paused: ``lane`` (primary key), ``paused``, ``paused_at``,
    ``updated_at``. :func:`background_tasks_table` already defines it; this returns it
    (defining it for a task table built another way). Create it in your migration
    beside the task table: claims read it to skip paused lanes.
    """
    return define_lanes_table(tasks.metadata, lanes_table_name(tasks.name))


def task_deps_table(tasks: sa.Table) -> sa.Table:
    """The dependency table of the task table ``tasks``: ``<name>_deps`` on its metadata.

    One row per workflow edge (see ``define_deps_table``); :func:`background_tasks_table`
    already defines it. Create it in your migration beside the task table.
    """
    return define_deps_table(tasks.metadata, deps_table_name(tasks.name))


def partition_rates_table(tasks: sa.Table) -> sa.Table:
    """The partition rate table of the task table ``tasks``: ``<name>_partition_rates``
    on its metadata (see ``_task_partition_rates``); :func:`background_tasks_table`
    already defines it. Create it in your migration beside the task table: claims of a
    lane with a ``partition_rate_limit`` count each partition's starts in it.
    """
    return define_partition_rates_table(tasks.metadata, partition_rates_table_name(tasks.name))


async def create_background_tasks_table(
    engine_or_conn: AsyncEngine | AsyncConnection,
    *,
    table: sa.Table | None = None,
    name: str = BACKGROUND_TASKS_TABLE,
) -> sa.Table:
    """Create the table, its indexes and its lane table if missing (``IF NOT EXISTS``).

    For real deployments prefer your migration tool: ``table.metadata`` (or
    ``CreateTable(table)`` plus ``CreateIndex`` per ``table.indexes``) gives Alembic
    everything.

    Args:
        engine_or_conn: Where to create it (a connection joins its transaction).
        table: A table from :func:`background_tasks_table` (e.g. with extra columns).
        name: The table name when ``table`` is not given.

    Returns:
        The table object.
    """
    target = table if table is not None else background_tasks_table(sa.MetaData(), name)
    lanes = task_lanes_table(target)
    deps = task_deps_table(target)
    rates = partition_rates_table(target)

    def create(sync: Any) -> None:
        target.create(sync, checkfirst=True)
        lanes.create(sync, checkfirst=True)
        deps.create(sync, checkfirst=True)
        rates.create(sync, checkfirst=True)

    if isinstance(engine_or_conn, AsyncConnection):
        await engine_or_conn.run_sync(create)
    else:
        async with engine_or_conn.begin() as conn:
            await conn.run_sync(create)
    return target


def record_from_row(row: Any) -> BackgroundTaskRecord:
    """Map a selected row (core columns) to a :class:`BackgroundTaskRecord`."""
    m = row._mapping
    reason = m["failure_reason"]
    return BackgroundTaskRecord(
        id=int(m["id"]),
        kind=m["kind"],
        lane=m["lane"],
        status=TaskStatus(m["status"]),
        payload_json=m["payload_json"],
        result_json=m["result_json"],
        steps_json=m["steps_json"],
        attempt=int(m["attempt"]),
        max_attempts=int(m["max_attempts"]),
        run_at=m["run_at"],
        priority=int(m["priority"]),
        processing_token=m["processing_token"],
        lease_expires_at=m["lease_expires_at"],
        claimed_by=m["claimed_by"],
        dedupe_key=m["dedupe_key"],
        last_error=m["last_error"],
        failure_reason=None if reason is None else TaskFailureReason(reason),
        manual_retry_allowed=bool(m["manual_retry_allowed"]),
        cancel_requested=bool(m["cancel_requested"]),
        rescued=bool(m["rescued"]),
        created_at=m["created_at"],
        updated_at=m["updated_at"],
        started_at=m["started_at"],
        finished_at=m["finished_at"],
        snooze_count=int(m["snooze_count"]),
        last_traceback=m["last_traceback"],
        trace_context=m["trace_context"],
        dependents_waiting=bool(m["dependents_waiting"]),
        partition_key=m["partition_key"],
    )


_STATUS = CORE_COLUMNS.index("status")
_REASON = CORE_COLUMNS.index("failure_reason")
# A dict lookup per row instead of the enum's call machinery; an unknown value still
# goes through the enum and raises its ValueError.
_STATUSES = {status.value: status for status in TaskStatus}


def record_from_values(values: list[Any]) -> BackgroundTaskRecord:
    """A record from the core columns' values in order, all but the two enums as read.

    For the hot statements that build records positionally (``CORE_COLUMNS`` is the
    record's field order): the status and failure reason become their enums here; every
    other value must be what the field holds (``values`` is changed in place).
    """
    status, reason = values[_STATUS], values[_REASON]
    values[_STATUS] = _STATUSES.get(status) or TaskStatus(status)
    if reason is not None:
        values[_REASON] = TaskFailureReason(reason)
    return BackgroundTaskRecord.from_values(values)


def lanes_table_name(tasks_table_name: str) -> str:
    """The lane state table of a task table: ``<tasks table>_lanes``."""
    return f"{tasks_table_name}_lanes"


def define_lanes_table(metadata: sa.MetaData, name: str) -> sa.Table:
    """Define (or return) the lane state table: one row per lane paused or claimed under a limit.

    Columns: ``lane`` (primary key, wire value), ``paused`` (bool), ``paused_at``,
    ``updated_at`` (aware UTC), and for a rate-limited lane ``rate_window_start`` (the
    window its claims counted last) and ``rate_started`` (the starts counted in it).
    Claims of a lane with a cluster limit, partition limit or rate limit also create
    its row. :func:`~aster_forge.db.background_tasks_table`
    defines it next to the task table as ``<name>_lanes``
    (:func:`~aster_forge.db.task_lanes_table` returns it).

    Args:
        metadata: The metadata the task table is on.
        name: The table name.
    """
    existing = metadata.tables.get(name)
    if existing is not None:
        return existing
    return sa.Table(
        name,
        metadata,
        sa.Column("lane", sa.String(MAX_TASK_KIND_LENGTH), primary_key=True),
        sa.Column("paused", sa.Boolean(), nullable=False),
        sa.Column("paused_at", UtcDateTime(), nullable=True),
        sa.Column("updated_at", UtcDateTime(), nullable=False),
        sa.Column("rate_window_start", UtcDateTime(), nullable=True),
        sa.Column("rate_started", sa.Integer(), nullable=True),
        **_MYSQL_TABLE_OPTIONS,
    )


def deps_table_name(tasks_table_name: str) -> str:
    """The dependency table of a task table: ``<tasks table>_deps``."""
    return f"{tasks_table_name}_deps"


def partition_rates_table_name(tasks_table_name: str) -> str:
    """The partition rate table of a task table: ``<tasks table>_partition_rates``."""
    return f"{tasks_table_name}_partition_rates"


def define_partition_rates_table(metadata: sa.MetaData, name: str) -> sa.Table:
    """Define (or return) the partition rate table.

    Columns: ``lane`` and ``partition_key`` (the primary key), ``window_start`` (the
    window the partition's starts were counted in last, aware UTC) and ``started``
    (the starts counted in it).
    """
    existing = metadata.tables.get(name)
    if existing is not None:
        return existing
    return sa.Table(
        name,
        metadata,
        sa.Column("lane", sa.String(MAX_TASK_KIND_LENGTH), primary_key=True),
        sa.Column("partition_key", sa.String(MAX_TASK_PARTITION_LENGTH), primary_key=True),
        sa.Column("window_start", UtcDateTime(), nullable=False),
        sa.Column("started", sa.Integer(), nullable=False),
        **_MYSQL_TABLE_OPTIONS,
    )


def define_deps_table(metadata: sa.MetaData, name: str) -> sa.Table:
    """Define (or return) the dependency table: one row per workflow edge.

    Columns: ``task_id`` (the waiting task), ``depends_on`` (the task it waits for),
    both big integers forming the primary key ``(depends_on, task_id)`` (a finished
    task finds its dependents by prefix), and ``run_anyway`` (see
    :class:`~aster_forge.tasks.TaskDependency`). Index ``ix_<name>_task``
    on ``task_id`` reads a dependent's dependencies. No foreign keys: the retention
    job deletes finished tasks on its own schedule.
    """
    existing = metadata.tables.get(name)
    if existing is not None:
        return existing
    big_id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
    table = sa.Table(
        name,
        metadata,
        sa.Column("depends_on", big_id, primary_key=True, autoincrement=False),
        sa.Column("task_id", big_id, primary_key=True, autoincrement=False),
        sa.Column("run_anyway", sa.Boolean(), nullable=False),
        **_MYSQL_TABLE_OPTIONS,
    )
    sa.Index(f"ix_{name}_task", table.c.task_id)
    return table


SCHEDULED_TASKS_TABLE = "scheduled_tasks"
NAMESPACE_NAME_UNIQUE_INDEX = "ux_scheduled_tasks_namespace_name"
NEXT_RUN_INDEX = "ix_scheduled_tasks_next_run_at"


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
        **_MYSQL_TABLE_OPTIONS,
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


RUNTIME_LEASES_TABLE = "runtime_leases"


def runtime_leases_table(metadata: sa.MetaData) -> sa.Table:
    """Define (or return the already defined) ``runtime_leases`` table on ``metadata``.

    Columns: ``lease_id`` (primary key), ``owner_id``, ``expires_at``, ``acquired_at``,
    ``updated_at`` (aware-UTC timestamps, see :class:`UtcDateTime`).

    Args:
        metadata: The caller's ``MetaData`` (e.g. the product's migration metadata).
    """
    existing = metadata.tables.get(RUNTIME_LEASES_TABLE)
    if existing is not None:
        return existing
    return sa.Table(
        RUNTIME_LEASES_TABLE,
        metadata,
        sa.Column("lease_id", sa.String(MAX_RUNTIME_LEASE_ID_LENGTH), primary_key=True),
        sa.Column("owner_id", sa.String(MAX_RUNTIME_LEASE_ID_LENGTH), nullable=False),
        sa.Column("expires_at", UtcDateTime(), nullable=False),
        sa.Column("acquired_at", UtcDateTime(), nullable=False),
        sa.Column("updated_at", UtcDateTime(), nullable=False),
        **_MYSQL_TABLE_OPTIONS,
    )


def create_runtime_leases_table(
    backend: object = None, *, if_not_exists: bool = False
) -> CreateTable:
    """Return the ``CREATE TABLE runtime_leases`` DDL for a product migration.

    Execute it with ``await conn.execute(create_runtime_leases_table("postgresql"))``
    or ``op.execute(...)`` in Alembic (see :func:`aster_forge.db.alembic_create_runtime_leases`).

    Args:
        backend: Optional backend name/dialect/engine; validated when given (the DDL
            itself adapts to the dialect it is executed on).
        if_not_exists: Emit ``CREATE TABLE IF NOT EXISTS``.

    Raises:
        UnsupportedDatabaseBackendError: When ``backend`` is given and unsupported.
    """
    if backend is not None:
        DatabaseBackend.of(backend)
    return CreateTable(runtime_leases_table(sa.MetaData()), if_not_exists=if_not_exists)
