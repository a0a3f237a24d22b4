"""ManagedBatchWriter failures: retention, explicit retry, panics, quarantine, 9-class matrix."""

from __future__ import annotations

import asyncio
import itertools
from datetime import timedelta

import pytest

from aster_forge.runtime import OverflowPolicy, WriteFailure
from aster_forge.runtime._buffered_core import BufferedLane, RecordAdmission, WriteFailureClass
from aster_forge.runtime.errors import (
    DirectWriteError,
    FlushFailedError,
    RecordClosedError,
    WriterQuarantinedError,
)
from aster_forge.testing import ManualClock

from .test_buffered_support import FakeSink, Writer, make_writer, settle, stop_now

CLASSES = list(WriteFailureClass)


async def test_failed_chunk_and_later_records_stay_until_an_explicit_retry() -> None:
    sink = FakeSink()
    writer, _ = make_writer(sink, capacity=6, batch_size=2)
    await writer.start()
    for record in "abcde":
        await writer.record(record)
    call = await sink.wait_calls(1)
    call.fail(WriteFailureClass.RETRYABLE)
    await settle()
    assert len(sink.calls) == 1  # paused: no automatic retry, no later chunk either
    snapshot = writer.snapshot()
    assert snapshot.failed_chunk_len == 2 and snapshot.queued_pending == 5
    assert snapshot.batch_failure is not None
    assert isinstance(snapshot.batch_failure.error, RuntimeError)  # the original error
    assert writer.unconfirmed() == ["a", "b", "c", "d", "e"]
    assert writer.retry_failed() == frozenset({BufferedLane.BATCH})
    retried = await sink.wait_calls(2)
    assert retried.records == ["a", "b"]  # the same chunk, not merged with later records
    retried.succeed()
    (await sink.wait_calls(3)).succeed()
    await settle()
    assert sink.committed == ["a", "b", "c", "d"]
    assert writer.snapshot().failed_chunk_len == 0
    await stop_now(writer)


@pytest.mark.parametrize(
    "failure_class", [WriteFailureClass.PERMANENT, WriteFailureClass.UNKNOWN_COMMIT]
)
async def test_retry_failed_never_resumes_permanent_or_unknown_commit(
    failure_class: WriteFailureClass,
) -> None:
    sink = FakeSink()
    writer, _ = make_writer(sink, capacity=4, batch_size=2)
    await writer.start()
    await writer.record("a")
    await writer.record("b")
    (await sink.wait_calls(1)).fail(failure_class)
    await settle()
    assert writer.retry_failed() == frozenset()
    report = await writer.stop_within(timedelta(seconds=1))
    assert len(sink.calls) == 1
    assert report.batch_failure is not None and report.batch_failure.failure_class is failure_class
    assert writer.unconfirmed() == ["a", "b"]


def test_write_failure_keeps_class_and_original_error() -> None:
    original = ConnectionResetError("reset")
    failures = [
        WriteFailure.retryable(original),
        WriteFailure.permanent(original),
        WriteFailure.unknown_commit(original),
    ]
    assert [failure.failure_class for failure in failures] == CLASSES
    assert all(failure.error is original for failure in failures)
    assert [failure.retry_safe for failure in failures] == [True, False, False]


async def _writer_with_waiters(
    sink: FakeSink, clock: ManualClock | None = None
) -> tuple[Writer, asyncio.Task[RecordAdmission], asyncio.Task[None]]:
    writer, clock = make_writer(
        sink, capacity=3, batch_size=2, policy=OverflowPolicy.DIRECT_WRITE, clock=clock
    )
    await writer.start()
    for record in "abc":
        await writer.record(record)
    await sink.wait_calls(1)  # [a, b] parked, [c] queued
    direct = asyncio.create_task(writer.record("d"), name="direct-d")
    flush = asyncio.create_task(writer.flush(clock.monotonic() + 100), name="flush")
    await settle()
    return writer, direct, flush


async def test_sink_exception_quarantines_and_wakes_every_waiter() -> None:
    sink = FakeSink()
    writer, direct, flush = await _writer_with_waiters(sink)
    assert not direct.done() and not flush.done()
    sink.calls[0].panic()
    with pytest.raises(WriterQuarantinedError) as flushed:
        await flush
    assert isinstance(flushed.value.cause, ZeroDivisionError)
    with pytest.raises(DirectWriteError) as directed:
        await direct
    assert directed.value.record == "d" and directed.value.failure is None
    assert isinstance(directed.value.cause, ZeroDivisionError)
    snapshot = writer.snapshot()
    assert snapshot.quarantined and not snapshot.admission_open
    assert isinstance(snapshot.panic, ZeroDivisionError)
    with pytest.raises(RecordClosedError):
        await writer.record("e")
    assert writer.retry_failed() == frozenset()
    report = await writer.stop_within(timedelta(seconds=1))
    assert report.panicked and not report.drained
    assert writer.unconfirmed() == ["a", "b", "c", "d"]
    assert len(sink.calls) == 1  # nothing replayed, nothing else written


class _ClockBrokeError(Exception):
    pass


class _ExplodingClock(ManualClock):
    """Raises inside the worker task (code outside the sink) once armed."""

    armed = False

    def monotonic(self) -> float:
        task = asyncio.current_task()
        if self.armed and task is not None and task.get_name() == "aster-forge:buffered-worker":
            raise _ClockBrokeError("clock broke")
        return super().monotonic()


