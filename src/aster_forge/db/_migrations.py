"""Alembic helpers: ``op``-level DDL for the aster-forge tables and the autogenerate hook.

Alembic is optional: it is imported only inside these functions, when no ``op`` is
passed.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

import sqlalchemy as sa
from sqlalchemy.schema import (
    DropIndex,
    DropTable,
    ExecutableDDLElement,
)

from ._tables import (
    NAMESPACE_NAME_UNIQUE_INDEX,
    NEXT_RUN_INDEX,
    create_runtime_leases_table,
    create_scheduled_tasks_namespace_name_unique_index,
    create_scheduled_tasks_next_run_index,
    create_scheduled_tasks_table,
    scheduled_task_index,
    scheduled_tasks_table,
)
from ._time import UtcDateTime

__all__ = [
    "alembic_create_runtime_leases",
    "alembic_create_scheduled_tasks",
    "alembic_drop_runtime_leases",
    "alembic_drop_scheduled_tasks",
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

    Optional: without it a revision runs as generated too (see
    :class:`~aster_forge.db.UtcDateTime`). Passed to ``context.configure(...,
    render_item=alembic_render_item)`` in ``env.py``, a ``UtcDateTime`` column is
    written as ``aster_forge.db.UtcDateTime()`` and the revision gets ``import
    aster_forge.db`` (whatever ``user_module_prefix`` says). Everything else is left to
    Alembic (``False``). A product with its own hook calls this one first.

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
