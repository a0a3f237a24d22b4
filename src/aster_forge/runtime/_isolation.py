"""Phase isolation shared by startup phases, shutdown phases and lifecycle hooks.

A phase is product code. Whatever it does (raise, hang past its deadline, swallow
the cancellation that enforces the deadline, raise while being cancelled) the
caller gets an :class:`IsolatedOutcome` back and carries on with the next phase.
``KeyboardInterrupt`` and ``SystemExit`` are captured too, so the caller can finish
its cleanup and re-raise them afterwards; they never become report lines.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Generic, TypeVar

from ._cancellation import CancellationToken
from ._clock import Clock, SystemClock
from ._race import RaceWinner, abandon_task, abandoned_tasks, race

__all__ = [
    "DEFAULT_ABANDON_GRACE",
    "IsolatedOutcome",
    "OutcomeKind",
    "abandoned_tasks",
    "run_isolated",
]

T = TypeVar("T")

logger = logging.getLogger("aster_forge.runtime")

#: How long a phase that ignored its cancellation gets before it is abandoned.
DEFAULT_ABANDON_GRACE = timedelta(seconds=1)


class OutcomeKind(enum.Enum):
    """How an isolated phase ended."""

    OK = "ok"
    RAISED = "raised"
    TIMED_OUT = "timed_out"
    RAISED_WHILE_CANCELLED = "raised_while_cancelled"
    CANCELLED = "cancelled"
    ESCAPED = "escaped"


@dataclass(frozen=True, slots=True)
class IsolatedOutcome(Generic[T]):
    """The result of :func:`run_isolated`.

    Attributes:
        kind: How the phase ended.
        value: The phase's return value when ``kind`` is ``OK``.
        error: The exception the phase raised (``RAISED``, ``RAISED_WHILE_CANCELLED``,
            or ``ESCAPED`` for ``KeyboardInterrupt``/``SystemExit``), else ``None``.
        abandoned: Whether the phase ignored cancellation and was left running.
    """

    kind: OutcomeKind
    value: T | None = None
    error: BaseException | None = None
    abandoned: bool = False


class _Escape(Exception):
    """Carries a KeyboardInterrupt/SystemExit out of the phase task without killing the loop."""

    def __init__(self, inner: BaseException) -> None:
        super().__init__("escaped")
        self.inner = inner


async def _guarded(factory: Callable[[], Awaitable[T]]) -> T:
    try:
        return await factory()
    except (KeyboardInterrupt, SystemExit) as exc:
        # A Task that raises these re-raises them into the event loop itself;
        # wrap them so the owner decides when to re-raise (after cleanup).
        raise _Escape(exc) from None


def _task_outcome(task: asyncio.Task[T], *, cancelled: bool) -> IsolatedOutcome[T]:
    if task.cancelled():
        return IsolatedOutcome(OutcomeKind.TIMED_OUT if cancelled else OutcomeKind.CANCELLED)
    error = task.exception()
    if error is None:
        if cancelled:
            # It swallowed the cancellation but finished within the grace period.
            return IsolatedOutcome(OutcomeKind.TIMED_OUT)
        return IsolatedOutcome(OutcomeKind.OK, value=task.result())
    if isinstance(error, _Escape):
        return IsolatedOutcome(OutcomeKind.ESCAPED, error=error.inner)
    if cancelled:
        return IsolatedOutcome(OutcomeKind.RAISED_WHILE_CANCELLED, error=error)
    return IsolatedOutcome(OutcomeKind.RAISED, error=error)


async def run_isolated(
    name: str,
    factory: Callable[[], Awaitable[T]],
    *,
    timeout: timedelta | None = None,  # noqa: ASYNC109 - a per-phase deadline, by design
    clock: Clock | None = None,
    token: CancellationToken | None = None,
    grace: timedelta = DEFAULT_ABANDON_GRACE,
) -> IsolatedOutcome[T]:
    """Run one phase in its own task and classify how it ended.

    Args:
        name: The phase name (used for the task name and logs).
        factory: Called once to create the phase's awaitable; an exception raised by the
            call itself counts as the phase raising.
        timeout: The phase deadline; ``None`` waits without limit.
        clock: The clock that measures ``timeout`` and ``grace`` (default: real time).
        token: When given, cancelling it cancels the phase (outcome ``CANCELLED``).
        grace: How long a cancelled phase may take to finish before it is abandoned.

    Returns:
        The outcome. The function itself only raises ``CancelledError`` when its caller
        is cancelled (the phase task is cancelled and joined, bounded by ``grace``).
    """
    clock = clock or SystemClock()
    task = asyncio.create_task(_guarded(factory), name=f"aster-forge:phase:{name}")
    seconds = None if timeout is None else max(timeout.total_seconds(), 0.0)
    try:
        reason = await race(
            task, seconds=seconds, clock=clock, token=token, name=f"aster-forge:phase:{name}"
        )
    except asyncio.CancelledError:
        task.cancel()
        await _join_cancelled(task, clock, grace)
        raise
    if reason is RaceWinner.DONE:
        return _task_outcome(task, cancelled=False)
    task.cancel()
    finished = await _join_cancelled(task, clock, grace)
    if not finished:
        logger.error(
            "runtime phase %s ignored cancellation; abandoned after its grace period",
            name,
            extra={"phase": name},
        )
        kind = OutcomeKind.TIMED_OUT if reason is RaceWinner.DEADLINE else OutcomeKind.CANCELLED
        return IsolatedOutcome(kind, abandoned=True)
    outcome = _task_outcome(task, cancelled=True)
    if reason is RaceWinner.TOKEN and outcome.kind is OutcomeKind.TIMED_OUT:
        return IsolatedOutcome(OutcomeKind.CANCELLED)
    return outcome


async def _join_cancelled(task: asyncio.Task[Any], clock: Clock, grace: timedelta) -> bool:
    """Wait up to ``grace`` for a cancelled task; abandon it (kept referenced) if it hangs."""
    try:
        reason = await race(
            task, seconds=max(grace.total_seconds(), 0.0), clock=clock, name="aster-forge:phase"
        )
    except asyncio.CancelledError:
        if not task.done():
            abandon_task(task)
        raise
    if reason is RaceWinner.DONE:
        return True
    abandon_task(task)
    return False
