"""ManagedBatchWriter: config, lifecycle, admission, capacity, threshold, delay, lanes."""

from __future__ import annotations

import asyncio
import gc
import itertools
from datetime import timedelta

import pytest

from aster_forge.runtime import BufferedBatchConfig, ManagedBatchWriter, OverflowPolicy
from aster_forge.runtime._buffered_core import (
    BufferedLane,
    BufferedWriterEvent,
    BufferedWriterEventKind,
    BufferedWriterLifecycle,
    RecordAdmission,
)
from aster_forge.runtime.errors import (
    InvalidBufferedConfigError,
    RecordClosedError,
    RecordFullError,
    WriterLifecycleError,
)

from .test_buffered_support import FakeSink, Writer, make_writer, settle, stop_now


def test_config_normalises_zero_capacity_and_batch_size_to_one() -> None:
    config = BufferedBatchConfig(0, 0, timedelta(0))
    assert (config.capacity, config.batch_size, config.max_delay_seconds) == (1, 1, 0.0)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"capacity": -1}, "capacity"),
        ({"batch_size": -5}, "batch_size"),
        ({"capacity": 2.5}, "capacity"),
        ({"capacity": True}, "capacity"),
        ({"max_delay": timedelta(seconds=-1)}, "max_delay"),
        ({"max_delay": 1.0}, "max_delay"),
    ],
)
def test_config_rejects_bad_values_naming_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidBufferedConfigError, match=field):
        BufferedBatchConfig(**kwargs)  # type: ignore[arg-type]


def test_constructor_needs_no_event_loop_and_starts_nothing() -> None:
    # A plain (sync) test: no loop is running, so any task or timer would fail here.
    sink = FakeSink()
    writer, _ = make_writer(sink)
    snapshot = writer.snapshot()
    assert snapshot.lifecycle is BufferedWriterLifecycle.CREATED
    assert not snapshot.admission_open
    assert sink.calls == []


def test_constructor_rejects_wrong_argument_types() -> None:
    config = BufferedBatchConfig()
    with pytest.raises(TypeError, match="overflow_policy"):
        ManagedBatchWriter(config, "reject", None, FakeSink())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="observer"):
        ManagedBatchWriter(config, OverflowPolicy.REJECT, [], FakeSink())  # type: ignore[arg-type]


async def test_record_before_start_is_refused_with_the_record() -> None:
    writer, _ = make_writer(FakeSink())
    with pytest.raises(RecordClosedError) as caught:
        await writer.record("a")
    assert caught.value.record == "a"
    assert caught.value.lifecycle is BufferedWriterLifecycle.CREATED


async def test_start_is_allowed_once() -> None:
    writer, _ = make_writer(FakeSink())
    await writer.start()
    assert writer.lifecycle is BufferedWriterLifecycle.RUNNING
    with pytest.raises(WriterLifecycleError):
        await writer.start()
    await stop_now(writer)
    with pytest.raises(WriterLifecycleError):
        await writer.start()


async def test_stop_before_start_stops_without_a_worker() -> None:
    writer, _ = make_writer(FakeSink())
    report = await writer.stop_within(timedelta(seconds=1))
    assert report.drained and writer.lifecycle is BufferedWriterLifecycle.STOPPED


async def test_threshold_flushes_at_once_without_time_passing() -> None:
    sink = FakeSink()
    writer, _ = make_writer(sink, capacity=10, batch_size=2)
    await writer.start()
    assert await writer.record("a") is RecordAdmission.QUEUED
    await settle()
    assert sink.calls == []
    await writer.record("b")
    call = await sink.wait_calls(1)
    assert call.records == ["a", "b"]
    call.succeed()
    await stop_now(writer)


async def test_partial_batch_waits_max_delay_from_its_first_record() -> None:
    sink = FakeSink()
    writer, clock = make_writer(sink, capacity=10, batch_size=3, max_delay=1.0)
    await writer.start()
    await writer.record("a")
    await clock.wait_for_sleepers(1)
    # Binary-exact steps, so float rounding never decides the test.
    await clock.advance(0.5)
    await writer.record("b")
    await clock.advance(0.25)
    assert sink.calls == []
    await clock.advance(0.25)
    call = await sink.wait_calls(1)
    assert call.records == ["a", "b"]
    call.succeed()
    await settle()
    # The next partial batch is timed from its own first record.
    await clock.advance(0.5)
    await writer.record("c")
    await clock.wait_for_sleepers(1)
    await clock.advance(0.75)
    assert len(sink.calls) == 1
    await clock.advance(0.25)
    assert (await sink.wait_calls(2)).records == ["c"]
    sink.calls[1].succeed()
    await stop_now(writer)


