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

# Phases that ignored cancellation past the grace period. They are kept referenced
# here (never garbage collected mid-flight) and their outcome is retrieved when
# they eventually end, so nothing is silently dropped.
_ABANDONED: set[asyncio.Task[Any]] = set()


def abandoned_tasks() -> frozenset[asyncio.Task[Any]]:
    """Return the phase tasks that were abandoned after ignoring cancellation.

    Returns:
        The still-running abandoned tasks (for diagnostics and tests).
    """
    return frozenset(task for task in _ABANDONED if not task.done())


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


def _forget_abandoned(task: asyncio.Task[Any]) -> None:
    _ABANDONED.discard(task)
    if task.cancelled():
        return
    error = task.exception()
    if error is not None:
        logger.warning(
            "abandoned runtime phase %s ended with an error",
            task.get_name(),
            extra={"phase_task": task.get_name()},
        )


async def _wait_first(
    task: asyncio.Task[Any],
    seconds: float | None,
    clock: Clock,
    token: CancellationToken | None,
) -> str:
    """Wait for ``task``; return "done", "timeout" or "token"."""
    helpers: dict[asyncio.Task[Any], str] = {}
    if seconds is not None:
        helpers[asyncio.create_task(clock.sleep(seconds), name="aster-forge:phase-deadline")] = (
            "timeout"
        )
    if token is not None:
        helpers[asyncio.create_task(token.wait(), name="aster-forge:phase-stop")] = "token"
    try:
        if not helpers:
            await asyncio.wait({task})
            return "done"
        done, _ = await asyncio.wait({task, *helpers}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for helper in helpers:
            helper.cancel()
        await asyncio.gather(*helpers, return_exceptions=True)
    if task in done:
        return "done"
    for helper, label in helpers.items():
        if helper in done:
            return label
    return "done"  # pragma: no cover - asyncio.wait returned with nothing done


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
        reason = await _wait_first(task, seconds, clock, token)
    except asyncio.CancelledError:
        task.cancel()
        await _join_cancelled(task, clock, grace)
        raise
    if reason == "done":
        return _task_outcome(task, cancelled=False)
    task.cancel()
    finished = await _join_cancelled(task, clock, grace)
    if not finished:
        logger.error(
            "runtime phase %s ignored cancellation; abandoned after its grace period",
            name,
            extra={"phase": name},
        )
        kind = OutcomeKind.TIMED_OUT if reason == "timeout" else OutcomeKind.CANCELLED
        return IsolatedOutcome(kind, abandoned=True)
    outcome = _task_outcome(task, cancelled=True)
    if reason == "token" and outcome.kind is OutcomeKind.TIMED_OUT:
        return IsolatedOutcome(OutcomeKind.CANCELLED)
    return outcome


async def _join_cancelled(task: asyncio.Task[Any], clock: Clock, grace: timedelta) -> bool:
    """Wait up to ``grace`` for a cancelled task; abandon it (kept referenced) if it hangs."""
    grace_seconds = max(grace.total_seconds(), 0.0)
    try:
        reason = await _wait_first(task, grace_seconds, clock, None)
    except asyncio.CancelledError:
        if not task.done():
            _abandon(task)
        raise
    if reason == "done":
        return True
    _abandon(task)
    return False


def _abandon(task: asyncio.Task[Any]) -> None:
    _ABANDONED.add(task)
    task.add_done_callback(_forget_abandoned)
