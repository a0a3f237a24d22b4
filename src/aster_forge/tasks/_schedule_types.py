"""Scheduled task catalog value types: catalog rows, claims, run outcomes, validation."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime, timedelta

from .._validation import check_stored_duration, check_stored_identifier
from ._schedules import (
    CronSchedule,
    IntervalSchedule,
    Schedule,
    cron_schedule_text,
    interval_schedule_text,
)
from .errors import ScheduledTaskValueError

__all__ = [
    "MAX_SCHEDULED_TASK_NAME_LENGTH",
    "ScheduledTaskClaim",
    "ScheduledTaskOutcome",
    "ScheduledTaskRecord",
    "ScheduledTaskRunStatus",
    "stored_schedule_columns",
    "validate_claim_scheduled_task_args",
    "validate_complete_scheduled_task_args",
    "validate_ensure_scheduled_task_args",
    "validate_scheduled_claim",
    "validate_scheduled_duration",
    "validate_scheduled_identifier",
]

MAX_SCHEDULED_TASK_NAME_LENGTH = 255
"""The longest namespace, name or owner id (characters) a catalog store accepts.

It is the width of the catalog's key columns (``VARCHAR(255)``); every store refuses a
longer value with :class:`~aster_forge.tasks.ScheduledTaskValueError` rather than let
one backend truncate it and another raise.
"""


def validate_scheduled_identifier(what: str, value: object) -> str:
    """Check a namespace, task name or owner id.

    Returns:
        ``value`` unchanged when valid.

    Raises:
        ScheduledTaskValueError: When it is not a non-empty ``str`` of at most
            :data:`MAX_SCHEDULED_TASK_NAME_LENGTH` characters without control characters.
    """
    return check_stored_identifier(
        what, value, limit=MAX_SCHEDULED_TASK_NAME_LENGTH, error=ScheduledTaskValueError
    )


def validate_scheduled_duration(what: str, value: object, *, allow_zero: bool = False) -> timedelta:
    """Check that a duration is a positive (or, with ``allow_zero``, non-negative) timedelta.

    Raises:
        ScheduledTaskValueError: Otherwise.
    """
    return check_stored_duration(what, value, allow_zero=allow_zero, error=ScheduledTaskValueError)


class ScheduledTaskRunStatus(enum.StrEnum):
    """How one scheduled firing ended (stored as the lower-case wire value)."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class ScheduledTaskOutcome:
    """What :meth:`~aster_forge.tasks.ScheduledTaskStore.complete_scheduled_task` records.

    Attributes:
        status: Succeeded or failed.
        error: The product's error text for a failure (any length; no NUL characters).
        duration: How long the body ran, if measured.

    Raises:
        ScheduledTaskValueError: On a wrong type, a NUL in ``error`` or a negative duration.
    """

    status: ScheduledTaskRunStatus
    error: str | None = None
    duration: timedelta | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.status, ScheduledTaskRunStatus):
            raise ScheduledTaskValueError(
                f"status must be a ScheduledTaskRunStatus, got {self.status!r}"
            )
        if self.error is not None:
            if not isinstance(self.error, str):
                raise ScheduledTaskValueError(
                    f"error must be a str or None, got {type(self.error).__name__}"
                )
            if "\x00" in self.error:
                raise ScheduledTaskValueError("error must not contain NUL characters")
        if self.duration is not None:
            validate_scheduled_duration("duration", self.duration, allow_zero=True)

    @classmethod
    def succeeded(cls, duration: timedelta | None = None) -> ScheduledTaskOutcome:
        """Return a success outcome."""
        return cls(ScheduledTaskRunStatus.SUCCEEDED, None, duration)

    @classmethod
    def failed(cls, error: str | None, duration: timedelta | None = None) -> ScheduledTaskOutcome:
        """Return a failure outcome carrying the product's error text."""
        return cls(ScheduledTaskRunStatus.FAILED, error, duration)

    @property
    def duration_seconds(self) -> float | None:
        """:attr:`duration` in seconds, for metrics."""
        return None if self.duration is None else self.duration.total_seconds()


@dataclass(frozen=True, slots=True)
class ScheduledTaskClaim:
    """One instance's claim on one due firing of a scheduled task.

    The ownership predicate of renewal and completion is ``(task_id, owner_id,
    claimed_at)``: a firing another instance re-claimed (new owner or newer
    ``claimed_at``) can never be renewed or completed through an old claim.

    Attributes:
        task_id: The catalog row id.
        namespace: The product namespace.
        name: The scheduled task name.
        owner_id: The claiming runtime's owner id.
        claimed_at: The claim timestamp (store clock); part of the ownership predicate.
        claim_expires_at: When another instance may re-claim the firing unless renewed.
        scheduled_at: The firing time (``next_run_at`` when claimed); feed it to
            :func:`~aster_forge.tasks.scheduled_task_dedupe_key`.
    """

    task_id: int
    namespace: str
    name: str
    owner_id: str
    claimed_at: datetime
    claim_expires_at: datetime
    scheduled_at: datetime


