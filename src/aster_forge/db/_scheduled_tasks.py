""":class:`ScheduledTaskDbStore`: the scheduled catalog on the ``scheduled_tasks`` table."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from ..runtime._internal import saturating_expiry
from ..tasks import CronSchedule, IntervalSchedule, ScheduledTaskOutcome
from ..tasks._internal import (
    ScheduledTaskClaim,
    ScheduledTaskRecord,
    ScheduledTaskRunStatus,
    stored_schedule_columns,
    validate_claim_scheduled_task_args,
    validate_complete_scheduled_task_args,
    validate_ensure_scheduled_task_args,
    validate_scheduled_claim,
    validate_scheduled_duration,
    validate_scheduled_identifier,
)
from ._engine_store import EngineBackedStore
from ._tables import scheduled_tasks_table
from ._time import UtcDateTime
from ._translate import run_transaction

__all__ = ["ScheduledTaskDbStore"]

# Intervals beyond ~10,000 years all mean "never again before year 9999"; capping
# keeps the stored microseconds inside a signed 64-bit column.
MAX_STORED_INTERVAL = timedelta(days=3_652_500)


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
        schedule: IntervalSchedule | CronSchedule,
    ) -> ScheduledTaskRecord:
        """Insert the row if missing, else store a changed schedule (see the protocol)."""
        value = validate_ensure_scheduled_task_args(namespace, name, schedule)
        interval, cron_expression, cron_timezone = stored_schedule_columns(value)
        stored = {
            "interval_micros": _micros(min(interval, MAX_STORED_INTERVAL)),
            "cron_expression": cron_expression,
            "cron_timezone": cron_timezone,
        }
        t = self._table

        async def body(conn: AsyncConnection) -> ScheduledTaskRecord:
            now = await self._backend_sql.now_value(conn, self._clock)
            first = value.first_run_at(now)
            values: dict[str, Any] = {
                "namespace": namespace,
                "name": name,
                **stored,
                "next_run_at": first,
                "run_count": 0,
                "created_at": now,
                "updated_at": now,
            }
            changed = sa.or_(*(t.c[column].is_distinct_from(v) for column, v in stored.items()))
            # A new cron schedule replaces an unclaimed row's pending firing, so a changed
            # expression never fires once more on the old one; intervals keep it (seed).
            pending: Any = t.c.next_run_at
            if isinstance(value, CronSchedule):
                pending = sa.case(
                    (sa.and_(changed, t.c.claimed_by.is_(None)), sa.literal(first, UtcDateTime())),
                    else_=t.c.next_run_at,
                )
            stmt = self._backend_sql.schedule_upsert(t, values, stored, pending, changed, now)
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
            now = await self._backend_sql.now_value(conn, self._clock)
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
            now = await self._backend_sql.now_value(conn, self._clock)
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
            now = await self._backend_sql.now_value(conn, self._clock)
            row = (
                await conn.execute(sa.select(t).where(self._owned(claim)).with_for_update())
            ).first()
            if row is None:
                return False
            following = next_run_at
            if following is None:
                following = _record(row).schedule.next_after(now)
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
        cron_expression=row.cron_expression,
        cron_timezone=row.cron_timezone,
    )
