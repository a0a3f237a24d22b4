"""ManagedBatchWriter: caller-owned batch persistence that never drops or blindly replays."""

from __future__ import annotations

import asyncio
import logging
import math
import weakref
from datetime import timedelta
from typing import Any, Generic, TypeVar

from ._buffered_core import (
    BufferedBatchConfig,
    BufferedLane,
    BufferedWriterEvent,
    BufferedWriterEventKind,
    BufferedWriterLifecycle,
    BufferedWriterSnapshot,
    BufferedWriterStopReport,
    OverflowPolicy,
    RecordAdmission,
    Sink,
    _WriterCore,
)
from ._buffered_worker import run_worker
from ._clock import Clock, SystemClock
from .errors import (
    DirectWriteError,
    RecordClosedError,
    RecordFullError,
    WriterLifecycleError,
    WriterQuarantinedError,
)

__all__ = ["ManagedBatchWriter"]

logger = logging.getLogger(__name__)

T = TypeVar("T")
E = TypeVar("E")

_Lifecycle = BufferedWriterLifecycle

_QUEUED = RecordAdmission.QUEUED  # the admission hot path skips the enum lookup

# Workers of dropped owners, kept referenced until their cancellation has run.
_ORPHANED_WORKERS: set[asyncio.Task[None]] = set()


def _cancel_orphaned_worker(worker: asyncio.Task[None]) -> None:
    """Finalizer of a dropped owner: cancel its worker (no graceful drain)."""
    if worker.done():
        return
    try:
        worker.cancel()
    except RuntimeError:  # the worker's loop is already closed; nothing left to run it
        return
    _ORPHANED_WORKERS.add(worker)
    worker.add_done_callback(_ORPHANED_WORKERS.discard)


def _checked_deadline(deadline: float) -> float:
    if isinstance(deadline, bool) or not isinstance(deadline, int | float):
        raise TypeError(f"deadline must be a float of clock.monotonic() time, got {deadline!r}")
    if math.isnan(deadline):
        raise ValueError("deadline must not be NaN")
    return float(deadline)


def _checked_budget(budget: timedelta) -> float:
    if not isinstance(budget, timedelta):
        raise TypeError(f"budget must be a datetime.timedelta, got {type(budget).__name__}")
    return budget.total_seconds()


