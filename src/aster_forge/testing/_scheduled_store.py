"""An in-memory :class:`~aster_forge.tasks.ScheduledTaskStore` for tests and single processes."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime, timedelta

from ..runtime._internal import Clock, SystemClock, saturating_expiry
from ..tasks import CronSchedule, IntervalSchedule, ScheduledTaskOutcome
from ..tasks._internal import (
    ScheduledTaskClaim,
    ScheduledTaskRecord,
    stored_schedule_columns,
    validate_claim_scheduled_task_args,
    validate_complete_scheduled_task_args,
    validate_ensure_scheduled_task_args,
    validate_scheduled_claim,
    validate_scheduled_duration,
    validate_scheduled_identifier,
)

__all__ = ["InMemoryScheduledTaskStore"]


class InMemoryScheduledTaskStore:
    """A :class:`~aster_forge.tasks.ScheduledTaskStore` kept in a dict, on an injected clock.

    Same semantics as :class:`aster_forge.db.ScheduledTaskDbStore` (it passes the same
    conformance suite), coordinating only the coroutines of one process.

    Args:
        clock: The time source; a ``ManualClock`` in tests.

    Example:
        >>> store = InMemoryScheduledTaskStore()
        >>> store.__class__.__name__
        'InMemoryScheduledTaskStore'
    """

    def __init__(self, clock: Clock | None = None) -> None:
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._rows: dict[tuple[str, str], ScheduledTaskRecord] = {}
        self._next_id = 1

    async def ensure_scheduled_task(
        self,
        namespace: str,
        name: str,
        schedule: IntervalSchedule | CronSchedule,
    ) -> ScheduledTaskRecord:
        """Insert the row if missing, else store a changed schedule (see the protocol)."""
        value = validate_ensure_scheduled_task_args(namespace, name, schedule)
        interval, cron_expression, cron_timezone = stored_schedule_columns(value)
        now = self._clock.now()
        key = (namespace, name)
        row = self._rows.get(key)
        if row is None:
            row = ScheduledTaskRecord(
                task_id=self._next_id,
                namespace=namespace,
                name=name,
                interval=interval,
                next_run_at=value.first_run_at(now),
                claimed_by=None,
                last_claimed_at=None,
                claim_expires_at=None,
                last_run_status=None,
                last_run_error=None,
                last_run_duration=None,
                last_run_finished_at=None,
                run_count=0,
                created_at=now,
                updated_at=now,
                cron_expression=cron_expression,
                cron_timezone=cron_timezone,
            )
            self._next_id += 1
        elif (row.interval, row.cron_expression, row.cron_timezone) != (
            interval,
            cron_expression,
            cron_timezone,
        ):
            next_run_at = row.next_run_at
            if isinstance(value, CronSchedule) and row.claimed_by is None:
                next_run_at = value.first_run_at(now)
            row = dataclasses.replace(
                row,
                interval=interval,
                cron_expression=cron_expression,
                cron_timezone=cron_timezone,
                next_run_at=next_run_at,
                updated_at=now,
            )
        self._rows[key] = row
        return row

    async def claim_scheduled_task(
        self, namespace: str, name: str, owner_id: str, claim_ttl: timedelta
    ) -> ScheduledTaskClaim | None:
        """Claim the due, unclaimed-or-expired firing (see the protocol)."""
        validate_claim_scheduled_task_args(namespace, name, owner_id, claim_ttl)
        now = self._clock.now()
        row = self._rows.get((namespace, name))
        if row is None or row.next_run_at > now:
            return None
        if row.claimed_by is not None and (
            row.claim_expires_at is None or row.claim_expires_at > now
        ):
            return None
        expires_at = saturating_expiry(now, claim_ttl)
        self._rows[(namespace, name)] = dataclasses.replace(
            row,
            claimed_by=owner_id,
            last_claimed_at=now,
            claim_expires_at=expires_at,
            updated_at=now,
        )
        return ScheduledTaskClaim(
            task_id=row.task_id,
            namespace=namespace,
            name=name,
            owner_id=owner_id,
            claimed_at=now,
            claim_expires_at=expires_at,
            scheduled_at=row.next_run_at,
        )

    def _owned(self, claim: ScheduledTaskClaim) -> ScheduledTaskRecord | None:
        validate_scheduled_claim(claim)
        row = self._rows.get((claim.namespace, claim.name))
        if (
            row is None
            or row.task_id != claim.task_id
            or row.claimed_by != claim.owner_id
            or row.last_claimed_at != claim.claimed_at
        ):
            return None
        return row

    async def renew_scheduled_task_claim(
        self, claim: ScheduledTaskClaim, claim_ttl: timedelta
    ) -> bool:
        """Extend a claim that still matches the ownership predicate (see the protocol)."""
        row = self._owned(claim)
        validate_scheduled_duration("claim_ttl", claim_ttl)
        if row is None:
            return False
        now = self._clock.now()
        self._rows[(row.namespace, row.name)] = dataclasses.replace(
            row, claim_expires_at=saturating_expiry(now, claim_ttl), updated_at=now
        )
        return True

    async def complete_scheduled_task(
        self,
        claim: ScheduledTaskClaim,
        outcome: ScheduledTaskOutcome,
        *,
        next_run_at: datetime | None = None,
    ) -> bool:
        """Record the outcome, advance ``next_run_at``, release the claim (see the protocol)."""
        row = self._owned(claim)
        validate_complete_scheduled_task_args(outcome, next_run_at)
        if row is None:
            return False
        now = self._clock.now()
        self._rows[(row.namespace, row.name)] = dataclasses.replace(
            row,
            claimed_by=None,
            claim_expires_at=None,
            next_run_at=next_run_at if next_run_at is not None else row.schedule.next_after(now),
            last_run_status=outcome.status,
            last_run_error=outcome.error,
            last_run_duration=outcome.duration,
            last_run_finished_at=now,
            run_count=row.run_count + 1,
            updated_at=now,
        )
        return True

    async def get_scheduled_task(self, namespace: str, name: str) -> ScheduledTaskRecord | None:
        """Return the catalog row, or ``None``."""
        validate_scheduled_identifier("namespace", namespace)
        validate_scheduled_identifier("name", name)
        return self._rows.get((namespace, name))

    async def list_scheduled_tasks(
        self, namespace: str | None = None
    ) -> Sequence[ScheduledTaskRecord]:
        """Return the catalog rows ordered by namespace and name."""
        if namespace is not None:
            validate_scheduled_identifier("namespace", namespace)
        return [
            row
            for key, row in sorted(self._rows.items())
            if namespace is None or key[0] == namespace
        ]

    def __repr__(self) -> str:
        return f"<InMemoryScheduledTaskStore tasks={len(self._rows)}>"
