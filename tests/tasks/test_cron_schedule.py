"""Cron and interval schedules as values: firing times across DST changes, validation."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from aster_forge.tasks import CronSchedule, IntervalSchedule
from aster_forge.tasks.errors import (
    CronExtraMissingError,
    CronScheduleError,
    PeriodicTaskConfigError,
    ScheduledTaskValueError,
)


def _utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def _firings(schedule: CronSchedule, start: datetime, count: int) -> list[datetime]:
    out: list[datetime] = []
    moment = start
    for _ in range(count):
        moment = schedule.next_after(moment)
        out.append(moment)
    return out


# Europe/Paris 2026: 29 March 02:00 CET -> 03:00 CEST (01:00 UTC);
# 25 October 03:00 CEST -> 02:00 CET (01:00 UTC).
# America/New_York 2026: 8 March 02:00 EST -> 03:00 EDT (07:00 UTC);
# 1 November 02:00 EDT -> 01:00 EST (06:00 UTC).


def test_paris_spring_forward_fixed_time_fires_once_at_the_first_valid_instant() -> None:
    paris = CronSchedule("30 2 * * *", timezone="Europe/Paris")
    assert _firings(paris, _utc(2026, 3, 28, 12), 3) == [
        _utc(2026, 3, 29, 1, 0),  # 02:30 does not exist: 03:00 CEST, the first valid instant
        _utc(2026, 3, 30, 0, 30),  # 02:30 CEST
        _utc(2026, 3, 31, 0, 30),
    ]


def test_paris_fall_back_fixed_time_fires_once_on_the_first_occurrence() -> None:
    paris = CronSchedule("30 2 * * *", timezone="Europe/Paris")
    assert _firings(paris, _utc(2026, 10, 24, 12), 3) == [
        _utc(2026, 10, 25, 0, 30),  # 02:30 CEST; the repeated 02:30 CET does not fire
        _utc(2026, 10, 26, 1, 30),  # 02:30 CET
        _utc(2026, 10, 27, 1, 30),
    ]


def test_new_york_spring_forward_and_fall_back_fixed_times() -> None:
    spring = CronSchedule("30 2 * * *", timezone="America/New_York")
    assert _firings(spring, _utc(2026, 3, 7, 17), 2) == [
        _utc(2026, 3, 8, 7, 0),  # 03:00 EDT
        _utc(2026, 3, 9, 6, 30),  # 02:30 EDT
    ]
    fall = CronSchedule("30 1 * * *", timezone="America/New_York")
    assert _firings(fall, _utc(2026, 10, 31, 16), 2) == [
        _utc(2026, 11, 1, 5, 30),  # 01:30 EDT; 01:30 EST (06:30 UTC) is skipped
        _utc(2026, 11, 2, 6, 30),  # 01:30 EST
    ]


def test_inside_the_repeated_hour_the_next_firing_is_still_in_the_future() -> None:
    # 01:10 EST, the second pass: the wall time 01:30 already fired (as EDT) an hour ago.
    fall = CronSchedule("30 1 * * *", timezone="America/New_York")
    assert fall.next_after(_utc(2026, 11, 1, 6, 10)) == _utc(2026, 11, 2, 6, 30)


def test_wildcard_schedules_run_on_real_time_through_both_changes() -> None:
    every_half_hour = CronSchedule("*/30 * * * *", timezone="Europe/Paris")
    # Fall back: the repeated hour fires in both passes, every 30 real minutes.
    got = _firings(every_half_hour, _utc(2026, 10, 24, 23, 10), 6)
    assert got == [_utc(2026, 10, 24, 23, 30) + timedelta(minutes=30 * i) for i in range(6)]
    # Spring forward: no real-time gap either.
    got = _firings(every_half_hour, _utc(2026, 3, 29, 0, 10), 4)
    assert got == [_utc(2026, 3, 29, 0, 30) + timedelta(minutes=30 * i) for i in range(4)]


def test_six_fields_have_a_leading_seconds_field() -> None:
    every_ten_seconds = CronSchedule("*/10 * * * * *")
    assert _firings(every_ten_seconds, _utc(2030, 1, 1, 0, 0, 3), 3) == [
        _utc(2030, 1, 1, 0, 0, 10),
        _utc(2030, 1, 1, 0, 0, 20),
        _utc(2030, 1, 1, 0, 0, 30),
    ]


def test_following_run_covers_missed_cron_instants_once() -> None:
    five = CronSchedule("*/5 * * * *")
    # Due at 10:05, claimed at 10:37 after downtime: the next firing is 10:40.
    assert five.following_run_at(_utc(2030, 1, 1, 10, 5), _utc(2030, 1, 1, 10, 37)) == _utc(
        2030, 1, 1, 10, 40
    )
    assert five.first_run_at(_utc(2030, 1, 1, 10, 5)) == _utc(2030, 1, 1, 10, 10)


def test_expression_is_normalised_and_described() -> None:
    schedule = CronSchedule("  */5   *  * * * ", timezone="Europe/Paris")
    assert schedule.expression == "*/5 * * * *"
    assert schedule == CronSchedule("*/5 * * * *", timezone="Europe/Paris")
    assert schedule.text == "*/5 * * * * (Europe/Paris)"
    assert IntervalSchedule(every=timedelta(hours=1, minutes=30)).text == "every 1h30m"
    assert IntervalSchedule(every=timedelta(milliseconds=250)).text == "every 0.25s"
    assert IntervalSchedule(every=timedelta(0)).text == "every 1s"


@pytest.mark.parametrize(
    "expression",
    ["", "   ", "* * *", "61 * * * *", "*/0 * * * *", "* 24 * * *", "nope", "0 0 31 2 *"],
)
def test_bad_cron_expressions_are_typed_errors_naming_the_expression(expression: str) -> None:
    with pytest.raises(CronScheduleError) as info:
        CronSchedule(expression)
    assert isinstance(info.value, ScheduledTaskValueError)
    assert " ".join(expression.split())[:40] in str(info.value)


@pytest.mark.parametrize("zone", ["Mars/Olympus", "", "../etc/passwd", "Europe/Paris "])
def test_unknown_timezones_are_typed_errors_naming_the_expression(zone: str) -> None:
    with pytest.raises(CronScheduleError, match=r"'\*/5 \* \* \* \*'"):
        CronSchedule("*/5 * * * *", timezone=zone)


def test_wrong_types_and_naive_moments_are_rejected() -> None:
    with pytest.raises(CronScheduleError):
        CronSchedule(5)  # type: ignore[arg-type]
    with pytest.raises(CronScheduleError):
        CronSchedule("* * * * *", timezone=None)  # type: ignore[arg-type]
    with pytest.raises(ScheduledTaskValueError, match="aware"):
        CronSchedule("* * * * *").next_after(datetime(2030, 1, 1))
    with pytest.raises(PeriodicTaskConfigError):
        IntervalSchedule(every=timedelta(seconds=-1))
    with pytest.raises(ScheduledTaskValueError):
        IntervalSchedule(every=timedelta(seconds=1), initial_delay=timedelta(seconds=-1))


def test_a_cron_that_never_matches_again_saturates_to_never() -> None:
    # Days 1 and 21 (day-of-month "*/20" ANDs with day-of-week) that are also the
    # month's last Monday: impossible, so cronsim finds none in its 50-year horizon.
    never = CronSchedule("* * */20 * 1L")
    assert never.next_after(_utc(2030, 1, 1)).year == 9999


_MISSING_EXTRA = """
import sys
sys.modules["cronsim"] = None  # what an environment without the extra looks like
from aster_forge.tasks import CronSchedule
from aster_forge.tasks.errors import CronExtraMissingError
try:
    CronSchedule("*/5 * * * *")
