"""Exceptions raised by :mod:`aster_forge.runtime`.

Every exception derives from :class:`AsterForgeRuntimeError` (itself an
:class:`~aster_forge.AsterForgeError`) and, where the meaning matches, from a
built-in such as ``ValueError``, ``TimeoutError`` or ``LookupError``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, TypeVar

from .._errors import AsterForgeError

if TYPE_CHECKING:  # annotations only: those modules import this one
    from ._buffered_core import BufferedWriterLifecycle, WriteFailure
    from ._phases import ShutdownReport, StartupReport

_T = TypeVar("_T")


class AsterForgeRuntimeError(AsterForgeError):
    """Raised as the base class of every :mod:`aster_forge.runtime` error."""


# --- health ---


class InvalidHealthReportError(AsterForgeRuntimeError, ValueError):
    """Raised when a health report, or its JSON form, is malformed.

    Examples: a status wire value that is not ``healthy|degraded|unhealthy``, a
    component without a name, a negative duration, or a JSON object with missing or
    mistyped fields.
    """


class InvalidHealthDetailError(InvalidHealthReportError):
    """Raised when a typed health detail value, or its JSON form, is invalid.

    Examples: a negative ``unsigned`` or ``duration_millis``, an ``integer`` outside
    the signed 64-bit range, a ``bool`` passed where an integer is expected (or the
    reverse), a value of the wrong Python type, an unknown ``"type"`` tag in JSON, or
    a duplicate detail key on one component report. Nothing is silently coerced.
    """


class InvalidHealthCheckError(AsterForgeRuntimeError, ValueError):
    """Raised when a health check registration or its options are invalid.

    Examples: an empty name, a non-positive timeout, an empty scope set, or a check
    that is not callable.
    """


class DuplicateHealthCheckError(InvalidHealthCheckError):
    """Raised when a health check is registered under a name that is already taken."""


# --- lifecycle ---


class ShutdownPhaseFailure(AsterForgeRuntimeError):
    """Raised by a shutdown phase to report a failure text the product chose.

    A shutdown phase that raises this is reported as ``FAILED(message)``; any other
    exception is reported with a fixed text, never with its message.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class RuntimeComponentGraphError(AsterForgeRuntimeError, ValueError):
    """Raised when a component graph has a missing dependency or a dependency cycle.

    Attributes:
        missing: ``(component, dependency)`` pairs whose dependency is not registered.
        cycle: The components forming a dependency cycle, in order (empty if none).
    """

    def __init__(
        self,
        *,
        missing: tuple[tuple[str, str], ...] = (),
        cycle: tuple[str, ...] = (),
    ) -> None:
        parts = [f"component {c!r} depends on missing component {d!r}" for c, d in missing]
        if cycle:
            parts.append("dependency cycle: " + " -> ".join((*cycle, cycle[0])))
        super().__init__("; ".join(parts) or "invalid component graph")
        self.missing = missing
        self.cycle = cycle


class RuntimeComponentRegistrationError(AsterForgeRuntimeError, ValueError):
    """Raised when a component or phase registration is invalid.

    Examples: an empty name, a non-positive timeout, one component name registered
    with two different kinds, or a value that is not a component.
    """


class RuntimeTempDirError(AsterForgeRuntimeError, OSError):
    """Raised when a runtime temp directory cannot be created."""


class RuntimeTempDirScopeError(RuntimeTempDirError, ValueError):
    """Raised when a temp dir scope is not non-empty ASCII letters, digits, ``-`` and ``_``."""


class RuntimeSignalError(AsterForgeRuntimeError, RuntimeError):
    """Raised when termination signal handlers cannot be installed or awaited.

    For example when installing from a thread other than the main thread.
    """


class AsterRuntimeError(AsterForgeRuntimeError):
    """Raised as the base class of every :class:`~aster_forge.runtime.AsterRuntime` failure."""


class AsterRuntimeStartupError(AsterRuntimeError):
    """Raised when startup was aborted (a required phase failed or a stop was requested).

    Best-effort shutdown already ran; both reports are kept.

    Attributes:
        report: The startup report (``report.cancelled`` tells a requested stop apart).
        shutdown_report: The report of the cleanup that ran after the abort.
    """

    def __init__(self, report: StartupReport, shutdown_report: ShutdownReport) -> None:
        reason = "interrupted by a stop request" if report.cancelled else "a required phase failed"
        super().__init__(f"runtime startup aborted: {reason}")
        self.report = report
        self.shutdown_report = shutdown_report


class AsterRuntimeShutdownError(AsterRuntimeError):
    """Raised after all cleanup ran when a shutdown phase failed or timed out.

    Attributes:
        report: The full shutdown report (later phases included).
    """

    def __init__(self, report: ShutdownReport) -> None:
        failed = ", ".join(phase.name for phase in report.failures())
        super().__init__(f"runtime shutdown had failures: {failed}")
        self.report = report


class AsterRuntimeBeforeShutdownError(AsterRuntimeError):
    """Raised after all cleanup ran when a before-shutdown hook raised.

    The hook's exception is chained as ``__cause__``.

    Attributes:
        shutdown_report: The report of the component shutdown that still ran.
    """

    def __init__(self, shutdown_report: ShutdownReport) -> None:
        super().__init__("runtime before-shutdown hook failed")
        self.shutdown_report = shutdown_report


