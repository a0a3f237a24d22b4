"""The scheduled catalog's values: schedules, catalog rows, claims, outcomes, the task.

Everything here is a value: built (and validated) at declaration, it computes firing
times and never touches a store. Cron expressions are parsed and evaluated by
``cronsim`` (the ``cron`` extra), imported only when a :class:`CronSchedule` is built.

Cron semantics (those of Debian/Vixie cron, which ``cronsim`` reproduces): the
expression is matched against the wall clock of ``timezone``; firing times are
returned in UTC. Across a DST change:

- a job at a fixed time (minute and hour fields not starting with ``*``, five fields)
  whose local time is skipped by a spring-forward change fires once, at the first
  valid instant after the gap (``30 2 * * *`` in Europe/Paris fires at 03:00 CEST on
  the last Sunday of March); a local time repeated by a fall-back change fires once,
  at its first occurrence;
- a job whose minute or hour field starts with ``*`` (``*/5 * * * *``,
  ``0 * * * *``), and any six-field (seconds) expression, runs on real time: every
  matching instant fires, so it keeps its period through both changes.
"""

from __future__ import annotations

import enum
import importlib
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from functools import cache
from typing import Any, TypeAlias
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from .._validation import check_stored_duration, check_stored_identifier
from ..runtime import CancellationToken
from ..runtime._internal import NEVER_EXPIRES, saturating_expiry
from ._dedupe import TaskDedupeKey, scheduled_task_dedupe_key
from .errors import (
    CronExtraMissingError,
    CronScheduleError,
    PeriodicTaskConfigError,
    ScheduledTaskValueError,
)

__all__ = [
    "DEFAULT_SCHEDULED_CLAIM_TTL",
    "MAX_CRON_EXPRESSION_LENGTH",
    "MAX_CRON_TIMEZONE_LENGTH",
    "MAX_SCHEDULED_TASK_NAME_LENGTH",
    "CronSchedule",
    "IntervalSchedule",
    "Schedule",
    "ScheduledPeriodicTask",
    "ScheduledTaskClaim",
    "ScheduledTaskOutcome",
    "ScheduledTaskRecord",
    "ScheduledTaskRun",
    "ScheduledTaskRunStatus",
    "scheduled_claim_renew_interval",
    "stored_schedule_columns",
    "validate_claim_scheduled_task_args",
    "validate_complete_scheduled_task_args",
    "validate_ensure_scheduled_task_args",
    "validate_scheduled_claim",
    "validate_scheduled_duration",
    "validate_scheduled_identifier",
]

MAX_CRON_EXPRESSION_LENGTH = 255
"""The longest cron expression (characters) the catalog stores.

It is the width of the catalog's ``cron_expression`` column; a longer expression is
refused when the schedule is built, not when a store writes it.
"""

MAX_CRON_TIMEZONE_LENGTH = 64
"""The longest timezone name (characters) the catalog stores.

It is the width of the catalog's ``cron_timezone`` column; IANA zone names are far
shorter, so the bound only refuses garbage.
"""

_MIN_RENEW_INTERVAL = timedelta(milliseconds=10)
_PROBE_TIME = datetime(2000, 1, 1, tzinfo=UTC)
_CRON_EXTRA_HINT = "cron schedules need the 'cron' extra: pip install 'aster-forge[cron]'"

# What a zero interval becomes: a configuration slip must not make the runner spin hot
# and hammer the catalog; a non-zero sub-second interval (fast tests) is left alone.
_ZERO_INTERVAL_PERIOD = timedelta(seconds=1)


def _period(every: object) -> timedelta:
    if not isinstance(every, timedelta):
        raise PeriodicTaskConfigError(f"interval must be a timedelta, got {type(every).__name__}")
    if every < timedelta(0):
        raise PeriodicTaskConfigError(f"interval must not be negative, got {every}")
    return every if every else _ZERO_INTERVAL_PERIOD


