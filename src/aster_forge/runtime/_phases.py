"""Startup and shutdown phases: isolated runs, their coordinators and their reports."""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, ClassVar, Generic, TypeVar

from ._cancellation import CancellationToken
from ._clock import Clock, SystemClock
from ._isolation import DEFAULT_ABANDON_GRACE, OutcomeKind, run_isolated
from .errors import RuntimeComponentRegistrationError, ShutdownPhaseFailure

__all__ = [
    "SHUTDOWN_PHASE_PANICKED",
    "SHUTDOWN_RESOURCE_CONSUMED",
    "STARTUP_PHASE_FAILED",
    "ShutdownCoordinator",
    "ShutdownPhaseReport",
    "ShutdownPhaseStatus",
    "ShutdownPhaseStatusKind",
    "ShutdownReport",
    "StartupCoordinator",
    "StartupPhaseFailurePolicy",
    "StartupPhaseOutcome",
    "StartupPhaseReport",
    "StartupPhaseStatus",
    "StartupReport",
    "log_shutdown_report",
    "run_optional_startup_phase",
    "run_required_startup_phase",
]

T = TypeVar("T")
logger = logging.getLogger("aster_forge.runtime")
R = TypeVar("R")


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
        >>> coordinator = StartupCoordinator()
        >>> coordinator.required("migrate", migrate)
        >>> coordinator.optional("warm_cache", warm_cache)
    """

    def __init__(
        self, *, clock: Clock | None = None, grace: timedelta = DEFAULT_ABANDON_GRACE
    ) -> None:
        self._phases: list[StartupPhase] = []
        self._clock: Clock = clock or SystemClock()
        self._grace = grace

    def required(self, name: str, fn: Callable[[], Awaitable[Any]]) -> None:
        """Register a phase whose failure aborts startup."""
        self._add(StartupPhase(name, StartupPhaseFailurePolicy.REQUIRED, fn))

    def optional(self, name: str, fn: Callable[[], Awaitable[Any]]) -> None:
        """Register a phase whose failure is recorded and skipped."""
        self._add(StartupPhase(name, StartupPhaseFailurePolicy.OPTIONAL, fn))

    def _add(self, phase: StartupPhase) -> None:
        if not isinstance(phase.name, str) or not phase.name:
            raise RuntimeComponentRegistrationError("startup phase name must be a non-empty string")
        if not callable(phase.fn):
            raise RuntimeComponentRegistrationError(
                f"startup phase {phase.name!r}: fn must be callable"
            )
        self._phases.append(phase)

    @property
    def phase_names(self) -> tuple[str, ...]:
        """The registered phase names, in order."""
        return tuple(phase.name for phase in self._phases)

    async def run(self, token: CancellationToken | None = None) -> StartupReport:
        """Run the phases and return the report; cancelling ``token`` cancels the
        running phase and skips the rest (``report.cancelled``)."""
        result = await run_startup_phases(
            list(self._phases), token=token, clock=self._clock, grace=self._grace
        )
        if result.escaped is not None:
            raise result.escaped
        return result.report


#: The fixed text of a phase that raised (its message is never copied).
SHUTDOWN_PHASE_PANICKED = "shutdown phase panicked"


#: The fixed text of a once-only phase whose resource was already taken.
SHUTDOWN_RESOURCE_CONSUMED = "shutdown resource already consumed"


class ShutdownPhaseStatusKind(enum.StrEnum):
    """The three shapes of :class:`ShutdownPhaseStatus`."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"


@dataclass(frozen=True, slots=True)
class ShutdownPhaseStatus:
    """How one shutdown phase ended: ``SUCCEEDED``, ``FAILED(text)`` or ``TIMED_OUT``.

    Example:
        >>> ShutdownPhaseStatus.FAILED("disk full").message
        'disk full'
        >>> ShutdownPhaseStatus.SUCCEEDED.is_failure()
        False
    """

    kind: ShutdownPhaseStatusKind
    message: str | None = None

    SUCCEEDED: ClassVar[ShutdownPhaseStatus]
    TIMED_OUT: ClassVar[ShutdownPhaseStatus]

    @classmethod
    def FAILED(cls, message: str) -> ShutdownPhaseStatus:
        """Return a failed status carrying ``message`` (a text the phase chose)."""
        return cls(ShutdownPhaseStatusKind.FAILED, message)

    def is_failure(self) -> bool:
        """Return whether the phase failed or timed out."""
        return self.kind is not ShutdownPhaseStatusKind.SUCCEEDED

    def __str__(self) -> str:
        if self.kind is ShutdownPhaseStatusKind.FAILED:
            return f"failed: {self.message}"
        return self.kind.value


