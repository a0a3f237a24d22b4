"""Running startup and shutdown phases in order, each isolated, for the component registry."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Generic, Literal, TypeVar, overload

from ._cancellation import CancellationToken
from ._clock import Clock, SystemClock
from ._isolation import OutcomeKind, run_isolated
from ._reports import (
    SHUTDOWN_PHASE_PANICKED,
    SHUTDOWN_RESOURCE_CONSUMED,
    STARTUP_PHASE_FAILED,
    ShutdownPhaseReport,
    ShutdownPhaseStatus,
    ShutdownReport,
    StartupPhaseFailurePolicy,
    StartupPhaseReport,
    StartupPhaseStatus,
    StartupReport,
    log_startup_phase,
)
from .errors import RuntimeComponentRegistrationError, ShutdownPhaseFailure

__all__ = [
    "ShutdownPhase",
    "ShutdownRun",
    "StartupPhase",
    "StartupPhaseOutcome",
    "StartupRun",
    "check_name",
    "check_shutdown_phase",
    "once_phase",
    "run_shutdown_phases",
    "run_startup_phase",
    "run_startup_phases",
]

T = TypeVar("T")
R = TypeVar("R")
logger = logging.getLogger("aster_forge.runtime")


@dataclass(frozen=True, slots=True)
class StartupPhaseOutcome(Generic[T]):
    """What a single-phase helper returns: the product's value and the phase report.

    Attributes:
        value: The phase's return value (``None`` after an optional phase failed).
        report: The phase report.
    """

    value: T
    report: StartupPhaseReport


def _elapsed(clock: Clock, begin: float) -> timedelta:
    return timedelta(seconds=max(clock.monotonic() - begin, 0.0))


@overload
async def run_startup_phase(
    name: str,
    fn: Callable[[], Awaitable[T]],
    *,
    optional: Literal[False] = False,
    clock: Clock | None = None,
) -> StartupPhaseOutcome[T]: ...


@overload
async def run_startup_phase(
    name: str,
    fn: Callable[[], Awaitable[T]],
    *,
    optional: bool,
    clock: Clock | None = None,
) -> StartupPhaseOutcome[T | None]: ...


async def run_startup_phase(
    name: str,
    fn: Callable[[], Awaitable[T]],
    *,
    optional: bool = False,
    clock: Clock | None = None,
) -> StartupPhaseOutcome[T] | StartupPhaseOutcome[T | None]:
    """Run one startup step that produces a resource, logging its name, duration and status.

    The registry's phases are side-effect only; a step whose value the product keeps (a
    connection pool, a config snapshot) runs here instead, in the entrypoint::

        pool = (await run_startup_phase("db_pool", create_pool)).value

    A step's exception is re-raised unchanged (the same object: the product's own error
    type); an ``optional`` step's failure is logged and recorded as
    ``skipped_after_failure`` with a fixed text, and the value is ``None``. Cancellation,
    ``KeyboardInterrupt`` and ``SystemExit`` always propagate.
    """
    policy = StartupPhaseFailurePolicy.OPTIONAL if optional else StartupPhaseFailurePolicy.REQUIRED
    clock = clock or SystemClock()
    begin = clock.monotonic()
    try:
        value: T | None = await fn()
        status, error = StartupPhaseStatus.SUCCEEDED, None
    except Exception as exc:
        if policy is StartupPhaseFailurePolicy.REQUIRED:
            logger.error(
                "required startup phase %s failed after %.3fs (%s)",
                name,
                _elapsed(clock, begin).total_seconds(),
                type(exc).__name__,
                extra={"startup_phase": name, "startup_status": StartupPhaseStatus.FAILED.value},
            )
            raise
        value, status, error = None, StartupPhaseStatus.SKIPPED_AFTER_FAILURE, STARTUP_PHASE_FAILED
    report = StartupPhaseReport(name, policy, status, _elapsed(clock, begin), error)
    log_startup_phase(report)
    return StartupPhaseOutcome(value, report)


@dataclass(frozen=True, slots=True)
class StartupPhase:
    """A registered startup phase: what :func:`run_startup_phases` runs."""

    name: str
    policy: StartupPhaseFailurePolicy
    fn: Callable[[], Awaitable[Any]]
    component: str | None = None


async def run_startup_phases(
    phases: list[StartupPhase],
    *,
    token: CancellationToken | None,
    clock: Clock,
    grace: timedelta,
) -> StartupRun:
    """Run phases in order; return the report, any KeyboardInterrupt/SystemExit, first error."""
    reports: list[StartupPhaseReport] = []
    begin = clock.monotonic()
    aborted = cancelled = False
    escaped: BaseException | None = None
    first_error: BaseException | None = None
    for phase in phases:
        if token is not None and token.cancelled:
            cancelled = True
            break
        phase_begin = clock.monotonic()
        outcome = await run_isolated(phase.name, phase.fn, clock=clock, token=token, grace=grace)
        duration = _elapsed(clock, phase_begin)
        if outcome.kind is OutcomeKind.ESCAPED:
            escaped, aborted = outcome.error, True
            break
        if outcome.kind is OutcomeKind.OK:
            status, error = StartupPhaseStatus.SUCCEEDED, None
        elif outcome.kind is OutcomeKind.CANCELLED:
            status, error, cancelled = StartupPhaseStatus.CANCELLED, None, True
        elif phase.policy is StartupPhaseFailurePolicy.REQUIRED:
            status, error, aborted = StartupPhaseStatus.FAILED, STARTUP_PHASE_FAILED, True
        else:
            status, error = StartupPhaseStatus.SKIPPED_AFTER_FAILURE, STARTUP_PHASE_FAILED
        if outcome.error is not None and status is StartupPhaseStatus.FAILED:
            first_error = first_error or outcome.error
        phase_report = StartupPhaseReport(
            phase.name, phase.policy, status, duration, error, phase.component
        )
        log_startup_phase(phase_report)
        reports.append(phase_report)
        if aborted or cancelled:
            break
    report = StartupReport(tuple(reports), _elapsed(clock, begin), aborted, cancelled)
    return StartupRun(report, escaped, first_error)


@dataclass(frozen=True, slots=True)
class StartupRun:
    """What :func:`run_startup_phases` produced (internal to the runtime package)."""

    report: StartupReport
    escaped: BaseException | None = None
    first_error: BaseException | None = None


@dataclass(frozen=True, slots=True)
class ShutdownPhase:
    """A registered shutdown phase: what :func:`run_shutdown_phases` runs."""

    name: str
    timeout: timedelta | None
    fn: Callable[[], Awaitable[Any]]
    component: str | None = None


@dataclass(frozen=True, slots=True)
class ShutdownRun:
    """What :func:`run_shutdown_phases` produced (internal to the runtime package)."""

    report: ShutdownReport
    escaped: BaseException | None = None
    first_error: BaseException | None = None


def once_phase(resource: R, fn: Callable[[R], Awaitable[None]]) -> Callable[[], Awaitable[None]]:
    """Wrap ``fn(resource)`` so that only the first call receives the resource.

    Later calls fail with ``SHUTDOWN_RESOURCE_CONSUMED`` (a bundle registered twice).
    """
    held: list[R] = [resource]

    def call() -> Awaitable[None]:
        if not held:
            raise ShutdownPhaseFailure(SHUTDOWN_RESOURCE_CONSUMED)
        return fn(held.pop())

    return call


def _status_for(kind: OutcomeKind, error: BaseException | None) -> ShutdownPhaseStatus:
    if kind is OutcomeKind.OK:
        return ShutdownPhaseStatus.SUCCEEDED
    if kind in (OutcomeKind.TIMED_OUT, OutcomeKind.CANCELLED):
        return ShutdownPhaseStatus.TIMED_OUT
    if kind is OutcomeKind.RAISED and isinstance(error, ShutdownPhaseFailure):
        return ShutdownPhaseStatus.FAILED(error.message)
    return ShutdownPhaseStatus.FAILED(SHUTDOWN_PHASE_PANICKED)


async def run_shutdown_phases(
    phases: Sequence[ShutdownPhase],
    *,
    clock: Clock,
    grace: timedelta,
    started: Callable[[str | None], bool | None] = lambda _component: None,
) -> ShutdownRun:
    """Run phases in order, isolated.

    Returns:
        The report, the first ``KeyboardInterrupt``/``SystemExit`` a phase raised (the
        caller re-raises it; raising it inside a task would stop the event loop) and the
        first exception a failed phase raised (kept as the root cause, never reported).
    """
    reports: list[ShutdownPhaseReport] = []
    escaped: BaseException | None = None
    first_error: BaseException | None = None
    begin = clock.monotonic()
    for phase in phases:
        phase_begin = clock.monotonic()
        outcome = await run_isolated(
            phase.name, phase.fn, timeout=phase.timeout, clock=clock, grace=grace
        )
        elapsed = _elapsed(clock, phase_begin)
        if outcome.kind is OutcomeKind.ESCAPED:
            # Never a report line: remember it, finish cleanup, then re-raise.
            escaped = escaped or outcome.error
            continue
        if outcome.kind in (OutcomeKind.RAISED, OutcomeKind.RAISED_WHILE_CANCELLED) and not (
            isinstance(outcome.error, ShutdownPhaseFailure)
        ):
            first_error = first_error or outcome.error
            logger.error(
                "shutdown phase %s raised %s",
                phase.name,
                type(outcome.error).__name__,
                extra={"shutdown_phase": phase.name, "shutdown_component": phase.component},
            )
        reports.append(
            ShutdownPhaseReport(
                name=phase.name,
                status=_status_for(outcome.kind, outcome.error),
                duration=elapsed,
                component=phase.component,
                component_started=started(phase.component),
            )
        )
    report = ShutdownReport(tuple(reports), _elapsed(clock, begin))
    return ShutdownRun(report, escaped, first_error)


def check_name(name: object, what: str) -> None:
    """Refuse a name that is not a non-empty string (``what`` names it in the error)."""
    if not isinstance(name, str) or not name:
        raise RuntimeComponentRegistrationError(f"{what} must be a non-empty string, got {name!r}")


def check_shutdown_phase(name: str, timeout: timedelta | None) -> None:
    """Refuse an empty phase name or a timeout that is not a positive ``timedelta``."""
    check_name(name, "shutdown phase name")
    if timeout is not None and (not isinstance(timeout, timedelta) or timeout <= timedelta(0)):
        raise RuntimeComponentRegistrationError(
            f"shutdown phase {name!r}: timeout must be a positive timedelta or None"
        )