@dataclass(frozen=True, slots=True)
class IntervalSchedule:
    """Fire every ``every``, the first firing ``initial_delay`` after the row is created.

    Firings form a grid ``first + k * every``; a run covers every grid point up to
    its claim, so missed firings run once (see :meth:`following_run_at`).

    Attributes:
        every: The period; zero is clamped to one second (a configuration slip must
            not hot-spin the runner).
        initial_delay: Delay of the very first firing (``None``: due at once).

    Raises:
        PeriodicTaskConfigError: When ``every`` is negative or not a ``timedelta``.
        ScheduledTaskValueError: When ``initial_delay`` is negative.

    Example:
        >>> schedule = IntervalSchedule(every=timedelta(minutes=5))
        >>> schedule.next_after(datetime(2030, 1, 1, tzinfo=UTC))
        datetime.datetime(2030, 1, 1, 0, 5, tzinfo=datetime.timezone.utc)
        >>> schedule.text
        'every 5m'
    """

    every: timedelta
    initial_delay: timedelta | None = None

    def __post_init__(self) -> None:
        _period(self.every)
        if self.initial_delay is not None and (
            not isinstance(self.initial_delay, timedelta) or self.initial_delay < timedelta(0)
        ):
            raise ScheduledTaskValueError(
                f"initial_delay must be a non-negative timedelta, got {self.initial_delay!r}"
            )

    @property
    def effective_every(self) -> timedelta:
        """The period actually used (zero clamped to one second)."""
        return _period(self.every)

    @property
    def text(self) -> str:
        """A short human description, e.g. ``"every 1h30m"``."""
        return _interval_text(self.effective_every)

    def first_run_at(self, now: datetime) -> datetime:
        """When a new catalog row's first firing is due: ``now + initial_delay``."""
        return saturating_expiry(now, self.initial_delay or timedelta(0))

    def next_after(self, moment: datetime) -> datetime:
        """The next firing after ``moment`` when no grid is known: ``moment + every``."""
        return saturating_expiry(moment, self.effective_every)

    def following_run_at(self, scheduled_at: datetime, claimed_at: datetime) -> datetime:
        """The firing after a run of ``scheduled_at`` claimed at ``claimed_at``.

        The first grid point ``scheduled_at + k * every`` (``k >= 1``) later than
        ``claimed_at``: grid points that passed before the claim are covered by this
        run (the catch-up policy). Saturates instead of overflowing.
        """
        every = self.effective_every
        steps = max(claimed_at - scheduled_at, timedelta(0)) // every + 1
        try:
            return saturating_expiry(scheduled_at, every * steps)
        except OverflowError:
            return NEVER_EXPIRES


@dataclass(frozen=True, slots=True)
class CronSchedule:
    """Fire at the instants a cron expression matches on the wall clock of ``timezone``.

    Five fields (``minute hour day-of-month month day-of-week``) or six with a
    leading seconds field (``*/10 * * * * *``: every ten seconds). Parsed by
    ``cronsim`` (the ``cron`` extra); see the module docstring for the DST rules.

    Attributes:
        expression: The cron expression (surrounding and repeated whitespace is
            normalised to single spaces).
        timezone: An IANA timezone name (``zoneinfo``), default ``"UTC"``.

    Raises:
        CronScheduleError: On an expression ``cronsim`` rejects or an unknown
            timezone; the message names both.
        CronExtraMissingError: When the ``cron`` extra is not installed.

    Example:
        >>> paris = CronSchedule("30 2 * * *", timezone="Europe/Paris")
        >>> paris.next_after(datetime(2030, 3, 30, 12, tzinfo=UTC))  # DST starts 31 March
        datetime.datetime(2030, 3, 31, 1, 0, tzinfo=datetime.timezone.utc)
        >>> paris.text
        '30 2 * * * (Europe/Paris)'
    """

    expression: str
    timezone: str = "UTC"

    def __post_init__(self) -> None:
        if not isinstance(self.expression, str):
            raise CronScheduleError(
                f"cron expression must be a str, got {type(self.expression).__name__}"
            )
        if not isinstance(self.timezone, str):
            raise CronScheduleError(
                f"cron timezone must be a str, got {type(self.timezone).__name__}"
            )
        normalised = " ".join(self.expression.split())
        object.__setattr__(self, "expression", normalised)
        if not normalised or len(normalised) > MAX_CRON_EXPRESSION_LENGTH:
            raise CronScheduleError(
                f"cron expression {normalised[:40]!r} must have 1 to "
                f"{MAX_CRON_EXPRESSION_LENGTH} characters"
            )
        _zone(self.timezone, normalised)
        cron_sim = _cronsim()
        try:
            cron_sim.CronSim(normalised, datetime(2000, 1, 1, tzinfo=UTC))
        except cron_sim.CronSimError as exc:
            raise CronScheduleError(
                f"invalid cron expression {normalised!r} (timezone {self.timezone}): {exc}"
            ) from exc

    @property
    def text(self) -> str:
        """A short human description, e.g. ``"*/5 * * * * (Europe/Paris)"``."""
        return f"{self.expression} ({self.timezone})"

    def first_run_at(self, now: datetime) -> datetime:
        """When a new catalog row's first firing is due: the first instant after ``now``."""
        return self.next_after(now)

    def next_after(self, moment: datetime) -> datetime:
        """The first cron instant strictly after ``moment`` (an aware datetime), in UTC.

        Returns the "never" instant (9999-12-31, the catalog's saturation point) when
        the expression matches nothing in the next 50 years (``cronsim``'s horizon).

        Raises:
            ScheduledTaskValueError: When ``moment`` is naive.
        """
        if not isinstance(moment, datetime) or moment.utcoffset() is None:
            raise ScheduledTaskValueError(f"moment must be a timezone-aware datetime: {moment!r}")
        cron_sim = _cronsim()
        zone = _zone(self.timezone, self.expression)
        try:
            for candidate in cron_sim.CronSim(self.expression, moment.astimezone(zone)):
                instant: datetime = candidate.astimezone(UTC)
                # In the second pass of a repeated hour cronsim may return the first
                # pass's instant (it matches wall times); only later instants count.
                if instant > moment:
                    return instant
        except OverflowError:
            pass
        return NEVER_EXPIRES

    def following_run_at(self, scheduled_at: datetime, claimed_at: datetime) -> datetime:
        """The firing after a run of ``scheduled_at`` claimed at ``claimed_at``.

        The first cron instant after the later of the two: instants that passed
        before the claim are covered by this run (the catch-up policy).
        """
        return self.next_after(max(scheduled_at, claimed_at))


