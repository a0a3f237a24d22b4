"""run_periodic_task: a fixed-delay loop whose outcomes the product records through a hook."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TypeVar

from ..runtime import CancellationToken
from ..runtime._internal import Clock, SystemClock, sleep_or_cancelled
from .errors import PeriodicTaskConfigError

__all__ = ["MIN_ZERO_INTERVAL_SLEEP", "periodic_sleep_duration", "run_periodic_task"]

logger = logging.getLogger("aster_forge.tasks.runtime")

OutcomeT = TypeVar("OutcomeT")

MIN_ZERO_INTERVAL_SLEEP = timedelta(seconds=1)
"""What a zero interval is clamped to, so a configuration slip cannot hot-spin a loop."""

_SYSTEM_CLOCK = SystemClock()


def periodic_sleep_duration(interval: timedelta) -> timedelta:
    """Return how long a periodic loop sleeps between runs for a configured ``interval``.

    A zero interval is clamped to :data:`MIN_ZERO_INTERVAL_SLEEP` (one second, like the
    dispatch worker's base interval) so a configuration accident cannot make the loop
    spin hot or, for the scheduled variant, hammer the database. A non-zero interval is
    returned unchanged, even below one second (fast tests and in-memory polling are
    legitimate).

    Args:
        interval: The configured interval (zero or positive).

    Returns:
        The sleep duration.

    Raises:
        PeriodicTaskConfigError: When ``interval`` is negative or not a ``timedelta``.

    Example:
        >>> periodic_sleep_duration(timedelta(0))
        datetime.timedelta(seconds=1)
        >>> periodic_sleep_duration(timedelta(milliseconds=200))
        datetime.timedelta(microseconds=200000)
    """
    if not isinstance(interval, timedelta):
        raise PeriodicTaskConfigError(
            f"interval must be a timedelta, got {type(interval).__name__}"
        )
    if interval < timedelta(0):
        raise PeriodicTaskConfigError(f"interval must not be negative, got {interval}")
    if interval == timedelta(0):
        return MIN_ZERO_INTERVAL_SLEEP
    return interval


async def run_periodic_task(
    name: str,
    interval: timedelta,
    fn: Callable[[], Awaitable[OutcomeT]],
    record_outcome: Callable[[str, OutcomeT, timedelta], Awaitable[None]],
    on_exception: Callable[[Exception], OutcomeT],
    *,
    shutdown_token: CancellationToken,
    clock: Clock = _SYSTEM_CLOCK,
    initial_delay: timedelta | None = None,
) -> None:
    """Run ``fn`` every ``interval`` (fixed delay between runs) until ``shutdown_token``.

    Each run's outcome goes to ``record_outcome(name, outcome, duration)``. When ``fn``
    raises an ``Exception``, ``on_exception(exc)`` turns it into the product's outcome
    (which is recorded like any other) and the loop continues; the exception is also
    logged at ERROR. A failing ``record_outcome`` is logged and the loop continues.
    A run in progress when the token is cancelled is not interrupted: the loop ends
    after it (the task group cancels it if it overruns the shutdown grace).

    Args:
        name: The task name passed to the hook and used in logs.
        interval: The delay between the end of one run and the start of the next,
            see :func:`periodic_sleep_duration`.
        fn: The product's body.
        record_outcome: Persists or exports one outcome (with the run's duration).
        on_exception: Maps an exception escaping ``fn`` to the outcome to record.
        shutdown_token: Ends the loop (typically a :class:`BackgroundTasks` token).
        clock: Time source (``ManualClock`` in tests).
        initial_delay: Sleep before the first run (default: run at once).

    Raises:
        PeriodicTaskConfigError: On a blank name, a bad interval or delay, or a hook
            that is not callable (before anything runs).
    """
    if not isinstance(name, str) or not name.strip():
        raise PeriodicTaskConfigError(f"periodic task name must be a non-empty str, got {name!r}")
    sleep_for = periodic_sleep_duration(interval).total_seconds()
    if initial_delay is not None and (
        not isinstance(initial_delay, timedelta) or initial_delay < timedelta(0)
    ):
        raise PeriodicTaskConfigError(
            f"initial_delay must be a non-negative timedelta or None, got {initial_delay!r}"
        )
    for what, hook in (
        ("fn", fn),
        ("record_outcome", record_outcome),
        ("on_exception", on_exception),
    ):
        if not callable(hook):
            raise PeriodicTaskConfigError(f"periodic task {name!r}: {what} is not callable")
    extra = {"periodic_task": name}
    if initial_delay and await sleep_or_cancelled(
        clock, shutdown_token, initial_delay.total_seconds()
    ):
        return
    while not shutdown_token.cancelled:
        started = clock.monotonic()
        outcome = await _run_once(name, fn, on_exception, extra)
        duration = timedelta(seconds=max(clock.monotonic() - started, 0.0))
        if not isinstance(outcome, _NoOutcome):
            try:
                await record_outcome(name, outcome, duration)
            except Exception:
                logger.exception(
                    "periodic task %s: recording the outcome failed", name, extra=extra
                )
        if await sleep_or_cancelled(clock, shutdown_token, sleep_for):
            return


class _NoOutcome:
    """Sentinel: the exception hook itself failed, so there is nothing to record."""


_NO_OUTCOME = _NoOutcome()


async def _run_once(
    name: str,
    fn: Callable[[], Awaitable[OutcomeT]],
    on_exception: Callable[[Exception], OutcomeT],
    extra: dict[str, str],
) -> OutcomeT | _NoOutcome:
    try:
        return await fn()
    except Exception as exc:
        logger.error(
            "periodic task %s raised %s", name, type(exc).__name__, exc_info=exc, extra=extra
        )
        try:
            return on_exception(exc)
        except Exception:
            logger.exception("periodic task %s: on_exception hook raised", name, extra=extra)
            return _NO_OUTCOME