async def test_worker_exception_outside_the_sink_quarantines_and_wakes_every_waiter() -> None:
    sink = FakeSink()
    clock = _ExplodingClock()
    writer, direct, flush = await _writer_with_waiters(sink, clock)
    clock.armed = True
    sink.calls[0].succeed()
    with pytest.raises(WriterQuarantinedError) as flushed:
        await flush
    assert isinstance(flushed.value.cause, _ClockBrokeError)
    with pytest.raises(DirectWriteError) as directed:
        await direct
    assert isinstance(directed.value.cause, _ClockBrokeError)
    clock.armed = False
    report = await writer.stop_within(timedelta(seconds=1))
    assert report.panicked
    assert writer.unconfirmed() == ["c", "d"]
    assert sink.committed == ["a", "b"] and len(sink.calls) == 1


class _FatalError(BaseException):
    pass


async def test_base_exception_from_the_sink_also_wakes_waiters() -> None:
    sink = FakeSink()
    writer, direct, flush = await _writer_with_waiters(sink)
    sink.calls[0].panic(_FatalError())
    with pytest.raises(WriterQuarantinedError):
        await flush
    with pytest.raises(DirectWriteError):
        await direct
    report = await writer.stop_within(timedelta(seconds=1))
    assert report.panicked and report.snapshot.quarantined


async def test_cancelling_a_direct_waiter_does_not_cancel_the_write() -> None:
    sink = FakeSink()
    writer, _ = make_writer(sink, capacity=2, batch_size=2, policy=OverflowPolicy.DIRECT_WRITE)
    await writer.start()
    await writer.record("a")
    await writer.record("b")
    batch = await sink.wait_calls(1)
    direct = asyncio.create_task(writer.record("c"), name="direct-c")
    await settle()
    direct.cancel()
    with pytest.raises(asyncio.CancelledError):
        await direct
    batch.succeed()
    (await sink.wait_calls(2)).succeed()
    report = await writer.stop_within(timedelta(seconds=1))
    assert report.drained and sink.committed == ["a", "b", "c"]


async def test_direct_write_failure_keeps_the_record_for_retry() -> None:
    sink = FakeSink()
    writer, _ = make_writer(sink, capacity=1, batch_size=1, policy=OverflowPolicy.DIRECT_WRITE)
    await writer.start()
    await writer.record("a")
    batch = await sink.wait_calls(1)
    direct = asyncio.create_task(writer.record("b"), name="direct-b")
    await settle()
    batch.succeed()
    (await sink.wait_calls(2)).fail(WriteFailureClass.RETRYABLE)
    with pytest.raises(DirectWriteError) as caught:
        await direct
    assert caught.value.failure is not None
    assert caught.value.failure.failure_class is WriteFailureClass.RETRYABLE
    assert writer.unconfirmed() == ["b"]
    assert writer.retry_failed() == frozenset({BufferedLane.DIRECT})
    (await sink.wait_calls(3)).succeed()
    report = await writer.stop_within(timedelta(seconds=1))
    assert report.drained and sink.committed == ["a", "b"]


@pytest.mark.parametrize(
    ("batch_class", "direct_class"),
    list(itertools.product(CLASSES, CLASSES)),
    ids=lambda item: item.value,
)
async def test_both_lanes_failing_matrix(
    batch_class: WriteFailureClass, direct_class: WriteFailureClass
) -> None:
    sink = FakeSink()
    writer, clock = make_writer(sink, capacity=2, batch_size=2, policy=OverflowPolicy.DIRECT_WRITE)
    await writer.start()
    await writer.record("a")
    await writer.record("b")
    batch_call = await sink.wait_calls(1)
    direct = asyncio.create_task(writer.record("c"), name="direct-c")
    await settle()
    batch_call.fail(batch_class)
    (await sink.wait_calls(2)).fail(direct_class)
    with pytest.raises(DirectWriteError) as caught:
        await direct
    assert caught.value.failure is not None
    assert caught.value.failure.failure_class is direct_class
    with pytest.raises(FlushFailedError) as flushed:
        await writer.flush(clock.monotonic() + 5)
    assert flushed.value.batch_failure is not None and flushed.value.direct_failure is not None
    assert flushed.value.batch_failure.failure_class is batch_class
    assert flushed.value.direct_failure.failure_class is direct_class

    retryable = WriteFailureClass.RETRYABLE
    expected = {BufferedLane.BATCH} if batch_class is retryable else set()
    expected |= {BufferedLane.DIRECT} if direct_class is retryable else set()
    assert writer.retry_failed() == expected
    for index in range(len(expected)):
        (await sink.wait_calls(3 + index)).succeed()
    report = await writer.stop_within(timedelta(seconds=5))
    await settle()

    assert len(sink.calls) == 2 + len(expected)
    sends = {record: sum(record in call.records for call in sink.calls) for record in "abc"}
    for records, cls in (("ab", batch_class), ("c", direct_class)):
        for record in records:
            # Only RETRYABLE records are sent twice; the rest exactly once.
            assert sends[record] == (2 if cls is retryable else 1)
    # UNKNOWN_COMMIT records that did commit are never committed twice.
    assert len(sink.committed) == len(set(sink.committed))
    leftover = [
        *("ab" if batch_class is not retryable else ""),
        *("c" if direct_class is not retryable else ""),
    ]
    assert writer.unconfirmed() == leftover
    assert report.drained is (not leftover)
    assert writer.retry_failed() == frozenset()
