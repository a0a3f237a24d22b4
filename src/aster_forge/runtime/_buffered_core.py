"""The batch writer's values (config, failures, events, snapshots) and its shared state.

The core holds every record, counter and waiter. The worker task references the core
only, never the owning :class:`ManagedBatchWriter`, so dropping the owner lets its
finalizer cancel the worker.
"""

from __future__ import annotations

import asyncio
import enum
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Generic, TypeVar

from ._clock import Clock
from ._race import race
from .errors import (
    BufferedWriterError,
    FlushFailedError,
    FlushTimeoutError,
    InvalidBufferedConfigError,
    WriterQuarantinedError,
)

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
T = TypeVar("T")


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


Sink = Callable[[list[T]], Awaitable[None]]

_Lifecycle = BufferedWriterLifecycle

_Kind = BufferedWriterEventKind


class _FlushRequest:
    """A waiting flush: the batch watermark it forces, until its deadline."""

    __slots__ = ("batch_watermark", "deadline")

    def __init__(self, batch_watermark: int, deadline: float) -> None:
        self.batch_watermark = batch_watermark
        self.deadline = deadline


class _WriterCore(Generic[T, E]):
    """Records, counters, waiters and the single worker loop."""

    def __init__(
        self,
        config: BufferedBatchConfig,
        policy: OverflowPolicy,
        observer: asyncio.Queue[BufferedWriterEvent] | None,
        sink: Sink[T],
        clock: Clock,
    ) -> None:
        self.capacity = config.capacity
        self.batch_size = config.batch_size
        self.max_delay = config.max_delay_seconds
        self.policy = policy
        self.observer = observer
        self.sink = sink
        self.clock = clock
        self.lifecycle = _Lifecycle.CREATED
        self.admission_open = False
        # Batch lane: every unconfirmed record, in order; the front ``in_flight`` are
        # being written. ``marks`` holds (sequence, enqueue time) of the oldest record
        # of each potential batch, for ``max_delay``.
        self.queue: deque[T] = deque()
        self.marks: deque[tuple[int, float]] = deque()
        self.next_mark = 0
        self.in_flight = 0
        self.batch_accepted = 0
        self.batch_confirmed = 0
        self.batches_written = 0
        self.batch_failure: WriteFailure[E] | None = None
        self.failed_chunk_len = 0
        self.retry_chunk_len = 0
        # Direct lane: one bounded overflow slot.
        self.direct_slot: list[T] = []
        self.direct_in_flight = False
        self.direct_accepted = 0
        self.direct_confirmed = 0
        self.direct_failure: WriteFailure[E] | None = None
        self.last_lane = BufferedLane.DIRECT
        self.rejected_full = 0
        self.observer_events_dropped = 0
        self.flushes: list[_FlushRequest] = []
        self.quarantined = False
        self.panic: BaseException | None = None
        self.cancelled_in_flight = False
        self.worker_exited = False
        # Created in ``start()`` so the constructor never touches an event loop.
        self.wake: asyncio.Event | None = None
        self.progress: asyncio.Event | None = None

    # --- shared helpers -------------------------------------------------------------

    def emit(
        self,
        kind: BufferedWriterEventKind,
        lane: BufferedLane | None = None,
        records: int = 0,
        failure_class: WriteFailureClass | None = None,
    ) -> None:
        """Offer an event to the observer; never blocks, never raises."""
        observer = self.observer
        if observer is None:
            return
        try:
            observer.put_nowait(BufferedWriterEvent(kind, lane, records, failure_class))
        except Exception:
            # Full, shut down or broken: observation never blocks persistence.
            self.observer_events_dropped += 1

    def notify(self) -> None:
        """Wake every waiter (flush, stop, direct) to re-check its predicate."""
        if self.progress is not None:
            self.progress.set()
            self.progress = asyncio.Event()

    def kick(self) -> None:
        """Wake the worker to re-evaluate what is ready."""
        if self.wake is not None:
            self.wake.set()

    async def wait_progress(self, deadline: float | None) -> None:
        """Wait for the next ``notify()`` or until ``deadline`` (clock monotonic time)."""
        progress = self.progress
        assert progress is not None, "waiters exist only after start()"
        if deadline is None:
            await progress.wait()
            return
        remaining = deadline - self.clock.monotonic()
        if remaining > 0:
            await race(
                progress.wait(),
                seconds=remaining,
                clock=self.clock,
                name="aster-forge:buffered-waiter",
            )

    def open(self) -> None:
        """Enter RUNNING: create loop-bound primitives and open admission."""
        self.wake = asyncio.Event()
        self.progress = asyncio.Event()
        self.lifecycle = _Lifecycle.RUNNING
        self.admission_open = True
        self.emit(_Kind.STARTED)

    def begin_drain(self) -> None:
        """Close admission; the worker then writes partial batches without waiting."""
        self.admission_open = False
        if self.lifecycle is _Lifecycle.RUNNING:
            self.lifecycle = _Lifecycle.DRAINING
            self.emit(_Kind.DRAINING)
        self.kick()
        self.notify()

    # --- admission ------------------------------------------------------------------

    def try_enqueue(self, record: T) -> bool:
        """Queue ``record`` in the batch lane if there is room (room counts in-flight)."""
        # The hot path: one length check, one append, at most one comparison more.
        queue = self.queue
        size = len(queue)
        if size >= self.capacity:
            return False
        seq = self.batch_accepted
        queue.append(record)
        self.batch_accepted = seq + 1
        unwritten = size - self.in_flight
        if unwritten == 0 or seq >= self.next_mark:
            self._mark(seq, unwritten)
        elif unwritten + 1 == self.batch_size:
            self.kick()  # reached the threshold; above it the worker is already busy
        return True

    def _mark(self, seq: int, unwritten: int) -> None:
        # One (sequence, time) mark per potential batch, for max_delay.
        self.marks.append((seq, self.clock.monotonic()))
        self.next_mark = seq + self.batch_size
        if unwritten == 0 or unwritten + 1 == self.batch_size:
            self.kick()  # arm the max_delay timer, or the threshold was reached

    def try_occupy_direct(self, record: T) -> int | None:
        """Take the overflow slot; return the record's direct sequence, or ``None``."""
        if self.policy is not OverflowPolicy.DIRECT_WRITE or self.direct_slot:
            return None
        self.direct_slot.append(record)
        seq = self.direct_accepted
        self.direct_accepted = seq + 1
        self.kick()
        return seq

    async def wait_direct(self, seq: int) -> WriteFailure[E] | None:
        """Wait until direct record ``seq`` is confirmed (``None``) or has failed.

        Raises:
            WriterQuarantinedError: The worker ended before the write was confirmed.
        """
        while True:
            if self.direct_confirmed > seq:
                return None
            if self.direct_failure is not None and self.direct_confirmed == seq:
                return self.direct_failure
            if self.worker_exited:
                raise WriterQuarantinedError(self.panic)
            await self.wait_progress(None)

    # --- flush and drain ------------------------------------------------------------

    async def flush(self, deadline: float) -> None:
        """Wait until every record accepted before this call is confirmed in both lanes."""
        batch_wm = self.batch_accepted
        direct_wm = self.direct_accepted
        if self._range_state(batch_wm, direct_wm):
            return
        if self.clock.monotonic() >= deadline:
            # An expired deadline starts no forced write.
            raise FlushTimeoutError(
                batch_wm - self.batch_confirmed, direct_wm - self.direct_confirmed
            )
        request = _FlushRequest(batch_wm, deadline)
        self.flushes.append(request)
        self.kick()
        try:
            while not self._range_state(batch_wm, direct_wm):
                if self.clock.monotonic() >= deadline:
                    raise FlushTimeoutError(
                        max(batch_wm - self.batch_confirmed, 0),
                        max(direct_wm - self.direct_confirmed, 0),
                    )
                await self.wait_progress(deadline)
        finally:
            self.flushes.remove(request)

    def _range_state(self, batch_wm: int, direct_wm: int) -> bool:
        """``True`` when the range is confirmed; raise when it can no longer be."""
        batch_done = self.batch_confirmed >= batch_wm
        direct_done = self.direct_confirmed >= direct_wm
        if batch_done and direct_done:
            return True
        if self.quarantined or self.worker_exited:
            raise WriterQuarantinedError(self.panic)
        batch_blocked = not batch_done and self.batch_failure is not None
        direct_blocked = not direct_done and self.direct_failure is not None
        # A failed lane does not stop the other lane from draining its part first.
        if (batch_done or batch_blocked) and (direct_done or direct_blocked):
            raise FlushFailedError(
                self.batch_failure if batch_blocked else None,
                self.direct_failure if direct_blocked else None,
            )
        return False

    def settled(self) -> bool:
        """Whether the worker can make no further progress without outside help."""
        if self.worker_exited:
            return True
        batch_idle = not self.queue or self.batch_failure is not None
        direct_idle = not self.direct_slot or self.direct_failure is not None
        return batch_idle and direct_idle

    async def wait_settled(self, deadline: float) -> bool:
        """Wait until settled; return ``True`` when ``deadline`` passed first."""
        while not self.settled():
            if self.clock.monotonic() >= deadline:
                return True
            await self.wait_progress(deadline)
        return False

    # --- retry ----------------------------------------------------------------------

    def retry_failed(self) -> frozenset[BufferedLane]:
        """Resume the lanes paused by a RETRYABLE failure; return the lanes resumed."""
        if self.worker_exited or self.wake is None:
            return frozenset()
        resumed: set[BufferedLane] = set()
        if self.batch_failure is not None and self.batch_failure.retry_safe:
            # The same chunk is written again, never merged with later records.
            self.retry_chunk_len = self.failed_chunk_len
            self.batch_failure = None
            self.failed_chunk_len = 0
            resumed.add(BufferedLane.BATCH)
        if self.direct_failure is not None and self.direct_failure.retry_safe:
            self.direct_failure = None
            resumed.add(BufferedLane.DIRECT)
        for lane in sorted(resumed, key=lambda item: item.value):
            self.emit(_Kind.RETRY_RESUMED, lane)
        if resumed:
            self.kick()
            self.notify()
        return frozenset(resumed)

    # --- views ----------------------------------------------------------------------

    def snapshot(self) -> BufferedWriterSnapshot[E]:
        """Build a point-in-time :class:`BufferedWriterSnapshot`."""
        return BufferedWriterSnapshot(
            lifecycle=self.lifecycle,
            admission_open=self.admission_open,
            capacity=self.capacity,
            batch_size=self.batch_size,
            queued_pending=len(self.queue),
            in_flight=self.in_flight,
            direct_pending=len(self.direct_slot),
            batch_accepted=self.batch_accepted,
            batch_confirmed=self.batch_confirmed,
            direct_accepted=self.direct_accepted,
            direct_confirmed=self.direct_confirmed,
            batches_written=self.batches_written,
            rejected_full=self.rejected_full,
            batch_failure=self.batch_failure,
            direct_failure=self.direct_failure,
            failed_chunk_len=self.failed_chunk_len,
            quarantined=self.quarantined,
            panic=self.panic,
            observer_events_dropped=self.observer_events_dropped,
        )
