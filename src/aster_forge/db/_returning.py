"""The statements PostgreSQL and SQLite write alike: ``RETURNING`` and ``ON CONFLICT``.

:class:`ReturningSql` is the shared half of :class:`~aster_forge.db._postgres.PostgresSql`
and :class:`~aster_forge.db._sqlite.SqliteSql` (MariaDB has neither: see ``_mysql``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from ..runtime import RuntimeLease
from ..tasks._internal import TaskStatus

__all__ = ["ReturningSql"]


class ReturningSql:
    """Writes that return the rows they wrote, and upserts ``ON CONFLICT DO UPDATE``.

    Args:
        insert: The dialect's ``insert`` (``postgresql.insert`` or ``sqlite.insert``).
    """

    def __init__(self, insert: Callable[[sa.Table], Any]) -> None:
        self._insert = insert

    def upsert(
        self, table: sa.Table, values: dict[str, Any], changes: Sequence[tuple[str, Any]]
    ) -> Any:
        """Insert ``values`` or apply ``changes`` to the row holding its primary key."""
        return (
            self._insert(table)
            .values(**values)
            .on_conflict_do_update(index_elements=list(table.primary_key), set_=dict(changes))
        )

    async def rescue(
        self,
        conn: AsyncConnection,
        table: sa.Table,
        expired: Any,
        values: Sequence[tuple[Any, Any]],
        outcome: Any,
    ) -> list[TaskStatus]:
        """One ``UPDATE ... WHERE id IN (expired) RETURNING status``."""
        t = table
        rescued = await conn.execute(
            sa.update(t).where(t.c.id.in_(expired)).ordered_values(*values).returning(t.c.status)
        )
        return [TaskStatus(row[0]) for row in rescued]

    async def claim_rows(
        self,
        conn: AsyncConnection,
        table: sa.Table,
        due: Any,
        values: dict[str, Any],
        columns: Sequence[Any],
        *,
        still: Any = None,
        prefix: str | None = None,
    ) -> Sequence[Any]:
        """One ``UPDATE ... WHERE id IN (due) RETURNING columns``."""
        t = table
        where = [t.c.id.in_(due)] if still is None else [t.c.id.in_(due), still]
        return list(
            await conn.execute(sa.update(t).where(*where).values(**values).returning(*columns))
        )

    async def update_one(
        self, conn: AsyncConnection, update: Any, columns: Sequence[Any], row: Any
    ) -> Any:
        """``update ... RETURNING columns``."""
        return (await conn.execute(update.returning(*columns))).first()

    async def take_flags(
        self, conn: AsyncConnection, table: sa.Table, flagged: Any, clear: Any
    ) -> dict[int, TaskStatus]:
        """One ``UPDATE ... WHERE flagged RETURNING id, status``."""
        t = table
        rows = await conn.execute(clear.where(flagged).returning(t.c.id, t.c.status))
        return {int(row[0]): TaskStatus(row[1]) for row in rows}

    async def delete_picked(
        self, conn: AsyncConnection, table: sa.Table, picked: Any, still: Any
    ) -> int:
        """One ``DELETE ... WHERE id IN (picked)`` (the subquery's lock holds ``still``)."""
        t = table
        return int((await conn.execute(sa.delete(t).where(t.c.id.in_(picked)))).rowcount)

    async def acquire_runtime_lease(
        self, conn: AsyncConnection, table: sa.Table, lease: RuntimeLease, now: datetime
    ) -> RuntimeLease | None:
        """An atomic ``INSERT ... ON CONFLICT DO UPDATE ... WHERE`` free, expired or ours."""
        t = table
        insert = self._insert(t)
        owner_id = lease.owner_id
        values = {
            "lease_id": lease.lease_id,
            "owner_id": owner_id,
            "expires_at": lease.expires_at,
            "acquired_at": now,
            "updated_at": now,
        }
        stmt = (
            insert.values(**values)
            .on_conflict_do_update(
                index_elements=[t.c.lease_id],
                set_={
                    "owner_id": insert.excluded.owner_id,
                    "expires_at": insert.excluded.expires_at,
                    "acquired_at": sa.case(
                        (t.c.owner_id == insert.excluded.owner_id, t.c.acquired_at),
                        else_=insert.excluded.acquired_at,
                    ),
                    "updated_at": insert.excluded.updated_at,
                },
                where=sa.or_(t.c.expires_at <= now, t.c.owner_id == owner_id),
            )
            .returning(t.c.expires_at)
        )
        row = (await conn.execute(stmt)).first()
        if row is None:
            return None
        return RuntimeLease(lease.lease_id, owner_id, row[0])

    def schedule_upsert(
        self,
        table: sa.Table,
        values: dict[str, Any],
        stored: dict[str, Any],
        pending: Any,
        changed: Any,
        now: datetime,
    ) -> Any:
        """``INSERT ... ON CONFLICT (namespace, name) DO UPDATE ... WHERE changed``."""
        t = table
        return (
            self._insert(t)
            .values(**values)
            .on_conflict_do_update(
                index_elements=[t.c.namespace, t.c.name],
                set_={**stored, "next_run_at": pending, "updated_at": now},
                where=changed,
            )
        )