class ManagedBatchWriter(Generic[T, E]):
    """A caller-owned in-memory buffer that persists records in batches through a sink.

    The sink is ``async def sink(records: list[T]) -> None``. It receives at most
    ``batch_size`` records per call and reports failure by raising
    :class:`WriteFailure` (``RETRYABLE``, ``PERMANENT`` or ``UNKNOWN_COMMIT``, keeping
    the original error). Any other exception is treated as a panic: admission closes,
    the remaining records are quarantined (never replayed) and every waiter is woken.

    Lifecycle: ``CREATED -> RUNNING -> DRAINING -> STOPPED``. The constructor creates
    no task or timer and never calls the sink; :meth:`start` (once) starts the single
    worker. :meth:`stop` is the graceful path: it closes admission, drains within a
    deadline, then cancels and joins the worker. Dropping the owner without ``stop()``
    cancels the worker through a finalizer: an in-flight write is abandoned and queued
    records are lost with the owner, so always ``stop()`` before closing what the sink
    depends on.

    Records are retained as given (not copied) until confirmed; each sink call gets a
    fresh list. Treat records as immutable. The queue is memory only: ``QUEUED`` gives
    no crash durability. The sink must be cooperative (no blocking calls) and must let
    ``asyncio.CancelledError`` propagate.

    Example:
        >>> async def main() -> None:
        ...     async def persist(records: list[str]) -> None:
        ...         print(records)
        ...     writer: ManagedBatchWriter[str, Exception] = ManagedBatchWriter(
        ...         BufferedBatchConfig(capacity=100, batch_size=10),
        ...         OverflowPolicy.REJECT,
        ...         None,
        ...         persist,
        ...     )
        ...     await writer.start()
        ...     await writer.record("a")
        ...     await writer.flush_within(timedelta(seconds=5))
        ...     report = await writer.stop_within(timedelta(seconds=5))
        ...     assert report.drained
        >>> asyncio.run(main())
        ['a']
    """

    def __init__(
        self,
        config: BufferedBatchConfig,
        overflow_policy: OverflowPolicy,
        observer: asyncio.Queue[BufferedWriterEvent] | None,
        sink: Sink[T],
        *,
        clock: Clock | None = None,
    ) -> None:
        """Create a writer; starts nothing and does not touch the event loop.

        Args:
            config: Capacity, batch size and max delay.
            overflow_policy: What ``record()`` does when the batch lane is full.
            observer: A caller-created bounded queue; events are offered with
                ``put_nowait`` and counted in ``observer_events_dropped`` when refused.
            sink: The async persistence callable.
            clock: Time source for ``max_delay`` and deadlines (default: system clock).

        Raises:
            TypeError: When an argument has the wrong type.
        """
        if not isinstance(config, BufferedBatchConfig):
            raise TypeError(f"config must be a BufferedBatchConfig, got {type(config).__name__}")
        if not isinstance(overflow_policy, OverflowPolicy):
            raise TypeError(
                f"overflow_policy must be an OverflowPolicy, got {type(overflow_policy).__name__}"
            )
        if observer is not None and not isinstance(observer, asyncio.Queue):
            raise TypeError(f"observer must be an asyncio.Queue, got {type(observer).__name__}")
        if not callable(sink):
            raise TypeError("sink must be an async callable taking a list of records")
        self._config = config
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._core: _WriterCore[T, E] = _WriterCore(
            config, overflow_policy, observer, sink, self._clock
        )
        self._worker: asyncio.Task[None] | None = None
        self._finalizer: weakref.finalize[[asyncio.Task[None]], Any] | None = None
        self._stop_started: float | None = None
        self._timed_out = False
        self._report: BufferedWriterStopReport[E] | None = None

    # --- properties -----------------------------------------------------------------

    @property
    def config(self) -> BufferedBatchConfig:
        """The normalised configuration."""
        return self._config

    @property
    def clock(self) -> Clock:
        """The clock whose ``monotonic()`` time deadlines are measured in."""
        return self._clock

    @property
    def lifecycle(self) -> BufferedWriterLifecycle:
        """The current lifecycle."""
        return self._core.lifecycle

    # --- lifecycle ------------------------------------------------------------------

    async def start(self) -> None:
        """Start the single worker on the running loop and open admission.

        Raises:
            WriterLifecycleError: When called more than once.
        """
        core = self._core
        if core.lifecycle is not _Lifecycle.CREATED:
            raise WriterLifecycleError(
                f"ManagedBatchWriter.start() may be called once; lifecycle is "
                f"{core.lifecycle.value}"
            )
        core.open()
        worker = asyncio.create_task(run_worker(core), name="aster-forge:buffered-worker")
        self._worker = worker
        # The finalizer holds the worker, never ``self``: dropping the owner cancels it.
        finalizer = weakref.finalize(self, _cancel_orphaned_worker, worker)
        finalizer.atexit = False
        self._finalizer = finalizer
        logger.debug(
            "buffered writer started",
            extra={"capacity": core.capacity, "batch_size": core.batch_size},
        )

    def begin_drain(self) -> None:
        """Close admission; queued records keep being written (partial batches at once)."""
        if self._core.lifecycle is _Lifecycle.CREATED:
            return
        self._core.begin_drain()

    async def stop(self, deadline: float) -> BufferedWriterStopReport[E]:
        """Close admission, drain until ``deadline``, then cancel and join the worker.

        Concurrent and repeated calls share the same join and report. Cancelling a
        ``stop()`` call drops no record: the worker keeps draining and a later
        ``stop()`` joins it.

        Args:
            deadline: An absolute time in ``self.clock.monotonic()`` units.

        Returns:
            The stop report (the same object for every call).
        """
        deadline = _checked_deadline(deadline)
        if self._report is not None:
            return self._report
        core = self._core
        if self._stop_started is None:
            self._stop_started = self._clock.monotonic()
        worker = self._worker
        if worker is None:
            core.admission_open = False
            core.lifecycle = _Lifecycle.STOPPED
            return self._finish()
        core.begin_drain()
        if await core.wait_settled(deadline):
            self._timed_out = True
        if not worker.done():
            worker.cancel()
        # Join without forwarding our own cancellation into the worker.
        await asyncio.wait([worker])
        shared = self._shared_report()
        if shared is None:
            if not worker.cancelled() and worker.exception() is not None:
                logger.error("buffered writer worker ended with an error")
            core.lifecycle = _Lifecycle.STOPPED
            if self._finalizer is not None:
                self._finalizer.detach()
            return self._finish()
        return shared

    def _shared_report(self) -> BufferedWriterStopReport[E] | None:
        # A method, so the check after the join is not narrowed by the one before it.
        return self._report

    async def stop_within(self, budget: timedelta) -> BufferedWriterStopReport[E]:
        """:meth:`stop` with a deadline ``budget`` from now."""
        return await self.stop(self._clock.monotonic() + _checked_budget(budget))

    def _finish(self) -> BufferedWriterStopReport[E]:
        core = self._core
        core.emit(BufferedWriterEventKind.STOPPED)
        snapshot = core.snapshot()
        started = self._stop_started if self._stop_started is not None else 0.0
        report = BufferedWriterStopReport(
            drained=snapshot.queued_pending == 0 and snapshot.direct_pending == 0,
            timed_out=self._timed_out,
            worker_cancelled=core.cancelled_in_flight,
            panicked=core.panic is not None,
            unconfirmed_batch=snapshot.queued_pending,
            unconfirmed_direct=snapshot.direct_pending,
            batch_failure=snapshot.batch_failure,
            direct_failure=snapshot.direct_failure,
            duration=timedelta(seconds=max(self._clock.monotonic() - started, 0.0)),
            snapshot=snapshot,
        )
        self._report = report
        logger.info(
            "buffered writer stopped: drained=%s unconfirmed=%d",
            report.drained,
            report.unconfirmed,
            extra={"timed_out": report.timed_out, "panicked": report.panicked},
        )
        return report

    # --- records --------------------------------------------------------------------

    async def record(self, record: T) -> RecordAdmission:
        """Offer one record.

        Returns ``QUEUED`` when it fits in the batch lane (memory only). When the lane
        is full: ``OverflowPolicy.REJECT`` raises :class:`RecordFullError`;
        ``DIRECT_WRITE`` takes the single overflow slot and waits for that one write
        (``DIRECT_PERSISTED``). Cancelling that wait does not cancel the write.

        Raises:
            RecordClosedError: Admission is closed; the record was not accepted.
            RecordFullError: No room (and no free overflow slot); not accepted.
            DirectWriteError: The overflow record was accepted but its write failed or
                the worker ended; the writer retains it.
        """
        core = self._core
        if not core.admission_open:
            raise RecordClosedError(record, core.lifecycle)
        if core.try_enqueue(record):
            return _QUEUED
        seq = core.try_occupy_direct(record)
        if seq is None:
            core.rejected_full += 1
            core.emit(BufferedWriterEventKind.REJECTED_FULL, records=1)
            raise RecordFullError(record)
        try:
            failure = await core.wait_direct(seq)
        except WriterQuarantinedError as exc:
            raise DirectWriteError(record, None, exc.cause) from exc
        if failure is not None:
            raise DirectWriteError(record, failure) from failure
        return RecordAdmission.DIRECT_PERSISTED

    async def flush(self, deadline: float) -> None:
        """Wait until every record accepted before this call is confirmed.

        The range is pinned when the call starts (both lanes separately); later
        records do not extend it and later failures do not affect it. A partial batch
        is forced out, cut at this range's end. Admission stays open. An expired
        deadline starts no forced write; an empty or confirmed range succeeds at once.

        Args:
            deadline: An absolute time in ``self.clock.monotonic()`` units.

        Raises:
            FlushTimeoutError: The deadline passed first.
            FlushFailedError: A write failure pauses a lane holding part of the range.
            WriterQuarantinedError: The worker panicked, was cancelled or stopped.
        """
        await self._core.flush(_checked_deadline(deadline))

    async def flush_within(self, budget: timedelta) -> None:
        """:meth:`flush` with a deadline ``budget`` from now."""
        await self.flush(self._clock.monotonic() + _checked_budget(budget))

    def retry_failed(self) -> frozenset[BufferedLane]:
        """Resume lanes paused by a RETRYABLE failure (the failed chunk is written again).

        PERMANENT and UNKNOWN_COMMIT failures, panics and cancelled writes are never
        resumed.

        Returns:
            The lanes resumed (empty when none).
        """
        return self._core.retry_failed()

    # --- views ----------------------------------------------------------------------

    def snapshot(self) -> BufferedWriterSnapshot[E]:
        """Return lifecycle, pending counts, confirmed counts and failures right now."""
        return self._core.snapshot()

    def unconfirmed(self) -> list[T]:
        """Return the original unconfirmed records: the batch lane in order, then direct.

        Read it after :meth:`stop` for a stable recovery snapshot.
        """
        core = self._core
        return [*core.queue, *core.direct_slot]

    def __repr__(self) -> str:
        core = self._core
        return (
            f"<ManagedBatchWriter {core.lifecycle.value} queued={len(core.queue)} "
            f"direct={len(core.direct_slot)}>"
        )
