"""The MariaDB backend: :class:`MysqlSql` (its raw SQL is in ``sql/mysql.sql``).

MariaDB has no ``UPDATE ... RETURNING``: a write that must return rows locks and reads
them first (or reads the row it wrote after), in the same transaction. Transactions
run under READ COMMITTED, so ``SKIP LOCKED`` claims take no gap locks that would block
inserts.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AsyncExitStack
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ..runtime import RuntimeLease
from ..runtime._internal import Clock
from ..tasks._internal import TaskStatus
from ._driver_hold import HeldDriverConnection
from ._queries import MYSQL
from ._tasks_sql import (
    BoundNow,
    HotPaths,
    TaskSql,
    Transaction,
    begin_plain,
    plain_transaction,
)
from ._time import DatabaseBackend, UtcDateTime

__all__ = ["MysqlSql"]

_UTC_NOW = sa.text(MYSQL["utc_now"])
_ACQUIRE = sa.text(MYSQL["acquire_runtime_lease"]).bindparams(
    sa.bindparam("lease_id", type_=sa.String()),
    sa.bindparam("owner_id", type_=sa.String()),
    sa.bindparam("expires_at", type_=UtcDateTime()),
    sa.bindparam("now", type_=UtcDateTime()),
)


class MysqlSql(BoundNow):
    """The :class:`~aster_forge.db._tasks_sql.BackendSql` of MariaDB (and MySQL)."""

    backend = DatabaseBackend.MYSQL
    writes_autocommit = False
    one_writer = False
    notifies = False
    success_writes_in_flight = 1
    claims_with_success = False

    def hot_paths(
        self,
        table: sa.Table,
        lanes: sa.Table,
        engine: AsyncEngine,
        sql: TaskSql,
        hold: HeldDriverConnection,
        *,
        channel: str | None,
    ) -> HotPaths:
        """None: the portable statements serve."""
        return HotPaths()

    def transaction_engine(self, engine: AsyncEngine) -> AsyncEngine:
        """``engine`` under READ COMMITTED: locking reads without gap locks (``SKIP
        LOCKED`` claims must not block inserts)."""
        return engine.execution_options(isolation_level="READ COMMITTED")

    def transaction(
        self, engine: AsyncEngine, autocommit: AsyncEngine, *, single_statement: bool
    ) -> Transaction:
        """Autocommit for one statement, else a transaction."""
        return plain_transaction(engine, autocommit, single_statement=single_statement)

    async def begin_held(self, engine: AsyncEngine, stack: AsyncExitStack) -> AsyncConnection:
        """A connection in a transaction of its own."""
        return await begin_plain(engine, stack)

    async def now_value(self, conn: AsyncConnection, clock: Clock) -> datetime:
        """``UTC_TIMESTAMP(6)``: the server's clock, so skewed instances agree."""
        value = (await conn.execute(_UTC_NOW)).scalar_one()
        if not isinstance(value, datetime):  # pragma: no cover - driver contract
            raise TypeError(f"database returned {value!r} for now()")
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)  # UTC_TIMESTAMP() is naive UTC
        return value.astimezone(UTC)

    def insert_returning(self, insert: Any, columns: Sequence[Any]) -> Any:
        """``INSERT ... RETURNING`` (MariaDB 10.5+), in parameter order."""
        return insert.returning(*columns, sort_by_parameter_order=True)

    def inserted_rows(self, rows: Sequence[Any]) -> Sequence[Any]:
        """``rows`` (already in parameter order)."""
        return rows

    def locked(self, query: Any, of: sa.Table) -> Any:
        """``query ... FOR UPDATE``."""
        return query.with_for_update()

    def locking_read(self, query: Any) -> Any:
        """``query ... LOCK IN SHARE MODE``: sees the latest committed rows."""
        return query.with_for_update(read=True)

    def locked_for_write(self, query: Any) -> Any:
        """``query ... FOR UPDATE``."""
        return query.with_for_update()

    def upsert(
        self, table: sa.Table, values: dict[str, Any], changes: Sequence[tuple[str, Any]]
    ) -> Any:
        """``INSERT ... ON DUPLICATE KEY UPDATE``; MariaDB applies ``changes`` in order."""
        return mysql.insert(table).values(**values).on_duplicate_key_update(list(changes))

    async def rescue(
        self,
        conn: AsyncConnection,
        table: sa.Table,
        expired: Any,
        values: Sequence[tuple[Any, Any]],
        outcome: Any,
    ) -> list[TaskStatus]:
        """The locked rows' outcome read first, then one ``UPDATE`` of their ids."""
        t = table
        locked = expired.with_only_columns(t.c.id, outcome)
        rows = (await conn.execute(locked)).all()
        if rows:
            ids = [int(row[0]) for row in rows]
            await conn.execute(sa.update(t).where(t.c.id.in_(ids)).ordered_values(*values))
        return [TaskStatus(row[1]) for row in rows]

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
        """The ids ``due`` locks, one ``UPDATE`` of them, then a read of the rows written."""
        t = table
        ids = [int(row[0]) for row in await conn.execute(due)]
        if not ids:
            return []
        where = [t.c.id.in_(ids)] if still is None else [t.c.id.in_(ids), still]
        await conn.execute(sa.update(t).where(*where).values(**values))
        written: list[Any] = [t.c.id.in_(ids)]
        if prefix is not None:
            written.append(t.c.processing_token.startswith(prefix, autoescape=True))
        return list(await conn.execute(sa.select(*columns).where(*written)))

    async def update_one(
        self, conn: AsyncConnection, update: Any, columns: Sequence[Any], row: Any
    ) -> Any:
        """``update``, then a read of the row it locked."""
        if (await conn.execute(update)).rowcount != 1:
            return None
        return (await conn.execute(sa.select(*columns).where(row))).first()

    async def take_flags(
        self, conn: AsyncConnection, table: sa.Table, flagged: Any, clear: Any
    ) -> dict[int, TaskStatus]:
        """The locked rows read first, then ``clear`` of their ids."""
        t = table
        locked = sa.select(t.c.id, t.c.status).where(flagged).order_by(t.c.id).with_for_update()
        ended = {int(row[0]): TaskStatus(row[1]) for row in await conn.execute(locked)}
        if ended:
            await conn.execute(clear.where(t.c.id.in_(list(ended))))
        return ended

    async def delete_picked(
        self, conn: AsyncConnection, table: sa.Table, picked: Any, still: Any
    ) -> int:
        """The ids first: MariaDB cannot delete from a table its own subquery reads."""
        t = table
        ids = [int(row[0]) for row in await conn.execute(picked)]
        if not ids:
            return 0
        return int((await conn.execute(sa.delete(t).where(t.c.id.in_(ids), still))).rowcount)

    async def stage_waiting(self, sql: TaskSql, table: sa.Table, limit: int) -> int:
        """Nothing to stage: the hint stays false."""
        return 0

    def minute(self, column: Any) -> Any:
        """``DATE_FORMAT(column, '%Y-%m-%d %H:%i')``."""
        return sa.func.date_format(column, "%Y-%m-%d %H:%i")

    def code_point_order(self, column: Any) -> Any:
        """``column``: the tables' ``utf8mb4_bin`` collation is code-point order."""
        return column

    async def acquire_runtime_lease(
        self, conn: AsyncConnection, table: sa.Table, lease: RuntimeLease, now: datetime
    ) -> RuntimeLease | None:
        """``INSERT ... ON DUPLICATE KEY UPDATE`` with ordered conditional assignments,
        then a read of the row it locked."""
        t = table
        lease_id, owner_id, expires_at = lease.lease_id, lease.owner_id, lease.expires_at
        await conn.execute(
            _ACQUIRE,
            {"lease_id": lease_id, "owner_id": owner_id, "expires_at": expires_at, "now": now},
        )
        row = (
            await conn.execute(
                sa.select(t.c.owner_id, t.c.expires_at).where(t.c.lease_id == lease_id)
            )
        ).first()
        if row is None or row.owner_id != owner_id or row.expires_at != expires_at:
            return None
        return lease

    def schedule_upsert(
        self,
        table: sa.Table,
        values: dict[str, Any],
        stored: dict[str, Any],
        pending: Any,
        changed: Any,
        now: datetime,
    ) -> Any:
        """``INSERT ... ON DUPLICATE KEY UPDATE``, ordered: ``updated_at`` and
        ``next_run_at`` compare against the old schedule."""
        t = table
        ins = mysql.insert(t).values(**values)
        return ins.on_duplicate_key_update(
            [
                ("updated_at", sa.case((changed, now), else_=t.c.updated_at)),
                ("next_run_at", pending),
                *((column, ins.inserted[column]) for column in stored),
            ]
        )
