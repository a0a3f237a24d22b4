"""The one race primitive, the shield for writes that must land, the abandoned registry.

Driven by a manual clock and events: no wall-clock sleeps.
"""

from __future__ import annotations

import asyncio
import gc
import logging

import pytest

from aster_forge.runtime import CancellationToken
from aster_forge.runtime._race import (
    RaceWinner,
    abandon_task,
    abandoned_tasks,
    race,
    shielded,
    sleep_or_cancelled,
)
from aster_forge.testing import ManualClock


async def _turns(n: int = 5) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def _helpers(prefix: str) -> set[str]:
    return {task.get_name() for task in asyncio.all_tasks() if task.get_name().startswith(prefix)}


async def test_the_awaitable_wins_and_no_helper_outlives_the_call() -> None:
    clock, token, done = ManualClock(), CancellationToken(), asyncio.Event()
    racing = asyncio.create_task(
        race(done.wait(), seconds=10, clock=clock, token=token, name="t-race"),
        name="test-race",
    )
    await clock.wait_for_sleepers(1)
    assert _helpers("t-race") == {"t-race", "t-race-deadline", "t-race-token"}
    done.set()
    assert await racing is RaceWinner.DONE
    assert _helpers("t-race") == set()


async def test_the_deadline_is_measured_on_the_injected_clock() -> None:
    clock, never = ManualClock(), asyncio.Event()
    racing = asyncio.create_task(
        race(never.wait(), seconds=5, clock=clock, name="t-deadline"), name="test-race"
    )
    await clock.wait_for_sleepers(1)
    await clock.advance(4.9)
    await _turns()
    assert not racing.done()
    await clock.advance(0.1)
    assert await racing is RaceWinner.DEADLINE
    # The race owned the coroutine's task: it lost, so it was cancelled and joined.
    assert _helpers("t-deadline") == set()


async def test_the_token_wins_and_a_future_passed_in_is_left_running() -> None:
    token = CancellationToken()
    loop = asyncio.get_running_loop()
    future: asyncio.Future[int] = loop.create_future()
    racing = asyncio.create_task(race(future, token=token), name="test-race")
    await _turns()
    token.cancel()
    assert await racing is RaceWinner.TOKEN
    # Its owner decides what losing means for it.
    assert not future.done()
    future.set_result(1)


async def _until_cancelled(started: asyncio.Event, cancelled: asyncio.Event) -> None:
    started.set()
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        cancelled.set()
        raise


async def test_cancel_loser_cancels_and_joins_a_losing_task() -> None:
    clock = ManualClock()
    started, cancelled = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(_until_cancelled(started, cancelled), name="test-loser")
    await started.wait()
    racing = asyncio.create_task(
        race(task, seconds=1, clock=clock, cancel_loser=True), name="test-race"
    )
    await clock.wait_for_sleepers(1)
    await clock.advance(1)
    assert await racing is RaceWinner.DEADLINE
    assert cancelled.is_set() and task.cancelled()


async def test_a_cancelled_caller_cancels_what_the_race_owns() -> None:
    started, cancelled = asyncio.Event(), asyncio.Event()
    owned = _until_cancelled(started, cancelled)
    racing = asyncio.create_task(race(owned, name="t-owned"), name="test-race")
    await started.wait()
    racing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await racing
    assert cancelled.is_set()
    assert _helpers("t-owned") == set()


async def test_ready_sides_and_bad_calls() -> None:
    token = CancellationToken()
    token.cancel()
    assert await race(token=token) is RaceWinner.TOKEN
    loop = asyncio.get_running_loop()
    finished: asyncio.Future[None] = loop.create_future()
    finished.set_result(None)
    # A finished awaitable beats a cancelled token.
    assert await race(finished, token=token) is RaceWinner.DONE
    with pytest.raises(ValueError, match="needs an awaitable"):
        await race()


async def test_a_broken_clock_is_raised_not_read_as_a_deadline() -> None:
    class BrokenClock(ManualClock):
        async def sleep(self, seconds: float) -> None:
            raise RuntimeError("clock broke")

    with pytest.raises(RuntimeError, match="clock broke"):
        await race(asyncio.Event().wait(), seconds=1, clock=BrokenClock(), name="t-broken")
    # The awaitable's task (the race's own) was cancelled and joined, not left pending.
    assert _helpers("t-broken") == set()


async def test_sleep_or_cancelled_says_whether_the_token_ended_it() -> None:
    clock, token = ManualClock(), CancellationToken()
    sleeping = asyncio.create_task(sleep_or_cancelled(clock, token, 3), name="test-sleep")
    await clock.wait_for_sleepers(1)
    await clock.advance(3)
    assert await sleeping is False
    sleeping = asyncio.create_task(sleep_or_cancelled(clock, token, 3), name="test-sleep")
    await clock.wait_for_sleepers(1)
    token.cancel()
    assert await sleeping is True


async def test_a_shielded_write_lands_before_the_callers_cancel_propagates() -> None:
    gate, landed = asyncio.Event(), []

    async def write() -> str:
        await gate.wait()
        landed.append("row")
        return "written"

    caller = asyncio.create_task(shielded(write(), name="test-write"), name="test-caller")
    await _turns()
    caller.cancel()
    await _turns()
    assert not caller.done(), "the caller waits for the write"
    gate.set()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert landed == ["row"]


async def test_a_shielded_write_that_fails_after_the_cancel_is_observed() -> None:
    # Its error is retrieved (no "exception was never retrieved" when the write's task
    # is collected) and the cancellation still propagates.
    gate = asyncio.Event()
    reported: list[dict[str, object]] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _loop, context: reported.append(context))

    async def write() -> None:
        await gate.wait()
        raise ConnectionError("db gone")

    try:
        caller = asyncio.create_task(shielded(write()), name="test-caller")
        await _turns()
        caller.cancel()
        await _turns()
        gate.set()
        with pytest.raises(asyncio.CancelledError):
            await caller
        del caller
        gc.collect()
        await _turns()
    finally:
        loop.set_exception_handler(None)
    assert [context.get("message") for context in reported] == []


async def test_a_shielded_write_returns_its_result() -> None:
    async def write() -> int:
        return 7

    assert await shielded(write()) == 7


async def test_an_abandoned_task_stays_referenced_and_its_error_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    gate = asyncio.Event()

    async def stray() -> None:
        await gate.wait()
        raise RuntimeError("late failure")

    task = asyncio.create_task(stray(), name="test-stray")
    abandon_task(task)
    assert task in abandoned_tasks()
    with caplog.at_level(logging.WARNING, logger="aster_forge.runtime"):
        gate.set()
        await asyncio.wait({task})
        await _turns()
    assert task not in abandoned_tasks()
    assert "abandoned task test-stray ended with an error" in caplog.text
