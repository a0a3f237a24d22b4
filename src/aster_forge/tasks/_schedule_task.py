"""Scheduled task value types: the task an instance runs, the run context, firing times."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from ..runtime import CancellationToken
from ._dedupe import TaskDedupeKey, scheduled_task_dedupe_key
from ._schedule_types import (
    ScheduledTaskClaim,
    validate_scheduled_duration,
    validate_scheduled_identifier,
)
from ._schedules import CronSchedule, IntervalSchedule, Schedule
from .errors import PeriodicTaskConfigError

__all__ = [
    "DEFAULT_SCHEDULED_CLAIM_TTL",
    "ScheduledPeriodicTask",
    "ScheduledTaskRun",
    "scheduled_claim_renew_interval",
]

DEFAULT_SCHEDULED_CLAIM_TTL = timedelta(seconds=120)
"""How long a claim lasts without renewal, unless configured otherwise."""

_MIN_RENEW_INTERVAL = timedelta(milliseconds=10)
_PROBE_TIME = datetime(2000, 1, 1, tzinfo=UTC)


def scheduled_claim_renew_interval(claim_ttl: timedelta) -> timedelta:
    """How often a running firing's claim is renewed: a third of ``claim_ttl``, at least 10 ms.

    Raises:
        ScheduledTaskValueError: When ``claim_ttl`` is not a positive ``timedelta``.

    Example:
        >>> scheduled_claim_renew_interval(timedelta(seconds=120))
        datetime.timedelta(seconds=40)
        >>> scheduled_claim_renew_interval(timedelta(milliseconds=15))
        datetime.timedelta(microseconds=10000)
    """
    validate_scheduled_duration("claim_ttl", claim_ttl)
    return max(claim_ttl / 3, _MIN_RENEW_INTERVAL)


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduledPeriodicTask:
    """One scheduled catalog task as this instance runs it.

    Attributes:
        namespace: The product namespace (at most 64 characters: it is part of the
            firing's dedupe key).
        name: The task's wire name, unique in ``namespace`` (at most 128 characters).
        owner_id: This process's owner id (one per process, e.g.
            :func:`~aster_forge.runtime.new_runtime_lease_owner_id`).
        schedule: When it fires: an :class:`~aster_forge.tasks.IntervalSchedule` or a
            :class:`~aster_forge.tasks.CronSchedule`.
        claim_ttl: How long a claim lasts without renewal; another instance may run
            the firing after that if this one crashed.

    Raises:
        ScheduledTaskValueError: On an invalid identifier or duration.
        TaskDedupeKeyError: When ``namespace``/``name`` cannot form a dedupe key.
        PeriodicTaskConfigError: When ``schedule`` is not a schedule value.

    Example:
        >>> task = ScheduledPeriodicTask(
        ...     namespace="shop",
        ...     name="cleanup",
        ...     owner_id="owner-1",
        ...     schedule=CronSchedule("*/5 * * * *"),
        ... )
        >>> task.schedule.text
        '*/5 * * * * (UTC)'
    """

    namespace: str
    name: str
    owner_id: str
    schedule: Schedule
    claim_ttl: timedelta = DEFAULT_SCHEDULED_CLAIM_TTL

    def __post_init__(self) -> None:
        validate_scheduled_identifier("namespace", self.namespace)
        validate_scheduled_identifier("name", self.name)
        validate_scheduled_identifier("owner_id", self.owner_id)
        if not isinstance(self.schedule, CronSchedule | IntervalSchedule):
            raise PeriodicTaskConfigError(
                f"scheduled task {self.name!r}: schedule must be an IntervalSchedule or "
                f"a CronSchedule, got {type(self.schedule).__name__}"
            )
        validate_scheduled_duration("claim_ttl", self.claim_ttl)
        # Fail at declaration, not at the first firing, when the key would be too long.
        scheduled_task_dedupe_key(self.namespace, self.name, _PROBE_TIME)


@dataclass(frozen=True, slots=True)
class ScheduledTaskRun:
    """What a scheduled body is given for one claimed firing.

    Attributes:
        task: The scheduled task.
        claim: This instance's claim on the firing.
        dedupe_key: The firing's key (:func:`~aster_forge.tasks.scheduled_task_dedupe_key`
            of ``claim.scheduled_at``): use it for the history/task row the firing
            creates, so a re-run after a crash cannot create a second one.
        shutdown_token: Cancelled when the worker group stops; a long body should
            return early when it is (the group cancels it after its grace period).
        kind: The product's runtime-task kind, when the runner was given one.
    """

    task: ScheduledPeriodicTask
    claim: ScheduledTaskClaim
    dedupe_key: TaskDedupeKey
    shutdown_token: CancellationToken
    kind: Any = None

    @property
    def scheduled_at(self) -> datetime:
        """The firing time on the store's clock."""
        return self.claim.scheduled_at