except CronExtraMissingError as exc:
    print("missing:", exc)
"""


def test_missing_cron_extra_is_a_clear_error_naming_it() -> None:
    result = subprocess.run(
        [sys.executable, "-c", _MISSING_EXTRA],
        capture_output=True,
        text=True,
        timeout=50,
        check=True,
    )
    assert "missing:" in result.stdout and "aster-forge[cron]" in result.stdout
    assert issubclass(CronExtraMissingError, ImportError)


# --- properties -----------------------------------------------------------------------

_ZONES = ["UTC", "Europe/Paris", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata"]


def _transitions(zone: str, year: int) -> list[datetime]:
    """The UTC hours of ``year`` at which ``zone``'s offset changes (DST starts/ends)."""
    tz = ZoneInfo(zone)
    hour = _utc(year, 1, 1)
    found = []
    while hour.year == year:
        if (
            hour.astimezone(tz).utcoffset()
            != (hour + timedelta(hours=1)).astimezone(tz).utcoffset()
        ):
            found.append(hour + timedelta(hours=1))
        hour += timedelta(hours=1)
    return found


_CHANGES = [t for zone in ("Europe/Paris", "America/New_York") for t in _transitions(zone, 2026)]
_MOMENTS = st.one_of(
    st.datetimes(
        min_value=datetime(2020, 1, 1), max_value=datetime(2035, 12, 31), timezones=st.just(UTC)
    ),
    # Most bugs live within a few hours of a DST change: sample there often.
    st.builds(
        lambda change, offset: change + timedelta(seconds=offset),
        st.sampled_from(_CHANGES),
        st.integers(min_value=-4 * 3600, max_value=4 * 3600),
    ),
)