ShutdownPhaseStatus.SUCCEEDED = ShutdownPhaseStatus(ShutdownPhaseStatusKind.SUCCEEDED)

ShutdownPhaseStatus.TIMED_OUT = ShutdownPhaseStatus(ShutdownPhaseStatusKind.TIMED_OUT)


@dataclass(frozen=True, slots=True)
class ShutdownPhaseReport:
    """The result of one shutdown phase.

    Attributes:
        name: The phase name.
        status: How it ended.
        duration: How long it ran.
        component: The owning component, when run by a component registry.
        component_started: Whether the component's startup phases all ran and succeeded;
            ``None`` when the component has no startup phases (or none is known).
    """

    name: str
    status: ShutdownPhaseStatus
    duration: timedelta
    component: str | None = None
    component_started: bool | None = None

    @property
    def duration_seconds(self) -> float:
        """The duration in seconds, for metrics."""
        return self.duration.total_seconds()


@dataclass(frozen=True, slots=True)
class ShutdownReport:
    """Every shutdown phase in execution order, with the total duration."""

    phases: tuple[ShutdownPhaseReport, ...] = ()
    duration: timedelta = field(default_factory=timedelta)

    @property
    def duration_seconds(self) -> float:
        """The total duration in seconds, for metrics."""
        return self.duration.total_seconds()

    def has_failures(self) -> bool:
        """Return whether any phase failed or timed out."""
        return any(phase.status.is_failure() for phase in self.phases)

    def failures(self) -> tuple[ShutdownPhaseReport, ...]:
        """Return the failed or timed-out phases, in execution order."""
        return tuple(phase for phase in self.phases if phase.status.is_failure())

    def phase_names(self) -> tuple[str, ...]:
        """Return the phase names in execution order."""
        return tuple(phase.name for phase in self.phases)

    def summary(self) -> str:
        """Return a one-line summary such as ``3 phases, 1 failed (database: timed_out)``."""
        failed = self.failures()
        text = f"{len(self.phases)} phases, {len(failed)} failed"
        if failed:
            text += " (" + ", ".join(f"{p.name}: {p.status}" for p in failed) + ")"
        return text

    def to_json_dict(self) -> dict[str, Any]:
        """Return the report as JSON-ready data (the admin API and ``--report-json``)."""
        return {
            "has_failures": self.has_failures(),
            "summary": self.summary(),
            "duration_seconds": self.duration_seconds,
            "phases": [
                {
                    "name": p.name,
                    "component": p.component,
                    "status": p.status.kind.value,
                    "message": p.status.message,
                    "duration_seconds": p.duration_seconds,
                    "component_started": p.component_started,
                }
                for p in self.phases
            ],
        }


def log_shutdown_report(report: ShutdownReport, log: logging.Logger | None = None) -> None:
    """Log a shutdown report: INFO per phase and overall, WARNING for failed phases."""
    log = log or logger
    for phase in report.phases:
        level = logging.WARNING if phase.status.is_failure() else logging.INFO
        log.log(
            level,
            "shutdown phase %s %s in %.3fs",
            phase.name,
            phase.status,
            phase.duration_seconds,
            extra={
                "shutdown_phase": phase.name,
                "shutdown_component": phase.component,
                "shutdown_status": phase.status.kind.value,
                "component_started": phase.component_started,
                "duration_seconds": phase.duration_seconds,
            },
        )
    level = logging.WARNING if report.has_failures() else logging.INFO
    log.log(
        level,
        "shutdown report: %s in %.3fs",
        report.summary(),
        report.duration_seconds,
        extra={"shutdown_failures": len(report.failures())},
    )