class AsterRuntimeServiceError(AsterRuntimeError):
    """Raised after all cleanup ran when the service raised.

    The service's exception is chained as ``__cause__`` (the root cause survives).

    Attributes:
        shutdown_report: The report of the component shutdown that still ran.
        before_shutdown_panicked: Whether a before-shutdown hook raised as well.
    """

    def __init__(self, shutdown_report: ShutdownReport, before_shutdown_panicked: bool) -> None:
        super().__init__("runtime service failed")
        self.shutdown_report = shutdown_report
        self.before_shutdown_panicked = before_shutdown_panicked


class AsterRuntimeComponentGraphError(AsterRuntimeError, ValueError):
    """Raised by ``AsterRuntime(...)`` when the component graph is invalid.

    Attributes:
        graph_error: The underlying :class:`RuntimeComponentGraphError`.
    """

    def __init__(self, graph_error: RuntimeComponentGraphError) -> None:
        super().__init__(str(graph_error))
        self.graph_error = graph_error


# --- buffered ---


class BufferedWriterError(AsterForgeRuntimeError):
    """Raised as the base class of every :class:`ManagedBatchWriter` error."""


class InvalidBufferedConfigError(BufferedWriterError, ValueError):
    """Raised when a :class:`BufferedBatchConfig` field has a wrong type or a negative value."""


class WriterLifecycleError(BufferedWriterError, RuntimeError):
    """Raised when ``start()`` is called twice, or after the writer was stopped."""


class RecordError(BufferedWriterError, Generic[_T]):
    """Raised when ``record()`` did not end with the record confirmed or queued.

    Attributes:
        record: The record that was passed to ``record()``.
    """

    def __init__(self, message: str, record: _T) -> None:
        super().__init__(message)
        self.record = record


class RecordFullError(RecordError[_T]):
    """Raised when the queue (and the overflow slot, if any) is full.

    The record was **not** accepted; the caller still owns it (``error.record``).
    """

    def __init__(self, record: _T) -> None:
        super().__init__("buffered writer is full; record not accepted", record)


class RecordClosedError(RecordError[_T]):
    """Raised when admission is closed (not started, draining, stopped or quarantined).

    The record was **not** accepted; the caller still owns it (``error.record``).

    Attributes:
        lifecycle: The writer's lifecycle when the record was refused.
    """

    def __init__(self, record: _T, lifecycle: BufferedWriterLifecycle) -> None:
        super().__init__("buffered writer admission is closed; record not accepted", record)
        self.lifecycle = lifecycle


class DirectWriteError(RecordError[_T]):
    """Raised when an overflow record was accepted but its direct write was not confirmed.

    The record **was** accepted and is retained by the writer: a RETRYABLE failure can
    be resumed with ``retry_failed()``; otherwise it is returned by ``unconfirmed()``.

    Attributes:
        failure: The sink's classified failure, or ``None`` when the worker panicked
            or was cancelled before the write was confirmed.
        cause: The exception that quarantined the writer, if any.
    """

    def __init__(
        self,
        record: _T,
        failure: WriteFailure[Any] | None,
        cause: BaseException | None = None,
    ) -> None:
        super().__init__("direct write was not confirmed; record retained by the writer", record)
        self.failure = failure
        self.cause = cause


class FlushTimeoutError(BufferedWriterError, TimeoutError):
    """Raised when a flush or drain deadline passed before its range was confirmed.

    Attributes:
        batch_remaining: Records of the pinned batch range still unconfirmed.
        direct_remaining: Records of the pinned direct range still unconfirmed.
    """

    def __init__(self, batch_remaining: int, direct_remaining: int) -> None:
        super().__init__("flush deadline passed before the accepted range was confirmed")
        self.batch_remaining = batch_remaining
        self.direct_remaining = direct_remaining


class FlushFailedError(BufferedWriterError):
    """Raised when a lane holding part of the flushed range is paused by a write failure.

    The other lane was drained as far as the range reaches before this was raised.

    Attributes:
        batch_failure: The batch lane's failure, if it blocks the range.
        direct_failure: The direct lane's failure, if it blocks the range.
    """

    def __init__(
        self,
        batch_failure: WriteFailure[Any] | None,
        direct_failure: WriteFailure[Any] | None,
    ) -> None:
        super().__init__("a write failure paused a lane before the flushed range was confirmed")
        self.batch_failure = batch_failure
        self.direct_failure = direct_failure


class WriterQuarantinedError(BufferedWriterError):
    """Raised when the worker panicked, was cancelled or stopped before a range was confirmed.

    Nothing left is replayed; read ``unconfirmed()`` after ``stop()`` to reconcile.

    Attributes:
        cause: The exception that escaped the sink or the worker, or ``None`` when the
            worker was cancelled or had already stopped.
    """

    def __init__(self, cause: BaseException | None) -> None:
        super().__init__("buffered writer worker is quarantined; unconfirmed records retained")
        self.cause = cause


# --- lease ---


class RuntimeLeaseConfigError(AsterForgeRuntimeError, ValueError):
    """Raised when a lease id, owner id or lease duration is invalid.

    Raised by :class:`~aster_forge.runtime.RuntimeLeaseConfig` and by lease stores
    before any statement runs, so bad input never reaches the database.
    """
