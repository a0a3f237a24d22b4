"""Ordered, isolated shutdown phases and their report."""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, ClassVar, Generic, TypeVar

from ._clock import Clock, SystemClock
from ._isolation import DEFAULT_ABANDON_GRACE, OutcomeKind, run_isolated
from .errors import RuntimeComponentRegistrationError, ShutdownPhaseFailure

__all__ = [
    "SHUTDOWN_PHASE_PANICKED",
    "SHUTDOWN_RESOURCE_CONSUMED",
    "ShutdownCoordinator",
    "ShutdownPhaseReport",
    "ShutdownPhaseStatus",
    "ShutdownPhaseStatusKind",
    "ShutdownReport",
    "log_shutdown_report",
]

R = TypeVar("R")

logger = logging.getLogger("aster_forge.runtime")

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
    """Log a shutdown report: INFO per phase and overall, WARNING for failed phases.

    Args:
        report: The report to log.
        log: The logger to use (default ``aster_forge.runtime``).
    """
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
        elapsed = timedelta(seconds=max(clock.monotonic() - phase_begin, 0.0))
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
    report = ShutdownReport(tuple(reports), timedelta(seconds=max(clock.monotonic() - begin, 0.0)))
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
    ) -> ShutdownCoordinator:
        """Register a phase; ``fn()`` is called when the phase runs.

        Args:
            name: The phase name shown in the report.
            timeout: The phase deadline, or ``None`` for no limit.
            fn: Creates the phase's awaitable. Raise
                :class:`~aster_forge.runtime.ShutdownPhaseFailure` to report your own text.

        Returns:
            This coordinator, for chaining.
        """
        _check_phase(name, timeout)
        self._phases.append(_Phase(name, timeout, fn))
        return self

    def phase_once(
        self,
        name: str,
        timeout: timedelta | None,
        resource: R,
        fn: Callable[[R], Awaitable[None]],
    ) -> ShutdownCoordinator:
        """Register a phase that consumes ``resource``: only one invocation receives it.

        Returns:
            This coordinator, for chaining.
        """
        return self.phase(name, timeout, once_phase(resource, fn))

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