class _OnceResource(Generic[R]):
    """A resource handed to exactly one phase invocation."""

    __slots__ = ("_resource", "_taken")

    def __init__(self, resource: R) -> None:
        self._resource: R | None = resource
        self._taken = False

    def phase(self, fn: Callable[[R], Awaitable[None]]) -> Callable[[], Awaitable[None]]:
        def call() -> Awaitable[None]:
            if self._taken:
                raise ShutdownPhaseFailure(SHUTDOWN_RESOURCE_CONSUMED)
            self._taken = True
            resource, self._resource = self._resource, None
            return fn(resource)  # type: ignore[arg-type]  # set in __init__, taken once

        return call


@dataclass(frozen=True, slots=True)
class _Phase:
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
    """Wrap ``fn(resource)`` so that only the first call receives the resource."""
    return _OnceResource(resource).phase(fn)


def _status_for(kind: OutcomeKind, error: BaseException | None) -> ShutdownPhaseStatus:
    if kind is OutcomeKind.OK:
        return ShutdownPhaseStatus.SUCCEEDED
    if kind in (OutcomeKind.TIMED_OUT, OutcomeKind.CANCELLED):
        return ShutdownPhaseStatus.TIMED_OUT
    if kind is OutcomeKind.RAISED and isinstance(error, ShutdownPhaseFailure):
        return ShutdownPhaseStatus.FAILED(error.message)
    return ShutdownPhaseStatus.FAILED(SHUTDOWN_PHASE_PANICKED)


async def run_shutdown_phases(
    phases: Sequence[_Phase],
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


class ShutdownCoordinator:
    """Runs shutdown phases in registration order, each isolated and time-limited.

    A phase that raises, times out, ignores its cancellation (abandoned after a short
    grace) or raises while being cancelled is reported as failed or timed out, and the
    later phases still run. :meth:`run` is idempotent: concurrent and later calls get
    the same report and no phase runs twice. It does not resolve component
    dependencies; use :class:`~aster_forge.runtime.RuntimeComponentRegistry` for that.

    Example:
        >>> coordinator = ShutdownCoordinator()
        >>> async def close_db(handle: str) -> None: ...
        >>> coordinator.phase_once("database", timedelta(seconds=5), "db", close_db)
    """

    def __init__(
        self, *, clock: Clock | None = None, grace: timedelta = DEFAULT_ABANDON_GRACE
    ) -> None:
        self._phases: list[_Phase] = []
        self._clock: Clock = clock or SystemClock()
        self._grace = grace
        self._run: asyncio.Task[ShutdownRun] | None = None

    def phase(
        self,
        name: str,
        timeout: timedelta | None,
        fn: Callable[[], Awaitable[Any]],
    ) -> None:
        """Register a phase ``fn()`` with a deadline (``None``: no limit); raise
        :class:`~aster_forge.runtime.ShutdownPhaseFailure` in it to report your own text."""
        _check_phase(name, timeout)
        self._phases.append(_Phase(name, timeout, fn))

    def phase_once(
        self,
        name: str,
        timeout: timedelta | None,
        resource: R,
        fn: Callable[[R], Awaitable[None]],
    ) -> None:
        """Register a phase that consumes ``resource``: only one invocation receives it."""
        self.phase(name, timeout, once_phase(resource, fn))

    @property
    def phase_names(self) -> tuple[str, ...]:
        """The registered phase names, in order."""
        return tuple(phase.name for phase in self._phases)

    async def run(self) -> ShutdownReport:
        """Run every phase once, in order, and return the report (idempotent)."""
        if self._run is None:
            self._run = asyncio.create_task(
                run_shutdown_phases(self._phases, clock=self._clock, grace=self._grace),
                name="aster-forge:shutdown-coordinator",
            )
        # Shielded: a cancelled caller must not abort cleanup half-way; the task stays
        # referenced on the coordinator and a later run() joins it.
        result = await asyncio.shield(self._run)
        if result.escaped is not None:
            raise result.escaped
        return result.report


def _check_phase(name: str, timeout: timedelta | None) -> None:
    if not isinstance(name, str) or not name:
        raise RuntimeComponentRegistrationError("shutdown phase name must be a non-empty string")
    if timeout is not None and (not isinstance(timeout, timedelta) or timeout <= timedelta(0)):
        raise RuntimeComponentRegistrationError(
            f"shutdown phase {name!r}: timeout must be a positive timedelta or None"
        )
