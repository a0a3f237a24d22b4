"""The ``scheduled_tasks`` catalog table and :class:`ScheduledTaskDbStore`."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.schema import CreateIndex, CreateTable

from ..runtime._lease_types import saturating_expiry
from ..tasks import (
    ScheduledTaskClaim,
    ScheduledTaskOutcome,
    ScheduledTaskRecord,
    ScheduledTaskRunStatus,
)
from ..tasks._schedule_types import (
    MAX_SCHEDULED_TASK_NAME_LENGTH,
    validate_claim_scheduled_task_args,
    validate_complete_scheduled_task_args,
    validate_ensure_scheduled_task_args,
    validate_scheduled_claim,
    validate_scheduled_duration,
    validate_scheduled_identifier,
)
from ._engine_store import EngineBackedStore
from ._time import DatabaseBackend, UtcDateTime, database_now
from ._translate import run_transaction

__all__ = [
    "SCHEDULED_TASKS_TABLE",
    "ScheduledTaskDbStore",
    "create_scheduled_tasks_namespace_name_unique_index",
    "create_scheduled_tasks_next_run_index",
    "create_scheduled_tasks_table",
    "scheduled_tasks_table",
]

SCHEDULED_TASKS_TABLE = "scheduled_tasks"
NAMESPACE_NAME_UNIQUE_INDEX = "ux_scheduled_tasks_namespace_name"
NEXT_RUN_INDEX = "ix_scheduled_tasks_next_run_at"

# Intervals beyond ~10,000 years all mean "never again before year 9999"; capping
# keeps the stored microseconds inside a signed 64-bit column.
MAX_STORED_INTERVAL = timedelta(days=3_652_500)

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
        mysql_engine="InnoDB",
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
    )
    sa.Index(NAMESPACE_NAME_UNIQUE_INDEX, table.c.namespace, table.c.name, unique=True)
    sa.Index(NEXT_RUN_INDEX, table.c.next_run_at)
    return table


def _index(name: str) -> sa.Index:
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
    return CreateIndex(_index(NAMESPACE_NAME_UNIQUE_INDEX), if_not_exists=if_not_exists)


def create_scheduled_tasks_next_run_index(*, if_not_exists: bool = False) -> CreateIndex:
    """Return the DDL of the ``next_run_at`` index (``ix_scheduled_tasks_next_run_at``)."""
    return CreateIndex(_index(NEXT_RUN_INDEX), if_not_exists=if_not_exists)


def _micros(value: timedelta) -> int:
    return (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds


class ScheduledTaskDbStore(EngineBackedStore):
    """A :class:`~aster_forge.tasks.ScheduledTaskStore` on the ``scheduled_tasks`` table.

    Claims are one conditional ``UPDATE`` (due, and unclaimed or expired), so
    exactly one of any number of racing instances wins a firing. Renewal and
    completion are conditional on ``(id, claimed_by, last_claimed_at)``. "Now" is the
    server's clock on PostgreSQL/MariaDB and ``clock`` on SQLite.

    Args:
        engine: The async engine (the table must exist).
        clock: Time source for SQLite (ignored where the server has a clock).

    Raises:
        UnsupportedDatabaseBackendError: When the engine is not SQLite, PostgreSQL or MariaDB.
    """

    def _define_table(self, metadata: sa.MetaData) -> sa.Table:
        return scheduled_tasks_table(metadata)

    async def ensure_scheduled_task(
        self,
        namespace: str,
        name: str,
        interval: timedelta,
        *,
        initial_delay: timedelta | None = None,
    ) -> ScheduledTaskRecord:
        """Insert the row if missing, else update its interval (see the protocol)."""
        validate_ensure_scheduled_task_args(namespace, name, interval, initial_delay)
        interval_micros = _micros(min(interval, MAX_STORED_INTERVAL))
        t = self._table

        async def body(conn: AsyncConnection) -> ScheduledTaskRecord:
            now = await database_now(conn, self._clock)
            values: dict[str, Any] = {
                "namespace": namespace,
                "name": name,
                "interval_micros": interval_micros,
                "next_run_at": saturating_expiry(now, initial_delay or timedelta(0)),
                "run_count": 0,
                "created_at": now,
                "updated_at": now,
            }
            stmt: Any
            if self._backend is DatabaseBackend.MYSQL:
                ins = mysql.insert(t).values(**values)
                # Ordered: updated_at compares against the old interval first.
                stmt = ins.on_duplicate_key_update(
                    [
                        (
                            "updated_at",
                            sa.case(
                                (t.c.interval_micros != ins.inserted.interval_micros, now),
                                else_=t.c.updated_at,
                            ),
                        ),
                        ("interval_micros", ins.inserted.interval_micros),
                    ]
                )
            else:
                up = (
                    postgresql.insert(t)
                    if self._backend is DatabaseBackend.POSTGRESQL
                    else sqlite.insert(t)
                ).values(**values)
                stmt = up.on_conflict_do_update(
                    index_elements=[t.c.namespace, t.c.name],
                    set_={"interval_micros": up.excluded.interval_micros, "updated_at": now},
                    where=t.c.interval_micros != up.excluded.interval_micros,
                )
            await conn.execute(stmt)
            row = (
                await conn.execute(sa.select(t).where(t.c.namespace == namespace, t.c.name == name))
            ).one()
            return _record(row)

        return await run_transaction(self._engine, "ensure scheduled task", body)

    async def claim_scheduled_task(
        self, namespace: str, name: str, owner_id: str, claim_ttl: timedelta
    ) -> ScheduledTaskClaim | None:
        """Claim the due, unclaimed-or-expired firing atomically (see the protocol)."""
        validate_claim_scheduled_task_args(namespace, name, owner_id, claim_ttl)
        t = self._table

        async def body(conn: AsyncConnection) -> ScheduledTaskClaim | None:
            now = await database_now(conn, self._clock)
            expires_at = saturating_expiry(now, claim_ttl)
            result = await conn.execute(
                sa.update(t)
                .where(
                    t.c.namespace == namespace,
                    t.c.name == name,
                    t.c.next_run_at <= now,
                    sa.or_(t.c.claimed_by.is_(None), t.c.claim_expires_at <= now),
                )
                .values(
                    claimed_by=owner_id,
                    last_claimed_at=now,
                    claim_expires_at=expires_at,
                    updated_at=now,
                )
            )
            if result.rowcount != 1:
                return None
            # Our own write is visible to us; the predicate pins exactly that version.
            row = (
                await conn.execute(
                    sa.select(t.c.id, t.c.next_run_at).where(
                        t.c.namespace == namespace,
                        t.c.name == name,
                        t.c.claimed_by == owner_id,
                        t.c.last_claimed_at == now,
                    )
                )
            ).one()
            return ScheduledTaskClaim(
                task_id=int(row.id),
                namespace=namespace,
                name=name,
                owner_id=owner_id,
                claimed_at=now,
                claim_expires_at=expires_at,
                scheduled_at=row.next_run_at,
            )

        return await run_transaction(self._engine, "claim scheduled task", body)

    def _owned(self, claim: ScheduledTaskClaim) -> sa.ColumnElement[bool]:
        t = self._table
        return sa.and_(
            t.c.id == claim.task_id,
            t.c.claimed_by == claim.owner_id,
            t.c.last_claimed_at == claim.claimed_at,
        )

    async def renew_scheduled_task_claim(
        self, claim: ScheduledTaskClaim, claim_ttl: timedelta
    ) -> bool:
        """Extend a claim that still matches the ownership predicate (see the protocol)."""
        validate_scheduled_claim(claim)
        validate_scheduled_duration("claim_ttl", claim_ttl)
        t = self._table

        async def body(conn: AsyncConnection) -> bool:
            now = await database_now(conn, self._clock)
            result = await conn.execute(
                sa.update(t)
                .where(self._owned(claim))
                .values(claim_expires_at=saturating_expiry(now, claim_ttl), updated_at=now)
            )
            return result.rowcount == 1

        return await run_transaction(self._engine, "renew scheduled task claim", body)

    async def complete_scheduled_task(
        self,
        claim: ScheduledTaskClaim,
        outcome: ScheduledTaskOutcome,
        *,
        next_run_at: datetime | None = None,
    ) -> bool:
        """Record the outcome, advance ``next_run_at``, release the claim (see the protocol)."""
        validate_scheduled_claim(claim)
        validate_complete_scheduled_task_args(outcome, next_run_at)
        duration = None if outcome.duration is None else _micros(outcome.duration)
        t = self._table

        async def body(conn: AsyncConnection) -> bool:
            now = await database_now(conn, self._clock)
            row = (
                await conn.execute(
                    sa.select(t.c.interval_micros).where(self._owned(claim)).with_for_update()
                )
            ).first()
            if row is None:
                return False
            following = next_run_at
            if following is None:
                following = saturating_expiry(now, timedelta(microseconds=int(row[0])))
            result = await conn.execute(
                sa.update(t)
                .where(self._owned(claim))
                .values(
                    claimed_by=None,
                    claim_expires_at=None,
                    next_run_at=following,
                    last_run_status=outcome.status.value,
                    last_run_error=outcome.error,
                    last_run_duration_micros=duration,
                    last_run_finished_at=now,
                    run_count=t.c.run_count + 1,
                    updated_at=now,
                )
            )
            return result.rowcount == 1

        return await run_transaction(self._engine, "complete scheduled task", body)

    async def get_scheduled_task(self, namespace: str, name: str) -> ScheduledTaskRecord | None:
        """Return the catalog row, or ``None``."""
        validate_scheduled_identifier("namespace", namespace)
        validate_scheduled_identifier("name", name)
        t = self._table

        async def body(conn: AsyncConnection) -> ScheduledTaskRecord | None:
            row = (
                await conn.execute(sa.select(t).where(t.c.namespace == namespace, t.c.name == name))
            ).first()
            return None if row is None else _record(row)

        return await run_transaction(self._engine, "read scheduled task", body)

    async def list_scheduled_tasks(
        self, namespace: str | None = None
    ) -> Sequence[ScheduledTaskRecord]:
        """Return the catalog rows ordered by namespace and name."""
        if namespace is not None:
            validate_scheduled_identifier("namespace", namespace)
        t = self._table
        query = sa.select(t).order_by(t.c.namespace, t.c.name)
        if namespace is not None:
            query = query.where(t.c.namespace == namespace)

        async def body(conn: AsyncConnection) -> list[ScheduledTaskRecord]:
            return [_record(row) for row in await conn.execute(query)]

        return await run_transaction(self._engine, "list scheduled tasks", body)

    def __repr__(self) -> str:
        return f"<ScheduledTaskDbStore backend={self._backend.value}>"


def _record(row: sa.Row[Any]) -> ScheduledTaskRecord:
    status = row.last_run_status
    return ScheduledTaskRecord(
        task_id=int(row.id),
        namespace=row.namespace,
        name=row.name,
        interval=timedelta(microseconds=int(row.interval_micros)),
        next_run_at=row.next_run_at,
        claimed_by=row.claimed_by,
        last_claimed_at=row.last_claimed_at,
        claim_expires_at=row.claim_expires_at,
        last_run_status=None if status is None else ScheduledTaskRunStatus(status),
        last_run_error=row.last_run_error,
        last_run_duration=(
            None
            if row.last_run_duration_micros is None
            else timedelta(microseconds=int(row.last_run_duration_micros))
        ),
        last_run_finished_at=row.last_run_finished_at,
        run_count=int(row.run_count),
        created_at=row.created_at,
        updated_at=row.updated_at,
    )
