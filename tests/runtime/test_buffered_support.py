"""Shared fakes for the buffered writer tests: an event-driven sink and a writer factory.

The sink parks every call on a future the test resolves, so ordering never depends on
real time; :class:`~aster_forge.testing.ManualClock` drives ``max_delay`` and deadlines.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import timedelta

from aster_forge.runtime import (
    BufferedBatchConfig,
    ManagedBatchWriter,
    OverflowPolicy,
    WriteFailure,
)
from aster_forge.runtime._buffered_core import BufferedWriterEvent, WriteFailureClass
from aster_forge.testing import ManualClock

Writer = ManagedBatchWriter[str, Exception]


@dataclass
class SinkCall:
    """One sink invocation, parked until the test resolves it."""

    records: list[str]
    outcome: asyncio.Future[BaseException | None]
    finished: asyncio.Event = field(default_factory=asyncio.Event)
    result: str | None = None
    """How the call ended: ``ok``, a failure class value, ``panic`` or ``cancelled``."""

    def succeed(self) -> None:
        """Let the call return normally (the chunk is confirmed)."""
        self.outcome.set_result(None)

    def fail(self, failure_class: WriteFailureClass) -> None:
        """Make the call raise a classified :class:`WriteFailure`."""
        self.outcome.set_result(WriteFailure(failure_class, RuntimeError("db said no")))

    def panic(self, exc: BaseException | None = None) -> None:
        """Make the call raise an unclassified exception (a panic)."""
        self.outcome.set_result(exc if exc is not None else ZeroDivisionError("boom"))


class FakeSink:
    """An async sink whose calls the test completes one by one.

    ``auto=True`` confirms every call at once without suspending (for throughput and
    cooperative-yield tests).
    """

    def __init__(self, *, auto: bool = False) -> None:
        self.auto = auto
        self.calls: list[SinkCall] = []
        self.committed: list[str] = []
        self.cancelled_calls = 0
        self._changed: asyncio.Event | None = None

    async def __call__(self, records: list[str]) -> None:
        if self.auto:
            self.calls.append(SinkCall(list(records), _done_future(), result="ok"))
            self.committed.extend(records)
            return
        call = SinkCall(list(records), asyncio.get_running_loop().create_future())
        self.calls.append(call)
        self._signal()
        try:
            outcome = await call.outcome
        except asyncio.CancelledError:
            self.cancelled_calls += 1
            call.result = "cancelled"
            raise
        finally:
            call.finished.set()
            self._signal()
        if outcome is None:
            call.result = "ok"
            self.committed.extend(records)
            return
        call.result = outcome.failure_class.value if isinstance(outcome, WriteFailure) else "panic"
        if isinstance(outcome, WriteFailure) and (
            outcome.failure_class is WriteFailureClass.UNKNOWN_COMMIT
        ):
            # UNKNOWN_COMMIT in this fake means "it did commit, the ack was lost".
            self.committed.extend(records)
        raise outcome

    def _signal(self) -> None:
        if self._changed is not None:
            self._changed.set()

    async def wait_calls(self, count: int, *, limit: float = 5.0) -> SinkCall:
        """Wait (bounded, event-driven) until ``count`` calls were made; return the last."""
        if self._changed is None:
            self._changed = asyncio.Event()
        async with asyncio.timeout(limit):
            while len(self.calls) < count:
                self._changed.clear()
                await self._changed.wait()
        return self.calls[count - 1]

    @property
    def batches(self) -> list[list[str]]:
        """The records of every call, in call order."""
        return [call.records for call in self.calls]


def _done_future() -> asyncio.Future[BaseException | None]:
    future: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()
    future.set_result(None)
    return future


def make_writer(
    sink: FakeSink,
    *,
    capacity: int = 4,
    batch_size: int = 2,
    max_delay: float = 10.0,
    policy: OverflowPolicy = OverflowPolicy.REJECT,
    observer: asyncio.Queue[BufferedWriterEvent] | None = None,
    clock: ManualClock | None = None,
) -> tuple[Writer, ManualClock]:
    """Build a writer over ``sink`` with a manual clock."""
    clock = clock if clock is not None else ManualClock()
    config = BufferedBatchConfig(capacity, batch_size, timedelta(seconds=max_delay))
    writer: Writer = ManagedBatchWriter(config, policy, observer, sink, clock=clock)
    return writer, clock


async def settle(turns: int = 20) -> None:
    """Give the loop a few turns (no real time passes)."""
    for _ in range(turns):
        await asyncio.sleep(0)


async def stop_now(writer: Writer) -> None:
    """Stop ``writer`` with an already expired deadline (cleanup: cancel and join)."""
    await writer.stop(writer.clock.monotonic())