@dataclass(frozen=True, slots=True)
class ScheduledTaskRecord:
    """A row of the scheduled task catalog.

    Attributes:
        task_id: The row id.
        namespace: The product namespace.
        name: The task name, unique within ``namespace``.
        interval: The period of an interval schedule (zero on a cron row); completion
            without an explicit next firing sets ``next_run_at = completed_at + interval``.
        next_run_at: When the next firing becomes due.
        claimed_by: The owner of the current claim, or ``None``.
        last_claimed_at: The latest claim timestamp (kept after completion).
        claim_expires_at: When the current claim expires, or ``None``.
        last_run_status: How the latest completed firing ended.
        last_run_error: Its error text, if any.
        last_run_duration: Its duration, if recorded.
        last_run_finished_at: When it was completed.
        run_count: How many firings were completed.
        created_at: When the row was created.
        updated_at: When the row last changed.
        cron_expression: The cron expression of a cron row, ``None`` on an interval row.
        cron_timezone: The timezone of a cron row, ``None`` on an interval row.
    """

    task_id: int
    namespace: str
    name: str
    interval: timedelta
    next_run_at: datetime
    claimed_by: str | None
    last_claimed_at: datetime | None
    claim_expires_at: datetime | None
    last_run_status: ScheduledTaskRunStatus | None
    last_run_error: str | None
    last_run_duration: timedelta | None
    last_run_finished_at: datetime | None
    run_count: int
    created_at: datetime
    updated_at: datetime
    cron_expression: str | None = None
    cron_timezone: str | None = None

    @property
    def schedule(self) -> Schedule:
        """The stored schedule as a value (a cron row needs the ``cron`` extra)."""
        if self.cron_expression is not None:
            return CronSchedule(self.cron_expression, self.cron_timezone or "UTC")
        return IntervalSchedule(every=self.interval)

    @property
    def schedule_text(self) -> str:
        """What the schedule is, for people: ``"every 5m"`` or ``"*/5 * * * * (UTC)"``."""
        if self.cron_expression is not None:
            return cron_schedule_text(self.cron_expression, self.cron_timezone or "UTC")
        return interval_schedule_text(self.interval)


def validate_ensure_scheduled_task_args(
    namespace: object, name: object, schedule: object
) -> Schedule:
    """Check the arguments of ``ScheduledTaskStore.ensure_scheduled_task``.

    Returns:
        ``schedule``, an :class:`~aster_forge.tasks.IntervalSchedule` or a
        :class:`~aster_forge.tasks.CronSchedule`.

    Raises:
        ScheduledTaskValueError: On the first invalid argument, in signature order.
    """
    validate_scheduled_identifier("namespace", namespace)
    validate_scheduled_identifier("name", name)
    if not isinstance(schedule, CronSchedule | IntervalSchedule):
        raise ScheduledTaskValueError(
            f"schedule must be an IntervalSchedule or a CronSchedule, got "
            f"{type(schedule).__name__}: pass IntervalSchedule(every=...) for an interval"
        )
    return schedule


def validate_claim_scheduled_task_args(
    namespace: object, name: object, owner_id: object, claim_ttl: object
) -> None:
    """Check the arguments of ``ScheduledTaskStore.claim_scheduled_task``.

    Raises:
        ScheduledTaskValueError: On the first invalid argument, in signature order.
    """
    validate_scheduled_identifier("namespace", namespace)
    validate_scheduled_identifier("name", name)
    validate_scheduled_identifier("owner_id", owner_id)
    validate_scheduled_duration("claim_ttl", claim_ttl)


def validate_scheduled_claim(claim: object) -> ScheduledTaskClaim:
    """Check that ``claim`` is a :class:`ScheduledTaskClaim`.

    Raises:
        ScheduledTaskValueError: When it is not.
    """
    if not isinstance(claim, ScheduledTaskClaim):
        raise ScheduledTaskValueError(
            f"claim must be a ScheduledTaskClaim, got {type(claim).__name__}"
        )
    return claim


def validate_complete_scheduled_task_args(outcome: object, next_run_at: object) -> None:
    """Check the outcome and override of ``ScheduledTaskStore.complete_scheduled_task``.

    The claim is checked separately (:func:`validate_scheduled_claim`), first.

    Raises:
        ScheduledTaskValueError: When ``outcome`` is not a :class:`ScheduledTaskOutcome`
            or ``next_run_at`` is given but not a timezone-aware datetime.
    """
    if not isinstance(outcome, ScheduledTaskOutcome):
        raise ScheduledTaskValueError(
            f"outcome must be a ScheduledTaskOutcome, got {type(outcome).__name__}"
        )
    if next_run_at is not None and (
        not isinstance(next_run_at, datetime) or next_run_at.utcoffset() is None
    ):
        raise ScheduledTaskValueError("next_run_at must be a timezone-aware datetime")


def stored_schedule_columns(schedule: Schedule) -> tuple[timedelta, str | None, str | None]:
    """How a catalog row stores ``schedule``: ``(interval, cron_expression, cron_timezone)``.

    An interval row stores its effective period and no cron columns; a cron row
    stores a zero interval and its expression and timezone. Every
    :class:`~aster_forge.tasks.ScheduledTaskStore` writes these columns, so the database
    catalog and the in-memory one describe a schedule the same way.

    Returns:
        ``(interval, cron_expression, cron_timezone)``.
    """
    if isinstance(schedule, CronSchedule):
        return timedelta(0), schedule.expression, schedule.timezone
    return schedule.effective_every, None, None
