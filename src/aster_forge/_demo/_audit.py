"""The demo's audit/event log: a product table written in batches by ``ManagedBatchWriter``.

Task bodies, the seeder and scheduled firings append :class:`AuditEvent` records; the
writer persists them in batches (at most ``batch_size`` rows per INSERT, at the latest
``max_delay`` after the oldest one was queued). A connection failure pauses the lane as
RETRYABLE and the component's retry loop resumes it; nothing accepted is dropped or
replayed blindly. At shutdown the writer is drained before the database closes.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from aster_forge.db import UtcDateTime
from aster_forge.runtime import (
    BufferedBatchConfig,
    CancellationToken,
    HealthComponentDetailValue,
    HealthComponentReport,
    ManagedBatchWriter,
    OverflowPolicy,
    WriteFailure,
)
from aster_forge.runtime._internal import (
    BufferedWriterLifecycle,
    BufferedWriterStopReport,
    RecordAdmission,
)

__all__ = ["AUDIT_TABLE", "AuditEvent", "AuditLog", "audit_events_table"]

logger = logging.getLogger("aster_forge._demo.audit")

AUDIT_TABLE = "demo_audit_events"
"""The name of the demo's audit table."""


def audit_events_table(metadata: sa.MetaData) -> sa.Table:
    """Define (or return) the ``demo_audit_events`` table on ``metadata``."""
    existing = metadata.tables.get(AUDIT_TABLE)
    if existing is not None:
        return existing
    return sa.Table(
        AUDIT_TABLE,
        metadata,
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True),
        sa.Column("at", UtcDateTime(), nullable=False),
        sa.Column("instance", sa.String(128), nullable=False),
        sa.Column("event", sa.String(64), nullable=False),
        sa.Column("task_id", sa.BigInteger(), nullable=True),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Index("ix_demo_audit_events_at", "at"),
    )


@dataclass(frozen=True, slots=True)
class AuditEvent:
    """One audit row.

    Attributes:
        at: When it happened (aware UTC).
        instance: The instance that recorded it.
        event: A short event name (``task.published``, ``schedule.fired``...).
        task_id: The task it concerns, if any.
        detail: Free text for people.
    """

    at: datetime
    instance: str
    event: str
    task_id: int | None
    detail: str


def _row(event: AuditEvent) -> dict[str, Any]:
    return {
        "at": event.at,
        "instance": event.instance[:128],
        "event": event.event[:64],
        "task_id": event.task_id,
        "detail": event.detail,
    }


class AuditLog:
    """The audit table's batch writer and the loop that resumes it after a retryable failure.

    Args:
        engine: The product's engine.
        table: The audit table (from :func:`audit_events_table`).
        config: Writer sizing (default: 1000 records, batches of 50, 500 ms delay).
    """

    def __init__(
        self,
        engine: AsyncEngine,
        table: sa.Table,
        config: BufferedBatchConfig | None = None,
    ) -> None:
        self._engine = engine
        self._table = table
        self._writer: ManagedBatchWriter[AuditEvent, SQLAlchemyError] = ManagedBatchWriter(
            config
            or BufferedBatchConfig(capacity=1000, batch_size=50, max_delay=timedelta(seconds=0.5)),
            OverflowPolicy.DIRECT_WRITE,
            None,
            self._persist,
        )

    @property
    def writer(self) -> ManagedBatchWriter[AuditEvent, SQLAlchemyError]:
        """The underlying writer (its snapshot feeds health and the admin view)."""
        return self._writer

    async def _persist(self, events: list[AuditEvent]) -> None:
        try:
            async with self._engine.begin() as conn:
                await conn.execute(sa.insert(self._table), [_row(e) for e in events])
        except DBAPIError as exc:
            # A dropped connection happened before COMMIT returned: the rows may or may
            # not be there. Anything else (locked, unavailable) did not commit.
            if exc.connection_invalidated:
                raise WriteFailure.unknown_commit(exc) from exc
            raise WriteFailure.retryable(exc) from exc
        except SQLAlchemyError as exc:
            raise WriteFailure.permanent(exc) from exc

    def health(self, name: str) -> HealthComponentReport:
        """Degraded while writes are paused, quarantined or the writer is not running."""
        snap = self._writer.snapshot()
        if snap.quarantined:
            report = HealthComponentReport.degraded(name, "audit writer quarantined")
        elif snap.batch_failure is not None:
            report = HealthComponentReport.degraded(name, "audit writes paused")
        elif snap.lifecycle is not BufferedWriterLifecycle.RUNNING:
            report = HealthComponentReport.degraded(name, f"audit writer {snap.lifecycle.value}")
        else:
            report = HealthComponentReport.healthy(name, "audit writer running")
        pending = HealthComponentDetailValue.unsigned(snap.queued_pending)
        confirmed = HealthComponentDetailValue.unsigned(snap.batch_confirmed)
        return report.with_detail("pending", pending).with_detail("confirmed", confirmed)

    async def start(self) -> None:
        """Start the writer's worker (startup phase)."""
        await self._writer.start()

    async def record(self, event: AuditEvent) -> RecordAdmission:
        """Queue ``event`` for the next batch."""
        return await self._writer.record(event)

    async def run_retry_loop(self, token: CancellationToken) -> None:
        """Resume a lane paused by a RETRYABLE failure every two seconds until cancelled."""
        while not await token.sleep(2.0):
            resumed = self._writer.retry_failed()
            if resumed:
                logger.info(
                    "audit writer resumed after a retryable failure: %s",
                    sorted(lane.value for lane in resumed),
                )

    async def stop(self, budget: timedelta) -> BufferedWriterStopReport[SQLAlchemyError]:
        """Drain and stop the writer within ``budget`` (shutdown phase)."""
        report = await self._writer.stop_within(budget)
        if not report.drained:
            logger.warning(
                "audit writer stopped with %d unconfirmed events",
                report.unconfirmed_batch + report.unconfirmed_direct,
            )
        return report
