"""Alembic helpers: ``op``-level DDL for the aster-forge tables and the autogenerate hook.

Alembic is optional: it is imported only inside these functions, when no ``op`` is
passed.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

import sqlalchemy as sa
from sqlalchemy.schema import (
    DDL,
    CreateIndex,
    CreateTable,
    DropIndex,
    DropTable,
    ExecutableDDLElement,
)

from ._runtime_leases import create_runtime_leases_table
from ._scheduled_tasks_table import (
    NAMESPACE_NAME_UNIQUE_INDEX,
    NEXT_RUN_INDEX,
    add_scheduled_tasks_cron_columns,
    create_scheduled_tasks_namespace_name_unique_index,
    create_scheduled_tasks_next_run_index,
    create_scheduled_tasks_table,
    drop_scheduled_tasks_cron_columns,
    scheduled_task_index,
    scheduled_tasks_table,
)
from ._task_lanes import define_lanes_table, lanes_table_name
from ._tasks_table import BACKGROUND_TASKS_TABLE, background_tasks_table
from ._time import UtcDateTime

__all__ = [
    "alembic_add_background_task_controls",
    "alembic_add_background_task_waiting",
    "alembic_add_scheduled_tasks_cron_columns",
    "alembic_create_runtime_leases",
    "alembic_create_scheduled_tasks",
    "alembic_drop_background_task_controls",
    "alembic_drop_background_task_waiting",
    "alembic_drop_runtime_leases",
    "alembic_drop_scheduled_tasks",
    "alembic_drop_scheduled_tasks_cron_columns",
    "alembic_render_item",
]


class _Operations(Protocol):
    def execute(self, sqltext: Any, *, execution_options: Any = None) -> Any: ...

    def get_context(self) -> Any: ...


class _AutogenContext(Protocol):
    @property
    def imports(self) -> set[str]: ...


def alembic_render_item(
    type_: str, obj: object, autogen_context: _AutogenContext
) -> str | Literal[False]:
    """Render aster-forge's column types in ``alembic revision --autogenerate``.

    Pass it to ``context.configure(..., render_item=alembic_render_item)`` in
    ``env.py``. A :class:`~aster_forge.db.UtcDateTime` column is then written as
    ``aster_forge.db.UtcDateTime()`` and the revision gets ``import aster_forge.db``,
    so it runs as generated (whatever ``user_module_prefix`` says). Everything else is
    left to Alembic (``False``). A product with its own hook calls this one first.

    Args:
        type_: What Alembic is rendering (``"type"``, ``"server_default"``...).
        obj: The object being rendered.
        autogen_context: Alembic's ``AutogenContext`` (its ``imports`` set is extended).

    Returns:
        The Python source for ``obj``, or ``False`` for Alembic's default rendering.
    """
    if type_ == "type" and isinstance(obj, UtcDateTime):
        autogen_context.imports.add("import aster_forge.db")
        return "aster_forge.db.UtcDateTime()"
    return False


def _op(op: _Operations | None) -> _Operations:
    if op is not None:
        return op
    from alembic import op as alembic_op  # optional dependency, imported lazily

    return alembic_op


def _backend(op: _Operations) -> str:
    return str(op.get_context().dialect.name)


def _run(op: _Operations, *ddl: ExecutableDDLElement) -> None:
    for element in ddl:
        op.execute(element)


def alembic_create_runtime_leases(op: _Operations | None = None) -> None:
    """Create the ``runtime_leases`` table from an Alembic ``upgrade()``.

    Works online and in offline (``--sql``) mode.

    Args:
        op: Alembic's ``Operations`` (default: ``alembic.op``).
    """
    operations = _op(op)
    _run(operations, create_runtime_leases_table(_backend(operations)))


def alembic_drop_runtime_leases(op: _Operations | None = None) -> None:
    """Drop the ``runtime_leases`` table from an Alembic ``downgrade()``."""
    operations = _op(op)
    _run(operations, DropTable(create_runtime_leases_table().element))


def alembic_create_scheduled_tasks(op: _Operations | None = None) -> None:
    """Create ``scheduled_tasks`` and both of its indexes from an Alembic ``upgrade()``.

    Runs :func:`create_scheduled_tasks_table`,
    :func:`create_scheduled_tasks_namespace_name_unique_index` and
    :func:`create_scheduled_tasks_next_run_index`, the order the seed's migrations use.

    Args:
        op: Alembic's ``Operations`` (default: ``alembic.op``).
    """
    operations = _op(op)
    _run(
        operations,
        create_scheduled_tasks_table(_backend(operations)),
        create_scheduled_tasks_namespace_name_unique_index(),
        create_scheduled_tasks_next_run_index(),
    )


def alembic_drop_scheduled_tasks(op: _Operations | None = None) -> None:
    """Drop ``scheduled_tasks`` (indexes first) from an Alembic ``downgrade()``."""
    operations = _op(op)
    _run(
        operations,
        DropIndex(scheduled_task_index(NEXT_RUN_INDEX)),
        DropIndex(scheduled_task_index(NAMESPACE_NAME_UNIQUE_INDEX)),
        DropTable(scheduled_tasks_table(sa.MetaData())),
    )


def alembic_add_scheduled_tasks_cron_columns(op: _Operations | None = None) -> None:
    """Add the cron columns to a ``scheduled_tasks`` table created before cron schedules.

    Runs :func:`add_scheduled_tasks_cron_columns`; both columns are nullable, so the
    existing interval rows stay as they are.

    Args:
        op: Alembic's ``Operations`` (default: ``alembic.op``).
    """
    _run(_op(op), *add_scheduled_tasks_cron_columns())


def alembic_drop_scheduled_tasks_cron_columns(op: _Operations | None = None) -> None:
    """Drop the cron columns again (the downgrade of the helper above).

    Delete or convert the cron rows first: without the columns they would read as
    interval rows with a zero interval.
    """
    _run(_op(op), *drop_scheduled_tasks_cron_columns())


def _finished_index(table_name: str) -> tuple[sa.Table, sa.Index]:
    table = background_tasks_table(sa.MetaData(), table_name)
    return table, next(i for i in table.indexes if i.name == f"ix_{table_name}_finished")


def _alter(table: sa.Table, change: str) -> ExecutableDDLElement:
    # DDL quotes the table name for the dialect being migrated (no text interpolation).
    ddl = DDL(f"ALTER TABLE %(fullname)s {change}")  # type: ignore[no-untyped-call]
    return ddl.against(table)


def alembic_add_background_task_controls(
    op: _Operations | None = None, *, table_name: str = BACKGROUND_TASKS_TABLE
) -> None:
    """Upgrade a task table made before operator control, from an Alembic ``upgrade()``.

    Adds the ``snooze_count`` column (``NOT NULL DEFAULT 0``), the ``ix_<name>_finished``
    index the retention job deletes by, and the ``<name>_lanes`` lane state table that
    claims read to skip paused lanes. Works online and offline (``--sql``).

    Args:
        op: Alembic's ``Operations`` (default: ``alembic.op``).
        table_name: The task table's name.
    """
    operations = _op(op)
    lanes = define_lanes_table(sa.MetaData(), lanes_table_name(table_name))
    table, index = _finished_index(table_name)
    add = _alter(table, "ADD COLUMN snooze_count INTEGER NOT NULL DEFAULT 0")
    _run(operations, add, CreateIndex(index), CreateTable(lanes))


def alembic_drop_background_task_controls(
    op: _Operations | None = None, *, table_name: str = BACKGROUND_TASKS_TABLE
) -> None:
    """Undo :func:`alembic_add_background_task_controls` from an Alembic ``downgrade()``."""
    operations = _op(op)
    lanes = define_lanes_table(sa.MetaData(), lanes_table_name(table_name))
    table, index = _finished_index(table_name)
    drop = _alter(table, "DROP COLUMN snooze_count")
    _run(operations, DropTable(lanes), DropIndex(index), drop)


def _dedupe_indexes(table_name: str) -> tuple[sa.Index, sa.Index]:
    """The key index as tables made before it was partial have it, and as it is now."""
    name = f"ux_{table_name}_dedupe_key"
    table = background_tasks_table(sa.MetaData(), table_name)
    partial = next(index for index in table.indexes if index.name == name)
    older = sa.Table(table_name, sa.MetaData(), sa.Column("dedupe_key", sa.Text()))
    return sa.Index(name, older.c.dedupe_key, unique=True), partial


def alembic_partial_dedupe_index(
    op: _Operations | None = None, *, table_name: str = BACKGROUND_TASKS_TABLE
) -> None:
    """Make the dedupe key index partial (``WHERE dedupe_key IS NOT NULL``), from ``upgrade()``.

    Tables made before the index was partial index every row's NULL key; the store
    works on both, the partial index saves an index entry per row version of every
    task without a key. PostgreSQL and SQLite only (MariaDB has no partial indexes:
    nothing to do there). The index is dropped and built again, so run it when a short
    write pause on the table is acceptable.

    Args:
        op: Alembic's ``Operations`` (default: ``alembic.op``).
        table_name: The task table's name.
    """
    operations = _op(op)
    if _backend(operations) in ("postgresql", "sqlite"):
        full, partial = _dedupe_indexes(table_name)
        _run(operations, DropIndex(full), CreateIndex(partial))


def alembic_full_dedupe_index(
    op: _Operations | None = None, *, table_name: str = BACKGROUND_TASKS_TABLE
) -> None:
    """Undo :func:`alembic_partial_dedupe_index` from an Alembic ``downgrade()``."""
    operations = _op(op)
    if _backend(operations) in ("postgresql", "sqlite"):
        full, partial = _dedupe_indexes(table_name)
        _run(operations, DropIndex(partial), CreateIndex(full))


def _waiting_indexes(table_name: str) -> tuple[sa.Table, sa.Index, sa.Index, sa.Index]:
    """The task table, its due index before and after ``waiting``, and the waiting index."""
    table = background_tasks_table(sa.MetaData(), table_name)
    by_name = {str(index.name): index for index in table.indexes}
    due, waiting = by_name[f"ix_{table_name}_due"], by_name[f"ix_{table_name}_waiting"]
    names = ("lane", "status", "priority", "run_at", "id")
    c = sa.Table(table_name, sa.MetaData(), *(sa.Column(n, table.c[n].type) for n in names)).c
    pending = c.status == sa.literal_column("'pending'")
    before = sa.Index(
        due.name,
        *(c.lane, c.status, c.priority.desc(), c.run_at, c.id),
        postgresql_where=pending,
    )
    return table, before, due, waiting


def alembic_add_background_task_waiting(
    op: _Operations | None = None, *, table_name: str = BACKGROUND_TASKS_TABLE
) -> None:
    """Upgrade a task table made before the ``waiting`` hint, from an Alembic ``upgrade()``.

    Adds the ``waiting`` column (``NOT NULL DEFAULT false``: every existing row stays
    where claims look today). On PostgreSQL it also builds the due index again as
    ``WHERE status = 'pending' AND NOT waiting``. Everywhere it adds
    ``ix_<name>_waiting`` (empty on SQLite; a plain index on MariaDB, which has no
    partial ones). Run it when a short write pause on the table is acceptable. Rows
    already waiting for a later ``run_at`` keep the flag false; they are claimed as
    before.

    Args:
        op: Alembic's ``Operations`` (default: ``alembic.op``).
        table_name: The task table's name.
    """
    operations = _op(op)
    table, before, due, waiting = _waiting_indexes(table_name)
    add = _alter(table, "ADD COLUMN waiting BOOLEAN NOT NULL DEFAULT false")
    if _backend(operations) == "postgresql":
        _run(operations, add, DropIndex(before), CreateIndex(due), CreateIndex(waiting))
    else:
        _run(operations, add, CreateIndex(waiting))


def alembic_drop_background_task_waiting(
    op: _Operations | None = None, *, table_name: str = BACKGROUND_TASKS_TABLE
) -> None:
    """Undo :func:`alembic_add_background_task_waiting` from an Alembic ``downgrade()``."""
    operations = _op(op)
    table, before, due, waiting = _waiting_indexes(table_name)
    drop = _alter(table, "DROP COLUMN waiting")
    if _backend(operations) == "postgresql":
        _run(operations, DropIndex(waiting), DropIndex(due), CreateIndex(before), drop)
    else:
        _run(operations, DropIndex(waiting), drop)