Schedule: TypeAlias = IntervalSchedule | CronSchedule
"""A scheduled catalog task's schedule: :class:`IntervalSchedule` or :class:`CronSchedule`."""


def _interval_text(every: timedelta) -> str:
    # Compact: "every 1d2h", "every 5m", "every 0.25s".
    total = every.total_seconds()
    if total < 1 or total != int(total):
        return f"every {total:g}s"
    seconds = int(total)
    parts = []
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)):
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{count}{unit}")
    return "every " + "".join(parts)


# --- the catalog's rows, claims and outcomes ---

MAX_SCHEDULED_TASK_NAME_LENGTH = 255
"""The longest namespace, name or owner id (characters) a catalog store accepts.

It is the width of the catalog's key columns (``VARCHAR(255)``); every store refuses a
longer value with :class:`~aster_forge.tasks.ScheduledTaskValueError` rather than let
one backend truncate it and another raise.
"""


def validate_scheduled_identifier(what: str, value: object) -> str:
    """``value`` if it is a storable namespace, name or owner id, else ScheduledTaskValueError."""
    return check_stored_identifier(
        what, value, limit=MAX_SCHEDULED_TASK_NAME_LENGTH, error=ScheduledTaskValueError
    )


def validate_scheduled_duration(what: str, value: object, *, allow_zero: bool = False) -> timedelta:
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
            return f"{self.cron_expression} ({self.cron_timezone or 'UTC'})"
        return _interval_text(self.interval)


def validate_ensure_scheduled_task_args(
    namespace: object, name: object, schedule: object
) -> Schedule:
    """Check ``ensure_scheduled_task``'s arguments in order (ScheduledTaskValueError)."""
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
    """Check ``claim_scheduled_task``'s arguments in order (ScheduledTaskValueError)."""
    validate_scheduled_identifier("namespace", namespace)
    validate_scheduled_identifier("name", name)
    validate_scheduled_identifier("owner_id", owner_id)
    validate_scheduled_duration("claim_ttl", claim_ttl)


def validate_scheduled_claim(claim: object) -> ScheduledTaskClaim:
    if not isinstance(claim, ScheduledTaskClaim):
        raise ScheduledTaskValueError(
            f"claim must be a ScheduledTaskClaim, got {type(claim).__name__}"
        )
    return claim


def validate_complete_scheduled_task_args(outcome: object, next_run_at: object) -> None:
    """Check ``complete_scheduled_task``'s outcome and override (after the claim)."""
    if not isinstance(outcome, ScheduledTaskOutcome):
        raise ScheduledTaskValueError(
            f"outcome must be a ScheduledTaskOutcome, got {type(outcome).__name__}"
        )
    if next_run_at is not None and (
        not isinstance(next_run_at, datetime) or next_run_at.utcoffset() is None
    ):
        raise ScheduledTaskValueError("next_run_at must be a timezone-aware datetime")


def stored_schedule_columns(schedule: Schedule) -> tuple[timedelta, str | None, str | None]:
    """``(interval, cron_expression, cron_timezone)``: how every store writes ``schedule``.

    An interval row stores its effective period and no cron columns; a cron row a zero
    interval, its expression and timezone.
    """
    if isinstance(schedule, CronSchedule):
        return timedelta(0), schedule.expression, schedule.timezone
    return schedule.effective_every, None, None


# --- the task an instance runs ---

DEFAULT_SCHEDULED_CLAIM_TTL = timedelta(seconds=120)
"""How long a claim lasts without renewal, unless configured otherwise."""


def scheduled_claim_renew_interval(claim_ttl: timedelta) -> timedelta:
    """How often a running firing's claim is renewed: a third of ``claim_ttl``, at least 10 ms.

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


def _cronsim() -> Any:
    try:
        return importlib.import_module("cronsim")
    except ImportError as exc:
        raise CronExtraMissingError(_CRON_EXTRA_HINT) from exc


@cache
def _zone_named(name: str) -> tzinfo:
    # datetime.UTC takes cronsim's plain (no DST) path; every other zone the DST one.
    return UTC if name == "UTC" else ZoneInfo(name)


def _zone(name: str, expression: str) -> tzinfo:
    if not name or len(name) > MAX_CRON_TIMEZONE_LENGTH:
        raise CronScheduleError(
            f"cron expression {expression!r}: timezone {name[:40]!r} must have 1 to "
            f"{MAX_CRON_TIMEZONE_LENGTH} characters"
        )
    try:
        return _zone_named(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise CronScheduleError(
            f"cron expression {expression!r}: unknown timezone {name!r}"
        ) from exc
