"""Startup phases: single-phase helpers, the coordinator and their reports."""

from __future__ import annotations

import enum
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Generic, TypeVar

from ._cancellation import CancellationToken
from ._clock import Clock, SystemClock
from ._isolation import DEFAULT_ABANDON_GRACE, OutcomeKind, run_isolated
from .errors import RuntimeComponentRegistrationError

__all__ = [
    "STARTUP_PHASE_FAILED",
    "StartupCoordinator",
    "StartupPhaseFailurePolicy",
    "StartupPhaseOutcome",
    "StartupPhaseReport",
    "StartupPhaseStatus",
    "StartupReport",
    "run_optional_startup_phase",
    "run_required_startup_phase",
]

T = TypeVar("T")

logger = logging.getLogger("aster_forge.runtime")

#: The fixed text recorded for a phase that raised (its message is never copied).
STARTUP_PHASE_FAILED = "startup phase failed"


class StartupPhaseStatus(enum.StrEnum):
    """How one startup phase ended."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SKIPPED_AFTER_FAILURE = "skipped_after_failure"
    CANCELLED = "cancelled"


class StartupPhaseFailurePolicy(enum.StrEnum):
    """What a failure of the phase means for the rest of startup."""

    REQUIRED = "required"
    OPTIONAL = "optional"


@dataclass(frozen=True, slots=True)
class StartupPhaseReport:
    """The result of one startup phase.

    Attributes:
        name: The phase name.
        policy: Whether the phase was required or optional.
        status: How it ended.
        duration: How long it ran.
        error: A fixed failure text (never the exception's message), or ``None``.
        component: The owning component, when run by a component registry.
    """

    name: str
    policy: StartupPhaseFailurePolicy
    status: StartupPhaseStatus
    duration: timedelta
    error: str | None = None
    component: str | None = None

    @property
    def duration_seconds(self) -> float:
        """The duration in seconds, for metrics."""
        return self.duration.total_seconds()


@dataclass(frozen=True, slots=True)
class StartupPhaseOutcome(Generic[T]):
    """What a single-phase helper returns: the product's value and the phase report.

    Attributes:
        value: The phase's return value (``None`` after an optional phase failed).
        report: The phase report.
    """

    value: T | None
    report: StartupPhaseReport


@dataclass(frozen=True, slots=True)
class StartupReport:
    """Every startup phase that ran, in order.

    Attributes:
        phases: The phase reports, in execution order. Phases after an abort are absent.
        duration: The total duration.
        aborted: Whether a required phase failed (later phases did not run).
        cancelled: Whether a stop request interrupted startup.
    """

    phases: tuple[StartupPhaseReport, ...] = ()
    duration: timedelta = field(default_factory=timedelta)
    aborted: bool = False
    cancelled: bool = False

    @property
    def duration_seconds(self) -> float:
        """The total duration in seconds, for metrics."""
        return self.duration.total_seconds()

    def succeeded(self) -> bool:
        """Return whether startup completed (no required failure, no stop request)."""
        return not self.aborted and not self.cancelled

    def has_failures(self) -> bool:
        """Return whether any phase failed, optional ones included."""
        return any(p.status is not StartupPhaseStatus.SUCCEEDED for p in self.phases)

    def failed_phase(self) -> StartupPhaseReport | None:
        """Return the required phase that aborted startup, if any."""
        for phase in self.phases:
            if phase.status is StartupPhaseStatus.FAILED:
                return phase
        return None

    def phase_names(self) -> tuple[str, ...]:
        """Return the phase names in execution order."""
        return tuple(phase.name for phase in self.phases)

    def to_json_dict(self) -> dict[str, Any]:
        """Return the report as JSON-ready data (the admin API and ``--report-json``)."""
        return {
            "succeeded": self.succeeded(),
            "aborted": self.aborted,
            "cancelled": self.cancelled,
            "duration_seconds": self.duration_seconds,
            "phases": [
                {
                    "name": p.name,
                    "component": p.component,
                    "policy": p.policy.value,
                    "status": p.status.value,
                    "duration_seconds": p.duration_seconds,
                    "error": p.error,
                }
                for p in self.phases
            ],
        }


def _elapsed(clock: Clock, begin: float) -> timedelta:
    return timedelta(seconds=max(clock.monotonic() - begin, 0.0))


async def run_required_startup_phase(
    name: str, fn: Callable[[], Awaitable[T]], *, clock: Clock | None = None
) -> StartupPhaseOutcome[T]:
    """Run a startup step that must succeed and usually produces a resource.

    The phase name, duration and result are logged. The product's exception is
    re-raised unchanged (same type, same object), never wrapped.

    Args:
        name: The phase name.
        fn: Creates the step's awaitable.
        clock: The clock used to measure the duration.

    Returns:
        The product's value with the phase report.

    Example:
        >>> async def prepare_state() -> dict[str, int]:
        ...     return {"ready": 1}
        >>> # outcome = await run_required_startup_phase("prepare_state", prepare_state)
        >>> # state = outcome.value
    """
    clock = clock or SystemClock()
    begin = clock.monotonic()
    try:
        value = await fn()
    except Exception as exc:
        logger.error(
            "required startup phase %s failed after %.3fs (%s)",
            name,
            _elapsed(clock, begin).total_seconds(),
            type(exc).__name__,
            extra={"startup_phase": name, "startup_status": StartupPhaseStatus.FAILED.value},
        )
        raise
    report = StartupPhaseReport(
        name,
        StartupPhaseFailurePolicy.REQUIRED,
        StartupPhaseStatus.SUCCEEDED,
        _elapsed(clock, begin),
    )
    _log_phase(report)
    return StartupPhaseOutcome(value, report)


async def run_optional_startup_phase(
    name: str, fn: Callable[[], Awaitable[T]], *, clock: Clock | None = None
) -> StartupPhaseOutcome[T]:
    """Run a startup step whose failure does not block startup.

    A failure is logged and recorded as ``SKIPPED_AFTER_FAILURE`` with a fixed text;
    the value is then ``None``. Cancellation, ``KeyboardInterrupt`` and ``SystemExit``
    propagate.

    Args:
        name: The phase name.
        fn: Creates the step's awaitable.
        clock: The clock used to measure the duration.

    Returns:
        The value (or ``None``) with the phase report.
    """
    clock = clock or SystemClock()
    begin = clock.monotonic()
    try:
        value = await fn()
    except Exception as exc:
        report = StartupPhaseReport(
            name,
            StartupPhaseFailurePolicy.OPTIONAL,
            StartupPhaseStatus.SKIPPED_AFTER_FAILURE,
            _elapsed(clock, begin),
            STARTUP_PHASE_FAILED,
        )
        logger.warning(
            "optional startup phase %s failed (%s); continuing",
            name,
            type(exc).__name__,
            extra={"startup_phase": name, "startup_status": report.status.value},
        )
        return StartupPhaseOutcome(None, report)
    report = StartupPhaseReport(
        name,
        StartupPhaseFailurePolicy.OPTIONAL,
        StartupPhaseStatus.SUCCEEDED,
        _elapsed(clock, begin),
    )
    _log_phase(report)
    return StartupPhaseOutcome(value, report)


def _log_phase(report: StartupPhaseReport) -> None:
    level = logging.INFO if report.status is StartupPhaseStatus.SUCCEEDED else logging.WARNING
    logger.log(
        level,
        "startup phase %s %s in %.3fs",
        report.name,
        report.status.value,
        report.duration_seconds,
        extra={
            "startup_phase": report.name,
            "startup_component": report.component,
            "startup_status": report.status.value,
            "duration_seconds": report.duration_seconds,
        },
    )


@dataclass(frozen=True, slots=True)
class StartupPhase:
    """A registered startup phase (what :class:`StartupCoordinator` runs)."""

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
        _log_phase(phase_report)
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


class StartupCoordinator:
    """Runs a list of side-effect-only startup phases in order.

    Required phases stop startup when they fail; optional ones are recorded as
    ``SKIPPED_AFTER_FAILURE`` and startup continues. A cancelled token (a stop request)
    cancels the running phase and skips the rest. For steps that produce resources use
    :func:`run_required_startup_phase` instead.

    Example:
        >>> async def migrate() -> None: ...
        >>> async def warm_cache() -> None: ...
        >>> coordinator = StartupCoordinator().required("migrate", migrate)
        >>> coordinator = coordinator.optional("warm_cache", warm_cache)
    """

    def __init__(
        self, *, clock: Clock | None = None, grace: timedelta = DEFAULT_ABANDON_GRACE
    ) -> None:
        self._phases: list[StartupPhase] = []
        self._clock: Clock = clock or SystemClock()
        self._grace = grace

    def required(self, name: str, fn: Callable[[], Awaitable[Any]]) -> StartupCoordinator:
        """Register a phase whose failure aborts startup. Returns this coordinator."""
        return self._add(StartupPhase(name, StartupPhaseFailurePolicy.REQUIRED, fn))

    def optional(self, name: str, fn: Callable[[], Awaitable[Any]]) -> StartupCoordinator:
        """Register a phase whose failure is recorded and skipped. Returns this coordinator."""
        return self._add(StartupPhase(name, StartupPhaseFailurePolicy.OPTIONAL, fn))

    def _add(self, phase: StartupPhase) -> StartupCoordinator:
        if not isinstance(phase.name, str) or not phase.name:
            raise RuntimeComponentRegistrationError("startup phase name must be a non-empty string")
        if not callable(phase.fn):
            raise RuntimeComponentRegistrationError(
                f"startup phase {phase.name!r}: fn must be callable"
            )
        self._phases.append(phase)
        return self

    @property
    def phase_names(self) -> tuple[str, ...]:
        """The registered phase names, in order."""
        return tuple(phase.name for phase in self._phases)

    async def run(self, token: CancellationToken | None = None) -> StartupReport:
        """Run the phases and return the report.

        Args:
            token: A stop request; when cancelled, the running phase is cancelled and the
                remaining phases are skipped (``report.cancelled``).

        Returns:
            The startup report; check :meth:`StartupReport.succeeded`.
        """
        result = await run_startup_phases(
            list(self._phases), token=token, clock=self._clock, grace=self._grace
        )
        if result.escaped is not None:
            raise result.escaped
        return result.report
