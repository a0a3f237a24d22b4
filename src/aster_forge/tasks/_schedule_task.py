"""Scheduled task value types: the task an instance runs, the run context, firing times."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from ..runtime import CancellationToken
from ._dedupe import TaskDedupeKey, scheduled_task_dedupe_key
from ._periodic import periodic_sleep_duration
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
    "scheduled_next_run_at",
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


def scheduled_next_run_at(
    scheduled_at: datetime, claimed_at: datetime, interval: timedelta
) -> datetime:
    """The next firing after a run of ``scheduled_at`` claimed at ``claimed_at``.

    The first grid point ``scheduled_at + k * interval`` (``k >= 1``) later than
    ``claimed_at``: grid points that passed before the claim are covered by this run
    (the catch-up policy). Saturates instead of overflowing.

    Example:
        >>> t0 = datetime(2030, 1, 1, tzinfo=UTC)
        >>> scheduled_next_run_at(t0, t0 + timedelta(hours=5, minutes=1), timedelta(hours=1))
        datetime.datetime(2030, 1, 1, 6, 0, tzinfo=datetime.timezone.utc)
    """
    return IntervalSchedule(every=interval).following_run_at(scheduled_at, claimed_at)


@dataclass(frozen=True, slots=True)
class ScheduledPeriodicTask:
    """One scheduled catalog task as this instance runs it.

    Either ``interval`` (the seed's shape, with ``initial_delay``) or a ``schedule``
    keyword (:class:`~aster_forge.tasks.IntervalSchedule` or
    :class:`~aster_forge.tasks.CronSchedule`) with ``interval=None``.

    Attributes:
        namespace: The product namespace (at most 64 characters: it is part of the
            firing's dedupe key).
        name: The task's wire name, unique in ``namespace`` (at most 128 characters).
        interval: The period; zero is clamped to one second (see
            :func:`~aster_forge.tasks.periodic_sleep_duration`). ``None`` when
            ``schedule`` is given.
        owner_id: This process's owner id (one per process, e.g.
            :func:`~aster_forge.runtime.new_runtime_lease_owner_id`).
        claim_ttl: How long a claim lasts without renewal; another instance may run
            the firing after that if this one crashed.
        initial_delay: Delay of the very first firing when the row is created (with
            ``interval`` only; an :class:`~aster_forge.tasks.IntervalSchedule` has its own).
        schedule: The schedule, instead of ``interval``.

    Raises:
        ScheduledTaskValueError: On an invalid identifier or duration.
        TaskDedupeKeyError: When ``namespace``/``name`` cannot form a dedupe key.
        PeriodicTaskConfigError: On a negative interval, or neither or both of
            ``interval`` and ``schedule``.

    Example:
        >>> task = ScheduledPeriodicTask(
        ...     namespace="shop",
        ...     name="cleanup",
        ...     interval=None,
        ...     owner_id="owner-1",
        ...     schedule=CronSchedule("*/5 * * * *"),
        ... )
        >>> task.effective_schedule.text
        '*/5 * * * * (UTC)'
    """

    namespace: str
    name: str
    interval: timedelta | None
    owner_id: str
    claim_ttl: timedelta = DEFAULT_SCHEDULED_CLAIM_TTL
    initial_delay: timedelta | None = None
    schedule: Schedule | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        validate_scheduled_identifier("namespace", self.namespace)
        validate_scheduled_identifier("name", self.name)
        validate_scheduled_identifier("owner_id", self.owner_id)
        _schedule_of(self)
        validate_scheduled_duration("claim_ttl", self.claim_ttl)
        # Fail at declaration, not at the first firing, when the key would be too long.
        scheduled_task_dedupe_key(self.namespace, self.name, _PROBE_TIME)

    @property
    def effective_schedule(self) -> Schedule:
        """The schedule in force: ``schedule``, or ``interval`` as an interval schedule."""
        return _schedule_of(self)

    @property
    def effective_interval(self) -> timedelta | None:
        """The interval actually used (zero clamped to one second); ``None`` for cron."""
        schedule = self.effective_schedule
        return schedule.effective_every if isinstance(schedule, IntervalSchedule) else None


def _schedule_of(task: ScheduledPeriodicTask) -> Schedule:
    """The task's schedule; raises when ``interval``/``schedule`` do not give exactly one."""
    if task.schedule is None:
        if task.interval is None:
            raise PeriodicTaskConfigError(
                f"scheduled task {task.name!r}: give an interval or a schedule"
            )
        periodic_sleep_duration(task.interval)
        if task.initial_delay is not None:
            validate_scheduled_duration("initial_delay", task.initial_delay, allow_zero=True)
        return IntervalSchedule(every=task.interval, initial_delay=task.initial_delay)
    if not isinstance(task.schedule, CronSchedule | IntervalSchedule):
        raise PeriodicTaskConfigError(
            f"scheduled task {task.name!r}: schedule must be an IntervalSchedule or "
            f"a CronSchedule, got {type(task.schedule).__name__}"
        )
    if task.interval is not None or task.initial_delay is not None:
        raise PeriodicTaskConfigError(
            f"scheduled task {task.name!r}: give interval (and initial_delay) or schedule, not both"
        )
    return task.schedule


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
