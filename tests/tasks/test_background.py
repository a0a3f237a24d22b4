"""BackgroundTasks: spawn, graceful stop, abort after grace, reaping each handle once."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta

import pytest

from aster_forge.runtime import CancellationToken
from aster_forge.tasks import BACKGROUND_TASKS_COMPONENT, BackgroundTasks
from aster_forge.tasks.errors import (
    BackgroundTasksClosedError,
    BackgroundTaskSpawnError,
    PeriodicTaskConfigError,
)
from aster_forge.testing import ManualClock

LOGGER = "aster_forge.tasks.runtime"


def _errors(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == LOGGER and r.levelno >= logging.ERROR]


async def _until_cancelled(token: CancellationToken) -> None:
    await token.wait()


def test_component_name_is_stable() -> None:
    assert BACKGROUND_TASKS_COMPONENT == "background_tasks"


async def test_workers_get_the_group_token_and_stop_gracefully(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, LOGGER)
    parent = CancellationToken()
    tasks = BackgroundTasks(parent, name="grp")
    seen: list[CancellationToken] = []
    stopped: list[str] = []

    def make(name: str) -> Callable[[CancellationToken], Awaitable[None]]:
        async def worker(token: CancellationToken) -> None:
            seen.append(token)
            await token.wait()
            stopped.append(name)

        return worker

    tasks.spawn("a", make("a"))
    tasks.spawn("b", make("b"))
    await asyncio.sleep(0)
    assert tasks.worker_names() == ("a", "b")
    assert all(t is tasks.shutdown_token for t in seen)
    await tasks.shutdown()
    assert sorted(stopped) == ["a", "b"]
    assert len(tasks) == 0
    assert not parent.cancelled  # the group's stop does not stop the process
    assert _errors(caplog) == []


async def test_parent_cancellation_reaches_workers() -> None:
    parent = CancellationToken()
    tasks = BackgroundTasks(parent)
    done = asyncio.Event()

    async def worker(token: CancellationToken) -> None:
        await token.wait()
        done.set()

    tasks.spawn("w", worker)
    parent.cancel()
    await asyncio.wait_for(done.wait(), 5)
    await tasks.shutdown()


async def test_worker_ignoring_the_token_is_cancelled_after_the_grace() -> None:
    clock = ManualClock()
    tasks = BackgroundTasks(shutdown_grace=timedelta(seconds=5), clock=clock)
    cancelled = asyncio.Event()

    async def stubborn(token: CancellationToken) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    tasks.spawn("stubborn", stubborn)
    shutdown = asyncio.create_task(tasks.shutdown())
    await clock.wait_for_sleepers(1)
    await clock.advance(4.9)
    assert not cancelled.is_set() and not shutdown.done()
    await clock.advance(0.1)
    await asyncio.wait_for(shutdown, 5)
    assert cancelled.is_set()
    assert len(tasks) == 0


async def test_zero_grace_cancels_at_once() -> None:
    tasks = BackgroundTasks(shutdown_grace=timedelta(0))
    started = asyncio.Event()

    async def stubborn(token: CancellationToken) -> None:
        started.set()
        await asyncio.Event().wait()

    task = tasks.spawn("stubborn", stubborn)
    await started.wait()
    await asyncio.wait_for(tasks.shutdown(), 5)
    assert task.cancelled()


async def test_cancelled_worker_logs_nothing_alarming(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, LOGGER)
    tasks = BackgroundTasks(shutdown_grace=timedelta(0))

    async def stubborn(token: CancellationToken) -> None:
        await asyncio.Event().wait()

    tasks.spawn("stubborn", stubborn)
    await asyncio.sleep(0)
    await tasks.shutdown()
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert any("cancelled" in r.getMessage() for r in caplog.records)


async def test_worker_death_is_logged_once_at_error_with_group_context(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, LOGGER)
    tasks = BackgroundTasks(name="singletons")
    died = asyncio.Event()

    async def crashing(token: CancellationToken) -> None:
        died.set()
        raise RuntimeError("boom")

    tasks.spawn("crasher", crashing)
    tasks.spawn("steady", _until_cancelled)
    await died.wait()
    await asyncio.sleep(0)
    errors = _errors(caplog)
    assert len(errors) == 1
    record = errors[0]
    assert record.__dict__["task_group"] == "singletons"
    assert record.__dict__["worker"] == "crasher"
    assert record.exc_info is not None and isinstance(record.exc_info[1], RuntimeError)
    assert tasks.worker_names() == ("steady",)
    await tasks.shutdown()
    assert len(_errors(caplog)) == 1  # reaped once: shutdown does not log it again


async def test_worker_failing_during_shutdown_is_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    tasks = BackgroundTasks()

    async def fails_on_stop(token: CancellationToken) -> None:
        await token.wait()
        raise ValueError("cleanup failed")

    tasks.spawn("w", fails_on_stop)
    await asyncio.sleep(0)
    await tasks.shutdown()
    assert len(_errors(caplog)) == 1


async def test_concurrent_and_repeated_shutdown_reap_each_handle_once(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    tasks = BackgroundTasks(shutdown_grace=timedelta(0))
    reaped: list[str] = []
    original = BackgroundTasks._reap

    def counting(self: BackgroundTasks, task: asyncio.Task[object]) -> None:
        if task in self._live:
            reaped.append(task.get_name())
        original(self, task)

    monkeypatch.setattr(BackgroundTasks, "_reap", counting)

    async def fails_on_stop(token: CancellationToken) -> None:
        await token.wait()
        raise ValueError("x")

    async def stubborn(token: CancellationToken) -> None:
        await asyncio.Event().wait()

    tasks.spawn("graceful", _until_cancelled)
    tasks.spawn("failing", fails_on_stop)
    tasks.spawn("stubborn", stubborn)
    await asyncio.sleep(0)
    await asyncio.gather(tasks.shutdown(), tasks.shutdown(), tasks.shutdown())
    await tasks.shutdown()
    assert sorted(reaped) == sorted(
        f"aster-forge:background_tasks:{n}" for n in ("graceful", "failing", "stubborn")
    )
    assert len(_errors(caplog)) == 1


async def test_cancelled_shutdown_caller_aborts_workers_at_once() -> None:
    clock = ManualClock()
    tasks = BackgroundTasks(shutdown_grace=timedelta(hours=1), clock=clock)

    async def stubborn(token: CancellationToken) -> None:
        await asyncio.Event().wait()

    worker = tasks.spawn("stubborn", stubborn)
    caller = asyncio.create_task(tasks.shutdown())
    await clock.wait_for_sleepers(1)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    await asyncio.wait_for(asyncio.wait({worker}), 5)
    assert worker.cancelled()
    # A later shutdown still completes and finds nothing left.
    await asyncio.wait_for(tasks.shutdown(), 5)
    assert len(tasks) == 0


async def test_spawn_validation() -> None:
    tasks = BackgroundTasks()
    tasks.spawn("w", _until_cancelled)
    with pytest.raises(BackgroundTaskSpawnError, match="already runs a worker named 'w'"):
        tasks.spawn("w", _until_cancelled)
    with pytest.raises(BackgroundTaskSpawnError, match="non-empty"):
        tasks.spawn(" ", _until_cancelled)
    with pytest.raises(BackgroundTaskSpawnError, match="not callable"):
        tasks.spawn("x", 42)  # type: ignore[arg-type]
    await tasks.shutdown()
    assert tasks.is_shutting_down
    with pytest.raises(BackgroundTasksClosedError, match="shutting down"):
        tasks.spawn("late", _until_cancelled)


async def test_name_can_be_reused_after_the_worker_ended() -> None:
    tasks = BackgroundTasks()

    async def once(token: CancellationToken) -> None:
        return None

    first = tasks.spawn("job", once)
    await first
    await asyncio.sleep(0)
    tasks.spawn("job", _until_cancelled)
    await tasks.shutdown()


def test_constructor_validation() -> None:
    with pytest.raises(PeriodicTaskConfigError, match="group name"):
        BackgroundTasks(name="")
    with pytest.raises(PeriodicTaskConfigError, match="shutdown_grace"):
        BackgroundTasks(shutdown_grace=timedelta(seconds=-1))
