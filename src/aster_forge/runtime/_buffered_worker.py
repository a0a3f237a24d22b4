"""The single worker of the buffered batch writer (private).

Functions over a :class:`_WriterCore`: pick the next ready write (alternating lanes),
perform it, yield to the loop, and on any exception quarantine and wake every waiter.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from ._buffered_core import (
    BufferedLane,
    BufferedWriterEventKind,
    BufferedWriterLifecycle,
    WriteFailure,
    _WriterCore,
)
from ._race import race

__all__ = ["quarantine", "run_worker"]

_Lifecycle = BufferedWriterLifecycle
_Kind = BufferedWriterEventKind


async def run_worker(core: _WriterCore[Any, Any]) -> None:
    """The single worker: supervised so every failure wakes every waiter."""
    try:
        await _loop(core)
    except asyncio.CancelledError:
        # Stop past its deadline, or the owner was dropped: an in-flight write has an
        # unknown outcome, so it stays unconfirmed and is never replayed.
        if core.in_flight or core.direct_in_flight:
            core.cancelled_in_flight = True
            quarantine(core, None)
        raise
    except Exception as exc:
        quarantine(core, exc)
    except BaseException as exc:
        quarantine(core, exc)
        raise
    finally:
        core.worker_exited = True
        core.admission_open = False
        core.notify()


def quarantine(core: _WriterCore[Any, Any], cause: BaseException | None) -> None:
    """Close admission and keep every unconfirmed record; nothing is ever replayed."""
    core.quarantined = True
    core.panic = cause
    core.admission_open = False
    core.in_flight = 0
    core.direct_in_flight = False
    if core.lifecycle is _Lifecycle.RUNNING:
        core.lifecycle = _Lifecycle.DRAINING
    core.emit(_Kind.QUARANTINED)


async def _loop(core: _WriterCore[Any, Any]) -> None:
    wake = core.wake
    assert wake is not None
    while True:
        wake.clear()
        now = core.clock.monotonic()
        batch_len = _batch_ready_len(core, now)
        direct_ready = bool(core.direct_slot) and core.direct_failure is None
        if batch_len and direct_ready:
            # Alternate so a stream of overflow records never starves the queue.
            lane = (
                BufferedLane.DIRECT if core.last_lane is BufferedLane.BATCH else BufferedLane.BATCH
            )
        elif batch_len:
            lane = BufferedLane.BATCH
        elif direct_ready:
            lane = BufferedLane.DIRECT
        else:
            if core.lifecycle is not _Lifecycle.RUNNING and not (core.queue or core.direct_slot):
                return
            timer = _timer_deadline(core)
            if timer is None:
                await wake.wait()
            else:
                await race(
                    wake.wait(),
                    seconds=timer - now,
                    clock=core.clock,
                    name="aster-forge:buffered-worker",
                )
            continue
        core.last_lane = lane
        if lane is BufferedLane.BATCH:
            await _write_batch(core, batch_len)
        else:
            await _write_direct(core)
        # Yield between batches even when the sink returns at once, so deadlines and
        # cancellation get scheduled (the seed's cooperative budget).
        await asyncio.sleep(0)


def _batch_ready_len(core: _WriterCore[Any, Any], now: float) -> int:
    size = len(core.queue)
    if size == 0 or core.batch_failure is not None:
        return 0
    if core.retry_chunk_len:
        return core.retry_chunk_len
    if size >= core.batch_size:
        return core.batch_size
    if core.lifecycle is not _Lifecycle.RUNNING:
        return size
    confirmed = core.batch_confirmed
    forced = [
        request.batch_watermark
        for request in core.flushes
        if request.batch_watermark > confirmed and request.deadline > now
    ]
    if forced:
        # Cut at the nearest requested watermark: no later record joins this write.
        return min(size, min(forced) - confirmed)
    if core.marks[0][1] + core.max_delay <= now:
        return size
    return 0


def _timer_deadline(core: _WriterCore[Any, Any]) -> float | None:
    if not core.queue or core.batch_failure is not None:
        return None
    return core.marks[0][1] + core.max_delay


async def _write_batch(core: _WriterCore[Any, Any], length: int) -> None:
    queue = core.queue
    chunk = list(itertools.islice(queue, length))
    core.in_flight = length
    try:
        await core.sink(chunk)
    except WriteFailure as failure:
        core.in_flight = 0
        core.batch_failure = failure
        core.failed_chunk_len = length
        core.retry_chunk_len = 0
        core.emit(_Kind.WRITE_FAILED, BufferedLane.BATCH, length, failure.failure_class)
        core.notify()
        return
    core.in_flight = 0
    core.retry_chunk_len = 0
    for _ in range(length):
        queue.popleft()
    confirmed = core.batch_confirmed + length
    core.batch_confirmed = confirmed
    core.batches_written += 1
    _prune_marks(core, confirmed)
    core.emit(_Kind.BATCH_WRITTEN, BufferedLane.BATCH, length)
    core.notify()


def _prune_marks(core: _WriterCore[Any, Any], first: int) -> None:
    marks = core.marks
    last: tuple[int, float] | None = None
    while marks and marks[0][0] < first:
        last = marks.popleft()
    if core.queue and last is not None and (not marks or marks[0][0] > first):
        # The remainder's oldest record is at least as old as the dropped mark says:
        # keeping that time can only write it sooner, never later than max_delay.
        marks.appendleft((first, last[1]))


async def _write_direct(core: _WriterCore[Any, Any]) -> None:
    record = core.direct_slot[0]
    core.direct_in_flight = True
    try:
        await core.sink([record])
    except WriteFailure as failure:
        core.direct_in_flight = False
        core.direct_failure = failure
        core.emit(_Kind.WRITE_FAILED, BufferedLane.DIRECT, 1, failure.failure_class)
        core.notify()
        return
    core.direct_in_flight = False
    core.direct_slot.clear()
    core.direct_confirmed += 1
    core.emit(_Kind.DIRECT_WRITTEN, BufferedLane.DIRECT, 1)
    core.notify()