def _matches(expression: str, local: datetime) -> bool:
    minute, hour, _, _, weekday = expression.split()
    if local.second or local.microsecond:
        return False

    def field(spec: str, value: int) -> bool:
        if spec == "*":
            return True
        if spec.startswith("*/"):
            return value % int(spec[2:]) == 0
        if "-" in spec:
            low, high = spec.split("-")
            return int(low) <= value <= int(high)
        return value in {int(v) for v in spec.split(",")}

    cron_weekday = (local.weekday() + 1) % 7  # cron: 0 = Sunday
    return field(minute, local.minute) and field(hour, local.hour) and field(weekday, cron_weekday)


# Minute or hour starting with "*": matched on real time, so a brute-force walk over
# every UTC minute is an exact oracle.
_REAL_TIME = ["*/7 * * * *", "0 * * * *", "15,45 */2 * * 1-5", "*/20 * * * 0"]


@settings(max_examples=150, deadline=None)
@given(moment=_MOMENTS, zone=st.sampled_from(_ZONES), expression=st.sampled_from(_REAL_TIME))
def test_real_time_next_is_the_first_matching_instant_after(
    moment: datetime, zone: str, expression: str
) -> None:
    schedule = CronSchedule(expression, timezone=zone)
    nxt = schedule.next_after(moment)
    assert nxt > moment
    tz = ZoneInfo(zone)
    assert _matches(expression, nxt.astimezone(tz))
    probe = moment.replace(second=0, microsecond=0) + timedelta(minutes=1)
    while probe < nxt:
        assert not _matches(expression, probe.astimezone(tz)), f"skipped {probe}"
        probe += timedelta(minutes=1)


@settings(max_examples=200, deadline=None)
@given(
    moment=_MOMENTS,
    zone=st.sampled_from(_ZONES),
    expression=st.sampled_from(["30 2 * * *", "30 1 * * *", "45 3 * * 1-5", *_REAL_TIME]),
    fraction=st.floats(min_value=0.0, max_value=0.999),
)
# Inside the second pass of a repeated hour, before the wall time fired in the first.
@example(moment=_utc(2026, 10, 25, 1, 10), zone="Europe/Paris", expression="30 2 * * *", fraction=0)
@example(
    moment=_utc(2026, 11, 1, 6, 10), zone="America/New_York", expression="30 1 * * *", fraction=0
)
# Just before a spring-forward gap that swallows the wall time.
@example(
    moment=_utc(2026, 3, 29, 0, 59), zone="Europe/Paris", expression="30 2 * * *", fraction=0.5
)
def test_next_is_monotonic_and_stable_up_to_the_next_instant(
    moment: datetime, zone: str, expression: str, fraction: float
) -> None:
    schedule = CronSchedule(expression, timezone=zone)
    nxt = schedule.next_after(moment)
    assert nxt > moment
    assert nxt.utcoffset() == timedelta(0)
    tz = ZoneInfo(zone)
    local = nxt.astimezone(tz)
    # A cron instant: its wall time matches, or it is the first instant after a
    # spring-forward gap that swallowed the wall time (the documented exception).
    jumped = (nxt - timedelta(seconds=1)).astimezone(tz).utcoffset() != local.utcoffset()
    assert _matches(expression, local) or jumped
    # Any moment between `moment` and `nxt` has the same next firing: nothing skipped.
    between = moment + (nxt - moment) * fraction
    assert schedule.next_after(between) == nxt
    assert schedule.next_after(nxt) > nxt
