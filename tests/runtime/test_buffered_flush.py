"""ManagedBatchWriter.flush/stop: pinned ranges, watermark cuts, deadlines, cancellation."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from aster_forge.runtime import OverflowPolicy
from aster_forge.runtime._buffered_core import (
    BufferedWriterLifecycle,
    RecordAdmission,
    WriteFailureClass,
)
from aster_forge.runtime.errors import FlushFailedError, FlushTimeoutError

from .test_buffered_support import FakeSink, make_writer, settle, stop_now


async def test_empty_range_succeeds_at_once_even_with_an_expired_deadline() -> None:
    sink = FakeSink()
    writer, clock = make_writer(sink)
    await writer.flush(clock.monotonic())  # not even started: nothing accepted
    await writer.start()
    await writer.flush(clock.monotonic() - 10)
    assert sink.calls == []
    await stop_now(writer)


async def test_confirmed_range_succeeds_at_once_with_an_expired_deadline() -> None:
    sink = FakeSink()
    writer, clock = make_writer(sink, capacity=4, batch_size=2)
    await writer.start()
    await writer.record("a")
    await writer.record("b")
    (await sink.wait_calls(1)).succeed()
    await settle()
    await writer.flush(clock.monotonic())
    await stop_now(writer)


async def test_expired_deadline_starts_no_forced_write() -> None:
    sink = FakeSink()
    writer, clock = make_writer(sink, capacity=4, batch_size=3)
    await writer.start()
    await writer.record("a")
    with pytest.raises(FlushTimeoutError) as caught:
        await writer.flush(clock.monotonic())
    assert (caught.value.batch_remaining, caught.value.direct_remaining) == (1, 0)
    await settle()
    assert sink.calls == []
    await stop_now(writer)


async def test_deadline_expiring_while_busy_starts_no_forced_write_afterwards() -> None:
    sink = FakeSink()
    writer, clock = make_writer(sink, capacity=6, batch_size=2, max_delay=100.0)
    await writer.start()
    for record in "abc":
        await writer.record(record)
    busy = await sink.wait_calls(1)  # [a, b] parked; [c] is a partial batch
    flush = asyncio.create_task(writer.flush(clock.monotonic() + 1), name="flush")
    await clock.wait_for_sleepers(1)  # the flush; the worker is busy, not timing [c]
    await clock.advance(1)
    with pytest.raises(FlushTimeoutError):
        await flush
    busy.succeed()
    await settle()
    assert len(sink.calls) == 1  # [c] waits for its max_delay, not for the dead flush
    await stop_now(writer)


async def test_forced_partial_batch_is_cut_at_the_flush_watermark() -> None:
    sink = FakeSink()
    writer, clock = make_writer(sink, capacity=10, batch_size=5)
    await writer.start()
    await writer.record("a")
    await writer.record("b")
    flush = asyncio.create_task(writer.flush(clock.monotonic() + 5), name="flush")
    await asyncio.sleep(0)  # the flush pins [a, b] and asks the worker to force them
    await writer.record("c")  # queued before the worker runs, still not in the write
    call = await sink.wait_calls(1)
    assert call.records == ["a", "b"]
    await writer.record("d")
    call.succeed()
    await flush  # later admissions did not extend the wait
    await settle()
    assert len(sink.calls) == 1
    assert writer.snapshot().queued_pending == 2
    await stop_now(writer)


async def test_concurrent_flushes_wait_for_their_own_ranges() -> None:
    sink = FakeSink()
    writer, clock = make_writer(sink, capacity=10, batch_size=10)
    await writer.start()
    await writer.record("a")
    first = asyncio.create_task(writer.flush(clock.monotonic() + 5), name="flush-1")
    call_a = await sink.wait_calls(1)
    await writer.record("b")
    await writer.record("c")
    second = asyncio.create_task(writer.flush(clock.monotonic() + 5), name="flush-2")
    await settle()
    assert call_a.records == ["a"]
    call_a.succeed()
    await first
    call_bc = await sink.wait_calls(2)
    assert call_bc.records == ["b", "c"]
    assert not second.done()
    call_bc.succeed()
    await second
    await stop_now(writer)


async def test_threshold_writes_continue_while_a_flush_waits() -> None:
    sink = FakeSink()
    writer, clock = make_writer(sink, capacity=10, batch_size=2)
    await writer.start()
    await writer.record("a")
    flush = asyncio.create_task(writer.flush(clock.monotonic() + 5), name="flush")
    call_a = await sink.wait_calls(1)
    await writer.record("b")
    await writer.record("c")
    call_a.succeed()
    await flush
    call_bc = await sink.wait_calls(2)  # a normal threshold write, no flush involved
    assert call_bc.records == ["b", "c"]
    call_bc.succeed()
    await stop_now(writer)


async def test_later_failures_do_not_pollute_an_earlier_confirmed_flush() -> None:
    sink = FakeSink()
    writer, clock = make_writer(sink, capacity=10, batch_size=1)
    await writer.start()
    await writer.record("a")
    call_a = await sink.wait_calls(1)
    early = asyncio.create_task(writer.flush(clock.monotonic() + 5), name="early")
    await asyncio.sleep(0)  # the range is pinned when the flush first runs: [a]
    await writer.record("b")
    late = asyncio.create_task(writer.flush(clock.monotonic() + 5), name="late")
    await settle()
    call_a.succeed()
    (await sink.wait_calls(2)).fail(WriteFailureClass.PERMANENT)
    await early
    with pytest.raises(FlushFailedError) as caught:
        await late
    assert caught.value.batch_failure is not None and caught.value.direct_failure is None
    await stop_now(writer)


async def test_flush_drains_the_healthy_lane_when_the_other_fails() -> None:
    sink = FakeSink()
    writer, clock = make_writer(sink, capacity=1, batch_size=1, policy=OverflowPolicy.DIRECT_WRITE)
    await writer.start()
    await writer.record("a")
    call_a = await sink.wait_calls(1)
    direct = asyncio.create_task(writer.record("b"), name="direct-b")
    await settle()
    flush = asyncio.create_task(writer.flush(clock.monotonic() + 5), name="flush")
    await settle()
    call_a.fail(WriteFailureClass.RETRYABLE)
    call_b = await sink.wait_calls(2)
    assert call_b.records == ["b"]
    await settle()
    assert not flush.done()  # still draining the direct lane's part of the range
    call_b.succeed()
    with pytest.raises(FlushFailedError) as caught:
        await flush
    assert caught.value.batch_failure is not None
    assert caught.value.direct_failure is None
    assert await direct is RecordAdmission.DIRECT_PERSISTED
    await stop_now(writer)


async def test_flush_times_out_when_the_sink_is_slow() -> None:
    sink = FakeSink()
    writer, clock = make_writer(sink, capacity=4, batch_size=2)
    await writer.start()
    await writer.record("a")
    await writer.record("b")
    call = await sink.wait_calls(1)
    flush = asyncio.create_task(writer.flush_within(timedelta(seconds=2)), name="flush")
    await clock.wait_for_sleepers(1)
    await clock.advance(2)
    with pytest.raises(FlushTimeoutError) as caught:
        await flush
    assert caught.value.batch_remaining == 2
    call.succeed()
    await settle()
    assert writer.snapshot().batch_confirmed == 2  # the timeout dropped nothing
    await stop_now(writer)


async def test_cancelling_a_flush_drops_no_record() -> None:
    sink = FakeSink()
    writer, clock = make_writer(sink, capacity=4, batch_size=3)
    await writer.start()
    await writer.record("a")
    flush = asyncio.create_task(writer.flush(clock.monotonic() + 5), name="flush")
    call = await sink.wait_calls(1)
    flush.cancel()
    with pytest.raises(asyncio.CancelledError):
        await flush
    call.succeed()
    report = await writer.stop_within(timedelta(seconds=5))
    assert report.drained and sink.committed == ["a"]


async def test_stop_drains_partial_batches_then_joins() -> None:
    sink = FakeSink()
    writer, _ = make_writer(sink, capacity=10, batch_size=4)
    await writer.start()
    for record in "abcdef":
        await writer.record(record)
    stop = asyncio.create_task(writer.stop_within(timedelta(seconds=5)), name="stop")
    (await sink.wait_calls(1)).succeed()
    (await sink.wait_calls(2)).succeed()
    report = await stop
    assert sink.batches == [["a", "b", "c", "d"], ["e", "f"]]
    assert report.drained and not report.timed_out and not report.worker_cancelled
    assert writer.lifecycle is BufferedWriterLifecycle.STOPPED
    assert writer.unconfirmed() == []


async def test_concurrent_stops_share_one_join_and_report() -> None:
    sink = FakeSink()
    writer, _ = make_writer(sink, capacity=4, batch_size=2)
    await writer.start()
    await writer.record("a")
    await writer.record("b")
    call = await sink.wait_calls(1)
    stops = [
        asyncio.create_task(writer.stop_within(timedelta(seconds=5)), name=f"stop-{index}")
        for index in range(3)
    ]
    await settle()
    assert not any(stop.done() for stop in stops)
    call.succeed()
    reports = [await stop for stop in stops]
    assert reports[0] is reports[1] is reports[2]
    assert reports[0].drained
    assert await writer.stop_within(timedelta(0)) is reports[0]


async def test_cancelling_stop_drops_nothing_and_a_later_stop_joins() -> None:
    sink = FakeSink()
    writer, _ = make_writer(sink, capacity=4, batch_size=2)
    await writer.start()
    await writer.record("a")
    await writer.record("b")
    call = await sink.wait_calls(1)
    stop = asyncio.create_task(writer.stop_within(timedelta(seconds=5)), name="stop")
    await settle()
    stop.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stop
    assert writer.lifecycle is BufferedWriterLifecycle.DRAINING
    call.succeed()
    report = await writer.stop_within(timedelta(seconds=5))
    assert report.drained and sink.committed == ["a", "b"]


async def test_stop_past_its_deadline_cancels_the_write_and_keeps_the_records() -> None:
    sink = FakeSink()
    writer, clock = make_writer(sink, capacity=4, batch_size=2)
    await writer.start()
    for record in "abc":
        await writer.record(record)
    await sink.wait_calls(1)
    stop = asyncio.create_task(writer.stop(clock.monotonic() + 5), name="stop")
    await clock.wait_for_sleepers(1)
    await clock.advance(5)
    report = await stop
    assert report.timed_out and report.worker_cancelled and not report.drained
    assert sink.cancelled_calls == 1
    assert writer.unconfirmed() == ["a", "b", "c"]  # the original records, never replayed
    assert report.unconfirmed == 3
    assert writer.retry_failed() == frozenset()
    assert len(sink.calls) == 1
