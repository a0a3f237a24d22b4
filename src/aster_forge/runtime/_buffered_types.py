"""Value types of the buffered batch writer: config, policies, failures, events, reports."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Generic, TypeVar

from .errors import BufferedWriterError, InvalidBufferedConfigError

__all__ = [
    "BufferedBatchConfig",
    "BufferedLane",
    "BufferedWriterEvent",
    "BufferedWriterEventKind",
    "BufferedWriterLifecycle",
    "BufferedWriterSnapshot",
    "BufferedWriterStopReport",
    "OverflowPolicy",
    "RecordAdmission",
    "WriteFailure",
    "WriteFailureClass",
]

E = TypeVar("E")


def _non_negative_int(name: str, value: object) -> int:
    # bool is an int subclass; True as a capacity is a bug, not a 1.
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidBufferedConfigError(
            f"BufferedBatchConfig.{name} must be an int, got {type(value).__name__}"
        )
    if value < 0:
        raise InvalidBufferedConfigError(f"BufferedBatchConfig.{name} must be >= 0, got {value}")
    return value


@dataclass(frozen=True, slots=True)
class BufferedBatchConfig:
    """Sizing and timing of a :class:`ManagedBatchWriter`.

    Zero ``capacity`` or ``batch_size`` is normalised to one (the seed's rule);
    negative values and wrong types raise :class:`InvalidBufferedConfigError`.

    Attributes:
        capacity: Most records held by the batch lane, **including** the batch being
            written and not yet confirmed.
        batch_size: Most records handed to one sink call; reaching it flushes at once.
        max_delay: A partial batch is written at the latest this long after its oldest
            record was queued.
    """

    capacity: int = 4096
    batch_size: int = 100
    max_delay: timedelta = timedelta(seconds=1)

    def __post_init__(self) -> None:
        capacity = _non_negative_int("capacity", self.capacity)
        batch_size = _non_negative_int("batch_size", self.batch_size)
        if not isinstance(self.max_delay, timedelta):
            raise InvalidBufferedConfigError(
                "BufferedBatchConfig.max_delay must be a datetime.timedelta, "
                f"got {type(self.max_delay).__name__}"
            )
        if self.max_delay < timedelta(0):
            raise InvalidBufferedConfigError(
                f"BufferedBatchConfig.max_delay must be >= 0, got {self.max_delay}"
            )
        object.__setattr__(self, "capacity", max(capacity, 1))
        object.__setattr__(self, "batch_size", max(batch_size, 1))

    @property
    def max_delay_seconds(self) -> float:
        """``max_delay`` in seconds."""
        return self.max_delay.total_seconds()


class OverflowPolicy(enum.Enum):
    """What ``record()`` does when the batch lane is at capacity."""

    REJECT = "reject"
    """Raise :class:`RecordFullError`; the record is not accepted."""
    DIRECT_WRITE = "direct_write"
    """Use the single overflow slot: the worker writes the record alone and the caller
    waits for that write. When the slot is taken, raise :class:`RecordFullError`."""


class RecordAdmission(enum.Enum):
    """How ``record()`` accepted a record."""

    QUEUED = "queued"
    """Accepted into memory only; says nothing about persistence (or crash safety)."""
    DIRECT_PERSISTED = "direct_persisted"
    """This one overflow record was written; says nothing about the queued batches."""


class WriteFailureClass(enum.Enum):
    """How a failed sink call may be handled."""

    RETRYABLE = "retryable"
    """Nothing was committed; an explicit ``retry_failed()`` is safe."""
    PERMANENT = "permanent"
    """Retrying unchanged cannot help; never retried."""
    UNKNOWN_COMMIT = "unknown_commit"
    """The write may have committed; the product must reconcile. Never retried."""


class BufferedLane(enum.Enum):
    """The two write lanes of a :class:`ManagedBatchWriter`."""

    BATCH = "batch"
    """Queued records, written in chunks of at most ``batch_size``."""
    DIRECT = "direct"
    """The single overflow slot (``OverflowPolicy.DIRECT_WRITE``)."""


class BufferedWriterLifecycle(enum.Enum):
    """Lifecycle of a writer: ``CREATED -> RUNNING -> DRAINING -> STOPPED``."""

    CREATED = "created"
    RUNNING = "running"
    DRAINING = "draining"
    STOPPED = "stopped"


class WriteFailure(BufferedWriterError, Generic[E]):
    """Raised by a sink to report a classified write failure, keeping the original error.

    Every failure pauses its lane; none is retried automatically. Only
    :attr:`WriteFailureClass.RETRYABLE` may be resumed with ``retry_failed()``.

    Example:
        >>> failure = WriteFailure.retryable(ConnectionError("reset"))
        >>> failure.failure_class is WriteFailureClass.RETRYABLE
        True

    Attributes:
        failure_class: How the failure may be handled.
        error: The original error, untouched.
    """

    def __init__(self, failure_class: WriteFailureClass, error: E) -> None:
        if not isinstance(failure_class, WriteFailureClass):
            raise InvalidBufferedConfigError(
                f"WriteFailure needs a WriteFailureClass, got {type(failure_class).__name__}"
            )
        super().__init__(f"sink write failed ({failure_class.value})")
        self.failure_class = failure_class
        self.error = error

    @classmethod
    def retryable(cls, error: E) -> WriteFailure[E]:
        """Build a RETRYABLE failure: not committed, safe to retry explicitly."""
        return cls(WriteFailureClass.RETRYABLE, error)

    @classmethod
    def permanent(cls, error: E) -> WriteFailure[E]:
        """Build a PERMANENT failure: retrying unchanged cannot succeed."""
        return cls(WriteFailureClass.PERMANENT, error)

    @classmethod
    def unknown_commit(cls, error: E) -> WriteFailure[E]:
        """Build an UNKNOWN_COMMIT failure: may have committed, reconcile first."""
        return cls(WriteFailureClass.UNKNOWN_COMMIT, error)

    @property
    def retry_safe(self) -> bool:
        """Whether ``retry_failed()`` may resume the lane (RETRYABLE only)."""
        return self.failure_class is WriteFailureClass.RETRYABLE


class BufferedWriterEventKind(enum.Enum):
    """What a :class:`BufferedWriterEvent` reports."""

    STARTED = "started"
    BATCH_WRITTEN = "batch_written"
    DIRECT_WRITTEN = "direct_written"
    WRITE_FAILED = "write_failed"
    REJECTED_FULL = "rejected_full"
    RETRY_RESUMED = "retry_resumed"
    DRAINING = "draining"
    QUARANTINED = "quarantined"
    STOPPED = "stopped"


@dataclass(frozen=True, slots=True)
class BufferedWriterEvent:
    """An observation sent (never blocking) to the caller's bounded ``asyncio.Queue``.

    Attributes:
        kind: What happened.
        lane: The lane concerned, when one is.
        records: How many records the event concerns (0 when none).
        failure_class: The failure class for ``WRITE_FAILED``.
    """

    kind: BufferedWriterEventKind
    lane: BufferedLane | None = None
    records: int = 0
    failure_class: WriteFailureClass | None = None


@dataclass(frozen=True, slots=True)
class BufferedWriterSnapshot(Generic[E]):
    """A point-in-time view of a writer.

    Attributes:
        lifecycle: The writer's lifecycle.
        admission_open: Whether ``record()`` may accept records.
        capacity: The normalised batch-lane capacity.
        batch_size: The normalised batch size.
        queued_pending: Batch-lane records not yet confirmed (includes ``in_flight``).
        in_flight: Records of the batch currently handed to the sink.
        direct_pending: Overflow records not yet confirmed (0 or 1).
        batch_accepted: Records ever accepted into the batch lane.
        batch_confirmed: Batch-lane records the sink confirmed.
        direct_accepted: Records ever accepted into the overflow slot.
        direct_confirmed: Overflow records the sink confirmed.
        batches_written: Successful batch sink calls.
        rejected_full: ``record()`` calls refused with :class:`RecordFullError`.
        batch_failure: The failure pausing the batch lane (original error kept).
        direct_failure: The failure pausing the direct lane (original error kept).
        failed_chunk_len: Length of the failed front chunk of the batch lane (0 if none).
        quarantined: Whether the worker panicked or was cancelled (nothing is replayed).
        panic: The exception that escaped the sink or worker, if any.
        observer_events_dropped: Events the observer queue could not take.
    """

    lifecycle: BufferedWriterLifecycle
    admission_open: bool
    capacity: int
    batch_size: int
    queued_pending: int
    in_flight: int
    direct_pending: int
    batch_accepted: int
    batch_confirmed: int
    direct_accepted: int
    direct_confirmed: int
    batches_written: int
    rejected_full: int
    batch_failure: WriteFailure[E] | None
    direct_failure: WriteFailure[E] | None
    failed_chunk_len: int
    quarantined: bool
    panic: BaseException | None
    observer_events_dropped: int


@dataclass(frozen=True, slots=True)
class BufferedWriterStopReport(Generic[E]):
    """What ``stop()`` achieved; shared by every concurrent ``stop()`` call.

    Attributes:
        drained: Every accepted record was confirmed.
        timed_out: The deadline passed while records were still being drained.
        worker_cancelled: The worker was cancelled while it still had work (an in-flight
            write is then of unknown outcome and is kept, never replayed).
        panicked: The sink or worker raised an unclassified exception.
        unconfirmed_batch: Batch-lane records left unconfirmed.
        unconfirmed_direct: Overflow records left unconfirmed.
        batch_failure: The failure pausing the batch lane, if any.
        direct_failure: The failure pausing the direct lane, if any.
        duration: Time from the first ``stop()`` call to the worker being joined.
        snapshot: The final snapshot.
    """

    drained: bool
    timed_out: bool
    worker_cancelled: bool
    panicked: bool
    unconfirmed_batch: int
    unconfirmed_direct: int
    batch_failure: WriteFailure[E] | None
    direct_failure: WriteFailure[E] | None
    duration: timedelta
    snapshot: BufferedWriterSnapshot[E] = field(repr=False)

    @property
    def duration_seconds(self) -> float:
        """``duration`` in seconds, for metrics."""
        return self.duration.total_seconds()

    @property
    def unconfirmed(self) -> int:
        """All records left unconfirmed (both lanes)."""
        return self.unconfirmed_batch + self.unconfirmed_direct