async def test_each_sink_call_gets_at_most_batch_size_records() -> None:
    sink = FakeSink()
    writer, clock = make_writer(sink, capacity=10, batch_size=3, max_delay=1.0)
    await writer.start()
    for index in range(8):
        await writer.record(f"r{index}")
    for expected in (1, 2):
        (await sink.wait_calls(expected)).succeed()
    await clock.advance(1.0)
    (await sink.wait_calls(3)).succeed()
    await settle()
    assert sink.batches == [["r0", "r1", "r2"], ["r3", "r4", "r5"], ["r6", "r7"]]
    assert all(len(batch) <= 3 for batch in sink.batches)
    await stop_now(writer)


async def test_capacity_counts_the_batch_being_written() -> None:
    sink = FakeSink()
    writer, _ = make_writer(sink, capacity=2, batch_size=2)
    await writer.start()
    await writer.record("a")
    await writer.record("b")
    call = await sink.wait_calls(1)
    snapshot = writer.snapshot()
    assert (snapshot.queued_pending, snapshot.in_flight) == (2, 2)
    with pytest.raises(RecordFullError) as caught:
        await writer.record("c")
    assert caught.value.record == "c"
    assert writer.snapshot().rejected_full == 1
    call.succeed()
    await settle()
    assert await writer.record("c") is RecordAdmission.QUEUED
    await stop_now(writer)


async def test_zero_capacity_and_batch_size_hold_exactly_one_record() -> None:
    sink = FakeSink()
    writer, _ = make_writer(sink, capacity=0, batch_size=0)
    await writer.start()
    await writer.record("a")
    assert (await sink.wait_calls(1)).records == ["a"]
    with pytest.raises(RecordFullError):
        await writer.record("b")
    sink.calls[0].succeed()
    await stop_now(writer)


async def test_direct_write_uses_a_single_bounded_overflow_slot() -> None:
    sink = FakeSink()
    writer, _ = make_writer(sink, capacity=2, batch_size=2, policy=OverflowPolicy.DIRECT_WRITE)
    await writer.start()
    await writer.record("a")
    await writer.record("b")
    batch = await sink.wait_calls(1)
    direct = asyncio.create_task(writer.record("c"), name="direct-c")
    await settle()
    assert not direct.done()
    assert writer.snapshot().direct_pending == 1
    with pytest.raises(RecordFullError):  # slot taken: no extra task, no waiting queue
        await writer.record("d")
    batch.succeed()
    direct_call = await sink.wait_calls(2)
    assert direct_call.records == ["c"]
    assert not direct.done()
    direct_call.succeed()
    assert await direct is RecordAdmission.DIRECT_PERSISTED
    snapshot = writer.snapshot()
    assert (snapshot.direct_accepted, snapshot.direct_confirmed) == (1, 1)
    await stop_now(writer)


async def test_ready_batches_and_direct_lane_alternate() -> None:
    sink = FakeSink()
    writer, _ = make_writer(sink, capacity=4, batch_size=2, policy=OverflowPolicy.DIRECT_WRITE)
    await writer.start()
    for record in "abcd":
        await writer.record(record)
    first = await sink.wait_calls(1)  # [a, b] in flight, [c, d] ready behind it
    direct_e = asyncio.create_task(writer.record("e"), name="direct-e")
    await settle()
    first.succeed()
    (await sink.wait_calls(2)).succeed()  # the direct lane goes next: [e]
    third = await sink.wait_calls(3)  # then the ready batch [c, d]
    await direct_e
    for record in "fg":
        await writer.record(record)
    direct_h = asyncio.create_task(writer.record("h"), name="direct-h")
    await settle()
    third.succeed()
    (await sink.wait_calls(4)).succeed()
    (await sink.wait_calls(5)).succeed()
    await direct_h
    assert sink.batches == [["a", "b"], ["e"], ["c", "d"], ["h"], ["f", "g"]]
    await stop_now(writer)


async def test_worker_yields_to_the_loop_between_batches() -> None:
    ticks = 0
    seen: list[int] = []

    async def instant_sink(records: list[str]) -> None:
        seen.append(ticks)

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    config = BufferedBatchConfig(100, 2, timedelta(seconds=10))
    writer: Writer = ManagedBatchWriter(config, OverflowPolicy.REJECT, None, instant_sink)
    await writer.start()
    for index in range(20):
        await writer.record(f"r{index}")
    tick_task = asyncio.create_task(ticker(), name="ticker")
    await writer.flush_within(timedelta(seconds=5))
    tick_task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await tick_task
    assert len(seen) == 10
    # Another task ran between every two batches although the sink never suspended.
    assert all(later > earlier for earlier, later in itertools.pairwise(seen))
    await stop_now(writer)


