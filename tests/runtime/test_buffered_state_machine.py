"""Hypothesis state machine: random record/flush/fail/retry/stop sequences on one writer.

Each step runs on a private event loop (``asyncio.Runner``) owned by the machine, so
background tasks (worker, waiters) advance only inside steps and no real time passes.

Invariants: no accepted record is lost; none is written twice unless a RETRYABLE
failure allowed it; capacity is never exceeded; every waiter is woken by the end.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from aster_forge.runtime import OverflowPolicy
from aster_forge.runtime._buffered_core import BufferedWriterStopReport, WriteFailureClass
from aster_forge.runtime.errors import RecordClosedError, RecordFullError
from aster_forge.testing import ManualClock

from .test_buffered_support import FakeSink, SinkCall, make_writer, settle

CAPACITY = 4
BATCH_SIZE = 2
OUTCOMES = ["ok", "ok", "ok", *(cls.value for cls in WriteFailureClass), "panic"]


class BufferedWriterMachine(RuleBasedStateMachine):
    """Drives one writer with random producer, sink, clock and owner actions."""

    def __init__(self) -> None:
        super().__init__()
        # A loop factory keeps the Runner from replacing (and leaking) the policy's
        # current loop, which pytest-asyncio owns.
        self.runner = asyncio.Runner(loop_factory=asyncio.new_event_loop)
        self.sink = FakeSink()
        self.clock = ManualClock()
        self.writer, _ = make_writer(
            self.sink,
            capacity=CAPACITY,
            batch_size=BATCH_SIZE,
            max_delay=1.0,
            policy=OverflowPolicy.DIRECT_WRITE,
            clock=self.clock,
        )
        self.accepted: list[str] = []
        self.waiters: list[asyncio.Task[Any]] = []
        self.stop_task: asyncio.Task[BufferedWriterStopReport[Exception]] | None = None
        self.counter = 0
        self._run(self.writer.start())

    def _run(self, coro: Any) -> Any:
        async def step() -> Any:
            result = await coro
            await settle(30)
            return result

        return self.runner.run(step())

    def _pending_calls(self) -> list[SinkCall]:
        return [call for call in self.sink.calls if not call.outcome.done()]

    # --- rules ----------------------------------------------------------------------

    @rule()
    def record(self) -> None:
        name = f"r{self.counter}"
        self.counter += 1

        async def offer() -> asyncio.Task[Any]:
            return asyncio.create_task(self.writer.record(name), name=f"record-{name}")

        task: asyncio.Task[Any] = self._run(offer())
        if task.done() and isinstance(task.exception(), RecordFullError | RecordClosedError):
            return  # refused: the caller still owns it
        self.accepted.append(name)
        if not task.done():
            self.waiters.append(task)  # a direct-write waiter

    @precondition(lambda self: bool(self._pending_calls()))
    @rule(outcome=st.sampled_from(OUTCOMES))
    def resolve_oldest_call(self, outcome: str) -> None:
        call = self._pending_calls()[0]
        if outcome == "ok":
            call.succeed()
        elif outcome == "panic":
            call.panic()
        else:
            call.fail(WriteFailureClass(outcome))
        self._run(settle())

    @rule(seconds=st.sampled_from([0.25, 0.5, 1.0]))
    def advance_clock(self, seconds: float) -> None:
        self._run(self.clock.advance(seconds))

    @rule(budget=st.sampled_from([0.0, 0.5, 2.0]))
    def flush(self, budget: float) -> None:
        async def start() -> asyncio.Task[None]:
            deadline = self.clock.monotonic() + budget
            return asyncio.create_task(self.writer.flush(deadline), name="flush")

        self.waiters.append(self._run(start()))

    @rule()
    def retry_failed(self) -> None:
        before = self.writer.snapshot()
        resumed = self.writer.retry_failed()
        for lane, failure in (("batch", before.batch_failure), ("direct", before.direct_failure)):
            was_retryable = failure is not None and failure.retry_safe
            assert (lane in {item.value for item in resumed}) == (
                was_retryable and not self.writer_exited()
            )
        self._run(settle())

    @precondition(lambda self: self.stop_task is None)
    @rule(budget=st.sampled_from([0.0, 1.0]))
    def stop(self, budget: float) -> None:
        async def start() -> asyncio.Task[BufferedWriterStopReport[Exception]]:
            deadline = self.clock.monotonic() + budget
            return asyncio.create_task(self.writer.stop(deadline), name="stop")

        self.stop_task = self._run(start())

    def writer_exited(self) -> bool:
        return self.writer._core.worker_exited

    # --- invariants -----------------------------------------------------------------

    @invariant()
    def capacity_is_never_exceeded(self) -> None:
        snapshot = self.writer.snapshot()
        assert snapshot.queued_pending <= CAPACITY
        assert snapshot.direct_pending <= 1
        assert all(len(call.records) <= BATCH_SIZE for call in self.sink.calls)

    @invariant()
    def no_record_is_sent_twice_without_a_retryable_failure(self) -> None:
        sent: Counter[str] = Counter()
        allowed: Counter[str] = Counter()
        for call in self.sink.calls:
            sent.update(call.records)
            if call.result == WriteFailureClass.RETRYABLE.value:
                allowed.update(call.records)
        for record, count in sent.items():
            assert count <= 1 + allowed[record], f"{record} sent {count} times"

    # --- end of a run ---------------------------------------------------------------

    def teardown(self) -> None:
        try:
            self._finish()
        finally:
            self.runner.close()

    def _finish(self) -> None:
        if self.stop_task is None:
            self.stop(1.0)
        for _ in range(50):
            assert self.stop_task is not None
            if self.stop_task.done():
                break
            for call in self._pending_calls():
                call.succeed()
            self._run(self.clock.advance(1.0))
        assert self.stop_task is not None and self.stop_task.done()
        report = self.stop_task.result()
        assert all(waiter.done() for waiter in self.waiters), "a waiter was never woken"
        for waiter in self.waiters:
            if not waiter.cancelled():
                waiter.exception()  # retrieved: a failed waiter is an expected outcome
        confirmed = [r for call in self.sink.calls if call.result == "ok" for r in call.records]
        unconfirmed = self.writer.unconfirmed()
        assert len(confirmed) == len(set(confirmed)), "a record was confirmed twice"
        assert not set(confirmed) & set(unconfirmed)
        assert sorted(confirmed + unconfirmed) == sorted(self.accepted), "a record was lost"
        assert report.unconfirmed == len(unconfirmed)
        assert report.drained is (not unconfirmed)


BufferedWriterMachine.TestCase.settings = settings(
    max_examples=75,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestBufferedWriterStateMachine = BufferedWriterMachine.TestCase
