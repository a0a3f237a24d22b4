"""Exceptions raised by :mod:`aster_forge.runtime`.

Every exception derives from :class:`AsterForgeRuntimeError` (itself an
:class:`~aster_forge.AsterForgeError`) and, where the meaning matches, from a
built-in such as ``ValueError``, ``TimeoutError`` or ``LookupError``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, TypeVar

from .._errors import AsterForgeError

if TYPE_CHECKING:  # buffered (issue 4): annotations only, avoids an import cycle
    from ._buffered_types import BufferedWriterLifecycle, WriteFailure

_T = TypeVar("_T")


class AsterForgeRuntimeError(AsterForgeError):
    """Raised as the base class of every :mod:`aster_forge.runtime` error."""


# --- health (issue 2) ---


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


# --- lifecycle (issue 3) ---

# --- buffered (issue 4) ---


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

# --- lease (issue 5) ---


class RuntimeLeaseConfigError(AsterForgeRuntimeError, ValueError):
    """Raised when a lease id, owner id or lease duration is invalid.

    Raised by :class:`~aster_forge.runtime.RuntimeLeaseConfig` and by lease stores
    before any statement runs, so bad input never reaches the database.
    """
