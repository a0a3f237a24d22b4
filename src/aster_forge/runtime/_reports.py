"""Startup and shutdown reports: phase statuses, per-phase and whole-run reports, their logs."""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, ClassVar

__all__ = [
    "SHUTDOWN_PHASE_PANICKED",
    "SHUTDOWN_RESOURCE_CONSUMED",
    "STARTUP_PHASE_FAILED",
    "ShutdownPhaseReport",
    "ShutdownPhaseStatus",
    "ShutdownPhaseStatusKind",
    "ShutdownReport",
    "StartupPhaseFailurePolicy",
    "StartupPhaseReport",
    "StartupPhaseStatus",
    "StartupReport",
    "log_shutdown_report",
    "log_startup_phase",
]

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

    ``error`` is a fixed failure text (never the exception's message) or ``None``;
    ``component`` is the owning component.
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


def log_startup_phase(report: StartupPhaseReport) -> None:
    """Log one startup phase: INFO when it succeeded, WARNING otherwise."""
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

    ``component_started`` says whether the owning component's startup phases all ran and
    succeeded (a failed startup still runs shutdown); ``None`` when it has none.
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
