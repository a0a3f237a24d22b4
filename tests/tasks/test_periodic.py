"""Interval schedules on the scheduled catalog runner: clamping, hooks, delays, shutdown."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta

import pytest

from aster_forge.runtime import CancellationToken
from aster_forge.tasks import IntervalSchedule, ScheduledTaskRun
from aster_forge.tasks._scheduled import run_scheduled_periodic_task
from aster_forge.tasks._schedules import ScheduledPeriodicTask
from aster_forge.tasks.errors import PeriodicTaskConfigError, ScheduledTaskValueError
from aster_forge.testing import InMemoryScheduledTaskStore, ManualClock

from ._schedule_support import until

T0 = datetime(2030, 1, 1, tzinfo=UTC)


def test_zero_interval_is_clamped_to_one_second() -> None:
    assert IntervalSchedule(every=timedelta(0)).effective_every == timedelta(seconds=1)


@pytest.mark.parametrize("ms", [1, 10, 200, 999])
def test_sub_second_intervals_are_left_alone(ms: int) -> None:
    every = timedelta(milliseconds=ms)
    assert IntervalSchedule(every=every).effective_every == every


def test_long_intervals_are_left_alone() -> None:
    assert IntervalSchedule(every=timedelta(hours=6)).effective_every == timedelta(hours=6)


def test_bad_intervals_are_rejected() -> None:
    with pytest.raises(PeriodicTaskConfigError, match="negative"):
        IntervalSchedule(every=timedelta(seconds=-1))
    with pytest.raises(PeriodicTaskConfigError, match="timedelta"):
        IntervalSchedule(every=5)  # type: ignore[arg-type]
    with pytest.raises(ScheduledTaskValueError, match="initial_delay"):
        IntervalSchedule(every=timedelta(1), initial_delay=timedelta(seconds=-1))


class Harness:
    """Runs one interval job on an in-memory catalog and a manual clock."""

    def __init__(self) -> None:
        self.clock = ManualClock(T0)
        self.store = InMemoryScheduledTaskStore(self.clock)
        self.token = CancellationToken()
        self.calls = 0
        self.failures: set[int] = set()
        self.recorded: list[tuple[str, str, timedelta]] = []
        self.record_fails = False
        self.hook_fails = False

    async def fn(self, run: ScheduledTaskRun) -> str:
        self.calls += 1
        if self.calls in self.failures:
            raise RuntimeError(f"run {self.calls} failed")
        return f"ok-{self.calls}"

    async def record(self, run: ScheduledTaskRun, outcome: str, duration: timedelta) -> None:
        if self.record_fails:
            raise OSError("history table down")
        self.recorded.append((run.task.name, outcome, duration))

    def on_exception(self, exc: Exception) -> str:
        if self.hook_fails:
            raise LookupError("hook bug")
        return f"failed:{type(exc).__name__}"

    def start(self, every: timedelta, initial_delay: timedelta | None = None) -> asyncio.Task[None]:
        task = ScheduledPeriodicTask(
            namespace="shop",
            name="cleanup",
            owner_id="a",
            schedule=IntervalSchedule(every=every, initial_delay=initial_delay),
        )
        return asyncio.create_task(
            run_scheduled_periodic_task(
                self.store,
                task,
                self.fn,
                shutdown_token=self.token,
                record_outcome=self.record,
                on_exception=self.on_exception,
                clock=self.clock,
            ),
            name="runner:cleanup",
        )

    async def tick(self, seconds: float, calls: int) -> None:
        await self.clock.wait_for_sleepers(1)
        await self.clock.advance(seconds)
        await until(lambda: self.calls == calls)


async def test_exception_becomes_the_product_outcome_and_the_loop_continues(
    caplog: pytest.LogCaptureFixture,
) -> None:
    h = Harness()
    h.failures = {1}
    task = h.start(timedelta(seconds=1))
    await until(lambda: len(h.recorded) == 1)
    await h.tick(1, 2)
    await until(lambda: len(h.recorded) == 2)
    assert [o for _, o, _ in h.recorded] == ["failed:RuntimeError", "ok-2"]
    assert all(name == "cleanup" for name, _, _ in h.recorded)
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and errors[0].__dict__["scheduled_task"] == "cleanup"
    h.token.cancel()
    await asyncio.wait_for(task, 5)


async def test_failing_hooks_do_not_stop_the_loop(caplog: pytest.LogCaptureFixture) -> None:
    h = Harness()
    h.failures = {1}
    h.hook_fails = True
    task = h.start(timedelta(seconds=1))
    await until(lambda: h.calls == 1)
    await h.clock.wait_for_sleepers(1)
    assert h.recorded == []  # nothing to record when the exception hook itself failed
    h.hook_fails = False
    h.record_fails = True
    await h.tick(1, 2)
    await h.clock.wait_for_sleepers(1)
    assert h.recorded == []
    h.record_fails = False
    await h.tick(1, 3)
    await until(lambda: len(h.recorded) == 1)
    assert [o for _, o, _ in h.recorded] == ["ok-3"]
    messages = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert any("on_exception hook raised" in m for m in messages)
    assert any("recording the outcome failed" in m for m in messages)
    h.token.cancel()
    await asyncio.wait_for(task, 5)


async def test_zero_interval_fires_once_a_second() -> None:
    h = Harness()
    task = h.start(timedelta(0))
    await until(lambda: h.calls == 1)
    await h.clock.wait_for_sleepers(1)
    await h.clock.advance(0.999)
    await h.clock.wait_for_sleepers(1)
    assert h.calls == 1
    await h.clock.advance(0.001)
    await until(lambda: h.calls == 2)
    record = await h.store.get_scheduled_task("shop", "cleanup")
    assert record is not None and record.interval == timedelta(seconds=1)
    h.token.cancel()
    await asyncio.wait_for(task, 5)


async def test_initial_delay_and_shutdown_during_it() -> None:
    h = Harness()
    task = h.start(timedelta(seconds=1), initial_delay=timedelta(seconds=30))
    await h.clock.wait_for_sleepers(1)
    await h.clock.advance(29)
    await h.clock.wait_for_sleepers(1)
    assert h.calls == 0
    h.token.cancel()
    await asyncio.wait_for(task, 5)
    assert h.calls == 0


async def test_a_cancelled_token_before_start_runs_nothing() -> None:
    h = Harness()
    h.token.cancel()
    await asyncio.wait_for(h.start(timedelta(seconds=1)), 5)
    assert h.calls == 0