async def test_begin_drain_closes_admission_and_writes_partial_batch_now() -> None:
    sink = FakeSink()
    writer, _ = make_writer(sink, capacity=10, batch_size=5)
    await writer.start()
    await writer.record("a")
    writer.begin_drain()
    assert writer.lifecycle is BufferedWriterLifecycle.DRAINING
    with pytest.raises(RecordClosedError) as caught:
        await writer.record("b")
    assert caught.value.lifecycle is BufferedWriterLifecycle.DRAINING
    call = await sink.wait_calls(1)
    assert call.records == ["a"]
    call.succeed()
    report = await writer.stop_within(timedelta(seconds=1))
    assert report.drained and not report.timed_out


class _BrokenQueue(asyncio.Queue[BufferedWriterEvent]):
    def put_nowait(self, item: BufferedWriterEvent) -> None:
        raise RuntimeError("consumer is gone")


@pytest.mark.parametrize("broken", [False, True])
async def test_full_or_broken_observer_only_counts_dropped_events(broken: bool) -> None:
    observer: asyncio.Queue[BufferedWriterEvent] = (
        _BrokenQueue(maxsize=1) if broken else asyncio.Queue(maxsize=1)
    )
    sink = FakeSink(auto=True)
    writer, _ = make_writer(sink, capacity=10, batch_size=1, observer=observer)
    await writer.start()
    for index in range(3):
        await writer.record(f"r{index}")
    await writer.flush_within(timedelta(seconds=5))
    report = await writer.stop_within(timedelta(seconds=1))
    assert sink.committed == ["r0", "r1", "r2"] and report.drained
    # STARTED, 3 x BATCH_WRITTEN, DRAINING, STOPPED were offered; the queue holds one.
    taken = 0 if broken else 1
    assert report.snapshot.observer_events_dropped == 6 - taken
    if not broken:
        assert observer.get_nowait().kind is BufferedWriterEventKind.STARTED


async def test_observer_receives_lane_events() -> None:
    observer: asyncio.Queue[BufferedWriterEvent] = asyncio.Queue(maxsize=100)
    writer, _ = make_writer(FakeSink(auto=True), capacity=4, batch_size=2, observer=observer)
    await writer.start()
    await writer.record("a")
    await writer.record("b")
    await writer.flush_within(timedelta(seconds=5))
    await writer.stop_within(timedelta(seconds=1))
    events = [observer.get_nowait() for _ in range(observer.qsize())]
    assert [event.kind for event in events] == [
        BufferedWriterEventKind.STARTED,
        BufferedWriterEventKind.BATCH_WRITTEN,
        BufferedWriterEventKind.DRAINING,
        BufferedWriterEventKind.STOPPED,
    ]
    assert (events[1].lane, events[1].records) == (BufferedLane.BATCH, 2)


async def test_dropping_the_owner_without_stop_cancels_the_worker() -> None:
    sink = FakeSink()
    writer, _ = make_writer(sink, capacity=4, batch_size=2)
    await writer.start()
    (worker,) = [t for t in asyncio.all_tasks() if t.get_name() == "aster-forge:buffered-worker"]
    await writer.record("a")
    await writer.record("b")
    await sink.wait_calls(1)
    del writer
    gc.collect()
    await settle()
    assert worker.cancelled()
    assert sink.cancelled_calls == 1  # the in-flight write was abandoned, not completed
    assert sink.committed == []


async def test_deadlines_and_budgets_are_type_checked() -> None:
    writer, _ = make_writer(FakeSink())
    with pytest.raises(TypeError, match="deadline"):
        await writer.flush("soon")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="NaN"):
        await writer.flush(float("nan"))
    with pytest.raises(TypeError, match="budget"):
        await writer.flush_within(5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="deadline"):
        await writer.stop(True)


async def test_begin_drain_before_start_is_a_no_op_and_repr_names_the_state() -> None:
    writer, _ = make_writer(FakeSink())
    writer.begin_drain()
    assert writer.lifecycle is BufferedWriterLifecycle.CREATED
    assert "created" in repr(writer) and "queued=0" in repr(writer)
    assert writer.config.capacity == 4


async def test_stop_after_the_worker_drained_by_itself_reports_drained() -> None:
    sink = FakeSink(auto=True)
    writer, _ = make_writer(sink, capacity=4, batch_size=2)
    await writer.start()
    (worker,) = [t for t in asyncio.all_tasks() if t.get_name() == "aster-forge:buffered-worker"]
    await writer.record("a")
    writer.begin_drain()
    await settle()
    assert worker.done()  # draining with nothing left: the worker ended on its own
    report = await writer.stop_within(timedelta(0))
    assert report.drained and not report.worker_cancelled and sink.committed == ["a"]
