"""run_periodic_task and periodic_sleep_duration on a manual clock."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

import pytest

from aster_forge.runtime import CancellationToken
from aster_forge.tasks._periodic import periodic_sleep_duration, run_periodic_task
from aster_forge.tasks.errors import PeriodicTaskConfigError
from aster_forge.testing import ManualClock


def test_zero_interval_is_clamped_to_one_second() -> None:
    assert periodic_sleep_duration(timedelta(0)) == timedelta(seconds=1)


@pytest.mark.parametrize("ms", [1, 10, 200, 999])
def test_sub_second_intervals_are_left_alone(ms: int) -> None:
    assert periodic_sleep_duration(timedelta(milliseconds=ms)) == timedelta(milliseconds=ms)


def test_long_intervals_are_left_alone() -> None:
    assert periodic_sleep_duration(timedelta(hours=6)) == timedelta(hours=6)


def test_bad_intervals_are_rejected() -> None:
    with pytest.raises(PeriodicTaskConfigError, match="negative"):
        periodic_sleep_duration(timedelta(seconds=-1))
    with pytest.raises(PeriodicTaskConfigError, match="timedelta"):
        periodic_sleep_duration(5)  # type: ignore[arg-type]


class Harness:
    """Runs a periodic task on a manual clock and records what happened."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.token = CancellationToken()
        self.calls = 0
        self.failures: set[int] = set()
        self.recorded: list[tuple[str, str, timedelta]] = []
        self.record_fails = False
        self.hook_fails = False
        self.body_seconds = 0.0

    async def fn(self) -> str:
        self.calls += 1
        if self.body_seconds:
            await self.clock.sleep(self.body_seconds)
        if self.calls in self.failures:
            raise RuntimeError(f"run {self.calls} failed")
        return f"ok-{self.calls}"

    async def record(self, name: str, outcome: str, duration: timedelta) -> None:
        if self.record_fails:
            raise OSError("history table down")
        self.recorded.append((name, outcome, duration))

    def on_exception(self, exc: Exception) -> str:
        if self.hook_fails:
            raise LookupError("hook bug")
        return f"failed:{type(exc).__name__}"

    def start(
        self, interval: timedelta, initial_delay: timedelta | None = None
    ) -> asyncio.Task[None]:
        return asyncio.create_task(
            run_periodic_task(
                "cleanup",
                interval,
                self.fn,
                self.record,
                self.on_exception,
                shutdown_token=self.token,
                clock=self.clock,
                initial_delay=initial_delay,
            )
        )


async def test_runs_at_once_then_every_interval_and_records_outcomes() -> None:
    h = Harness(ManualClock())
    task = h.start(timedelta(seconds=10))
    await h.clock.wait_for_sleepers(1)
    assert h.calls == 1
    await h.clock.advance(9.9)
    assert h.calls == 1
    await h.clock.advance(0.1)
    await h.clock.wait_for_sleepers(1)
    assert h.calls == 2
    assert [o for _, o, _ in h.recorded] == ["ok-1", "ok-2"]
    assert all(name == "cleanup" for name, _, _ in h.recorded)
    h.token.cancel()
    await asyncio.wait_for(task, 5)


async def test_exception_becomes_the_product_outcome_and_the_loop_continues(
    caplog: pytest.LogCaptureFixture,
) -> None:
    h = Harness(ManualClock())
    h.failures = {1}
    task = h.start(timedelta(seconds=1))
    await h.clock.wait_for_sleepers(1)
    await h.clock.advance(1)
    await h.clock.wait_for_sleepers(1)
    assert [o for _, o, _ in h.recorded] == ["failed:RuntimeError", "ok-2"]
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and errors[0].__dict__["periodic_task"] == "cleanup"
    h.token.cancel()
    await asyncio.wait_for(task, 5)


async def test_failing_hooks_do_not_stop_the_loop(caplog: pytest.LogCaptureFixture) -> None:
    h = Harness(ManualClock())
    h.failures = {1}
    h.hook_fails = True
    task = h.start(timedelta(seconds=1))
    await h.clock.wait_for_sleepers(1)
    assert h.recorded == []  # nothing to record when the exception hook itself failed
    h.hook_fails = False
    h.record_fails = True
    await h.clock.advance(1)
    await h.clock.wait_for_sleepers(1)
    assert h.calls == 2 and h.recorded == []
    h.record_fails = False
    await h.clock.advance(1)
    await h.clock.wait_for_sleepers(1)
    assert [o for _, o, _ in h.recorded] == ["ok-3"]
    messages = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert any("on_exception hook raised" in m for m in messages)
    assert any("recording the outcome failed" in m for m in messages)
    h.token.cancel()
    await asyncio.wait_for(task, 5)


async def test_zero_interval_waits_one_second_between_runs() -> None:
    h = Harness(ManualClock())
    task = h.start(timedelta(0))
    await h.clock.wait_for_sleepers(1)
    await h.clock.advance(0.999)
    assert h.calls == 1
    await h.clock.advance(0.001)
    await h.clock.wait_for_sleepers(1)
    assert h.calls == 2
    h.token.cancel()
    await asyncio.wait_for(task, 5)


async def test_duration_is_measured_on_the_clock_and_delay_is_fixed_after_the_run() -> None:
    h = Harness(ManualClock())
    h.body_seconds = 3
    task = h.start(timedelta(seconds=10))
    await h.clock.wait_for_sleepers(1)  # the body
    await h.clock.advance(3)
    await h.clock.wait_for_sleepers(1)  # the interval
    assert h.recorded[0][2] == timedelta(seconds=3)
    h.body_seconds = 0
    await h.clock.advance(9.9)
    assert h.calls == 1
    await h.clock.advance(0.1)
    await h.clock.wait_for_sleepers(1)
    assert h.calls == 2
    h.token.cancel()
    await asyncio.wait_for(task, 5)


async def test_initial_delay_and_shutdown_during_it() -> None:
    h = Harness(ManualClock())
    task = h.start(timedelta(seconds=1), initial_delay=timedelta(seconds=30))
    await h.clock.wait_for_sleepers(1)
    await h.clock.advance(29)
    assert h.calls == 0
    h.token.cancel()
    await asyncio.wait_for(task, 5)
    assert h.calls == 0


async def test_a_cancelled_token_before_start_runs_nothing() -> None:
    h = Harness(ManualClock())
    h.token.cancel()
    await asyncio.wait_for(h.start(timedelta(seconds=1)), 5)
    assert h.calls == 0


async def test_invalid_arguments_raise_before_running() -> None:
    h = Harness(ManualClock())
    with pytest.raises(PeriodicTaskConfigError, match="name"):
        await run_periodic_task(
            "", timedelta(1), h.fn, h.record, h.on_exception, shutdown_token=h.token
        )
    with pytest.raises(PeriodicTaskConfigError, match="initial_delay"):
        await run_periodic_task(
            "x",
            timedelta(1),
            h.fn,
            h.record,
            h.on_exception,
            shutdown_token=h.token,
            initial_delay=timedelta(seconds=-1),
        )
    with pytest.raises(PeriodicTaskConfigError, match="record_outcome is not callable"):
        await run_periodic_task(
            "x",
            timedelta(1),
            h.fn,
            None,  # type: ignore[arg-type]
            h.on_exception,
            shutdown_token=h.token,
        )
    assert h.calls == 0
