"""Schedules of the scheduled catalog: a fixed interval or a cron expression in a timezone.

Both are values: built (and validated) at declaration, they compute firing times and
never touch a store. Cron expressions are parsed and evaluated by ``cronsim`` (the
``cron`` extra), imported only when a :class:`CronSchedule` is built.

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

import importlib
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from functools import cache
from typing import Any, TypeAlias
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ..runtime._internal import NEVER_EXPIRES, saturating_expiry
from .errors import (
    CronExtraMissingError,
    CronScheduleError,
    PeriodicTaskConfigError,
    ScheduledTaskValueError,
)

__all__ = [
    "MAX_CRON_EXPRESSION_LENGTH",
    "MAX_CRON_TIMEZONE_LENGTH",
    "CronSchedule",
    "IntervalSchedule",
    "Schedule",
    "cron_schedule_text",
    "interval_schedule_text",
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
        return interval_schedule_text(self.effective_every)

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
        return cron_schedule_text(self.expression, self.timezone)

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


def interval_schedule_text(every: timedelta) -> str:
    """Describe an interval compactly: ``every 1d2h``, ``every 5m``, ``every 0.25s``.

    Example:
        >>> interval_schedule_text(timedelta(hours=1, minutes=30))
        'every 1h30m'
    """
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


def cron_schedule_text(expression: str, timezone: str) -> str:
    """Describe a cron schedule: ``"<expression> (<timezone>)"``.

    Example:
        >>> cron_schedule_text("*/5 * * * *", "UTC")
        '*/5 * * * * (UTC)'
    """
    return f"{expression} ({timezone})"


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
