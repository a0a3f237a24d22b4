"""A lane's rate limit: at most N task starts per period, across every claimer.

A rate limit is ``(count, period)``. Periods are fixed windows aligned to the Unix
epoch (a 1-minute period's windows start on whole minutes), so every claimer, and a
reader of ``started_at``, agrees on where a window begins without asking anyone. The
stores count the starts of the current window in the lane's row and claim at most
what is left of it; the worker then sleeps until the next window instead of polling.

A lane may also limit each partition's starts (``partition_rate_limit``): the same
windows, counted per (lane, partition) in a table of their own; a claim takes other
partitions' tasks while one partition's budget is spent. Tasks without a partition
are not counted.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from .._validation import check_int_setting, check_stored_duration
from ._control import TaskLaneState
from ._records import MAX_TASK_CLAIM_LIMIT
from .errors import TaskInvalidValueError

__all__ = [
    "TaskRateLimit",
    "check_claim_rate_limit",
    "check_rate_limit",
    "rate_remaining",
    "rate_window",
    "rate_window_end",
]

TaskRateLimit = tuple[int, timedelta]
"""``(count, period)``: at most ``count`` task starts per ``period``."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def check_rate_limit(what: str, value: object, *, error: type[Exception]) -> TaskRateLimit:
    """Refuse a rate limit that is not ``(count, period)``.

    ``count`` must be an int in ``1..MAX_TASK_CLAIM_LIMIT`` and ``period`` a positive
    ``timedelta``.

    Raises:
        Exception: ``error``, naming ``what`` and the expected form.
    """
    if not isinstance(value, tuple) or len(value) != 2:
        raise error(
            f"{what} must be a (count, period) tuple such as (10, timedelta(seconds=1)), "
            f"got {type(value).__name__}"
        )
    count, period = value
    check_int_setting(f"{what} count", count, minimum=1, error=error)
    if count > MAX_TASK_CLAIM_LIMIT:
        raise error(f"{what} count must be at most {MAX_TASK_CLAIM_LIMIT}, got {count}")
    check_stored_duration(f"{what} period", period, allow_zero=False, error=error)
    return count, period


def check_claim_rate_limit(value: object, what: str = "rate_limit") -> TaskRateLimit | None:
    """A claim's ``rate_limit`` (or ``partition_rate_limit``, named by ``what``)
    argument: ``None`` or a valid ``(count, period)``.

    Raises:
        TaskInvalidValueError: When it is neither, naming ``what``.
    """
    if value is None:
        return None
    return check_rate_limit(what, value, error=TaskInvalidValueError)


def rate_window(at: datetime, period: timedelta) -> datetime:
    """The start of the window of ``period`` that ``at`` (aware) falls in."""
    return _EPOCH + ((at - _EPOCH) // period) * period


def rate_window_end(at: datetime, period: timedelta) -> datetime:
    """When the window that ``at`` falls in ends: the next refill."""
    return rate_window(at, period) + period


def rate_remaining(rate: TaskRateLimit, state: TaskLaneState | None, now: datetime) -> int:
    """Starts left in the window ``now`` falls in, from the lane's stored state."""
    count, period = rate
    if state is None or state.rate_window_start != rate_window(now, period):
        return count
    return max(count - state.rate_started, 0)
