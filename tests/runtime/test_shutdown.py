"""ShutdownCoordinator: order, isolation, deadlines, once-only resources, reports."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

import pytest

from aster_forge.runtime import ShutdownPhaseFailure, ShutdownReport
from aster_forge.runtime._isolation import abandoned_tasks
from aster_forge.runtime._phases import (
    SHUTDOWN_PHASE_PANICKED,
    SHUTDOWN_RESOURCE_CONSUMED,
    ShutdownCoordinator,
    ShutdownPhaseStatus,
    ShutdownPhaseStatusKind,
    log_shutdown_report,
)
from aster_forge.testing import ManualClock

SECRET = "password=hunter2"


async def test_phases_run_in_registration_order_and_report_it() -> None:
    log: list[str] = []
    coordinator = ShutdownCoordinator()
    for name in ("http", "tasks", "database"):

        async def phase(name: str = name) -> None:
            log.append(name)

        coordinator.phase(name, timedelta(seconds=5), phase)
    report = await coordinator.run()
    assert log == ["http", "tasks", "database"]
    assert report.phase_names() == ("http", "tasks", "database")
    assert not report.has_failures()
    assert all(p.status is ShutdownPhaseStatus.SUCCEEDED for p in report.phases)
    assert report.duration_seconds >= 0.0
    assert report.summary() == "3 phases, 0 failed"


async def test_exception_is_a_fixed_text_failure_and_later_phases_run() -> None:
    ran: list[str] = []

    async def boom() -> None:
        raise RuntimeError(SECRET)

    async def last() -> None:
        ran.append("last")

    coordinator = ShutdownCoordinator()
    coordinator.phase("boom", None, boom)
    coordinator.phase("last", None, last)
    report = await coordinator.run()
    assert ran == ["last"]
    assert report.phases[0].status == ShutdownPhaseStatus.FAILED(SHUTDOWN_PHASE_PANICKED)
    assert SECRET not in repr(report)
    assert report.has_failures()
    assert report.failures() == (report.phases[0],)


async def test_phase_chosen_failure_text_is_kept() -> None:
    async def drain() -> None:
        raise ShutdownPhaseFailure("outbox drain left 3 messages")

    coordinator = ShutdownCoordinator()
    coordinator.phase("drain", None, drain)
    report = await coordinator.run()
    status = report.phases[0].status
    assert status.kind is ShutdownPhaseStatusKind.FAILED
    assert status.message == "outbox drain left 3 messages"
    assert str(status) == "failed: outbox drain left 3 messages"


async def test_factory_that_raises_before_returning_an_awaitable_is_isolated() -> None:
    def broken() -> asyncio.Future[None]:
        raise ValueError(SECRET)

    ran: list[str] = []

    async def after() -> None:
        ran.append("after")

    coordinator = ShutdownCoordinator()
    coordinator.phase("broken", None, broken)
    coordinator.phase("a", None, after)
    report = await coordinator.run()
    assert report.phases[0].status.message == SHUTDOWN_PHASE_PANICKED
    assert ran == ["after"]


async def test_timeout_marks_timed_out_and_continues() -> None:
    clock = ManualClock()
    never = asyncio.Event()
    ran: list[str] = []

    async def hang() -> None:
        await never.wait()

    async def after() -> None:
        ran.append("after")

    coordinator = ShutdownCoordinator(clock=clock)
    coordinator.phase("hang", timedelta(seconds=5), hang)
    coordinator.phase("after", None, after)
    run = asyncio.create_task(coordinator.run())
    await clock.wait_for_sleepers(1)
    await clock.advance(5)
    report = await run
    assert report.phases[0].status is ShutdownPhaseStatus.TIMED_OUT
    assert report.phases[0].duration == timedelta(seconds=5)
    assert ran == ["after"]


async def test_exception_while_being_cancelled_is_failed_not_timed_out() -> None:
    clock = ManualClock()
    never = asyncio.Event()

    async def explode_on_cancel() -> None:
        try:
            await never.wait()
        except asyncio.CancelledError:
            raise RuntimeError(SECRET) from None

    ran: list[str] = []

    async def after() -> None:
        ran.append("after")

    coordinator = ShutdownCoordinator(clock=clock)
    coordinator.phase("explode", timedelta(seconds=1), explode_on_cancel)
    coordinator.phase("after", None, after)
    run = asyncio.create_task(coordinator.run())
    await clock.wait_for_sleepers(1)
    await clock.advance(1)
    report = await run
    assert report.phases[0].status == ShutdownPhaseStatus.FAILED(SHUTDOWN_PHASE_PANICKED)
    assert ran == ["after"]


async def test_phase_that_swallows_cancellation_is_abandoned_after_grace() -> None:
    clock = ManualClock()
    release = asyncio.Event()
    ran: list[str] = []

    async def stubborn() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await release.wait()  # ignores the deadline's cancellation

    async def after() -> None:
        ran.append("after")

    coordinator = ShutdownCoordinator(clock=clock, grace=timedelta(seconds=2))
    coordinator.phase("stubborn", timedelta(seconds=3), stubborn)
    coordinator.phase("after", None, after)
    run = asyncio.create_task(coordinator.run())
    await clock.wait_for_sleepers(1)
    await clock.advance(3)  # deadline: cancel
    await clock.wait_for_sleepers(1)
    await clock.advance(2)  # grace over: abandon
    report = await run
    assert report.phases[0].status is ShutdownPhaseStatus.TIMED_OUT
    assert ran == ["after"]
    leftovers = abandoned_tasks()
    assert any("stubborn" in task.get_name() for task in leftovers)
    release.set()
    await asyncio.gather(*leftovers, return_exceptions=True)
    assert not any("stubborn" in task.get_name() for task in abandoned_tasks())


async def test_once_resource_is_consumed_by_exactly_one_invocation() -> None:
    consumed: list[str] = []

    async def close(handle: str) -> None:
        consumed.append(handle)

    coordinator = ShutdownCoordinator()
    coordinator.phase_once("database", timedelta(seconds=5), "db-handle", close)
    first, second = await asyncio.gather(coordinator.run(), coordinator.run())
    assert first is second  # idempotent, concurrent callers share one run
    assert consumed == ["db-handle"]
    again = await coordinator.run()
    assert again is first
    assert consumed == ["db-handle"]


async def test_once_phase_registered_twice_reports_the_second_as_consumed() -> None:
    from aster_forge.runtime._phases import once_phase

    consumed: list[str] = []

    async def close(handle: str) -> None:
        consumed.append(handle)

    shared = once_phase("db", close)
    coordinator = ShutdownCoordinator()
    coordinator.phase("a", None, shared)
    coordinator.phase("b", None, shared)
    report = await coordinator.run()
    assert consumed == ["db"]
    assert report.phases[1].status == ShutdownPhaseStatus.FAILED(SHUTDOWN_RESOURCE_CONSUMED)


async def test_keyboard_interrupt_is_reraised_after_remaining_phases() -> None:
    ran: list[str] = []

    async def interrupt() -> None:
        raise KeyboardInterrupt

    async def after() -> None:
        ran.append("after")

    coordinator = ShutdownCoordinator()
    coordinator.phase("interrupt", None, interrupt)
    coordinator.phase("after", None, after)
    with pytest.raises(KeyboardInterrupt):
        await coordinator.run()
    assert ran == ["after"]


async def test_cancelling_the_caller_does_not_abort_cleanup() -> None:
    started = asyncio.Event()
    release = asyncio.Event()
    ran: list[str] = []

    async def slow() -> None:
        started.set()
        await release.wait()
        ran.append("slow")

    async def after() -> None:
        ran.append("after")

    coordinator = ShutdownCoordinator()
    coordinator.phase("slow", None, slow)
    coordinator.phase("after", None, after)
    caller = asyncio.create_task(coordinator.run())
    await started.wait()
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    release.set()
    report = await coordinator.run()
    assert ran == ["slow", "after"]
    assert not report.has_failures()


def test_invalid_registrations_are_rejected() -> None:
    from aster_forge.runtime.errors import RuntimeComponentRegistrationError

    async def phase() -> None:
        return None

    with pytest.raises(RuntimeComponentRegistrationError):
        ShutdownCoordinator().phase("", None, phase)
    with pytest.raises(RuntimeComponentRegistrationError):
        ShutdownCoordinator().phase("x", timedelta(0), phase)


def test_log_shutdown_report_levels(caplog: pytest.LogCaptureFixture) -> None:
    from aster_forge.runtime._phases import ShutdownPhaseReport

    report = ShutdownReport(
        (
            ShutdownPhaseReport("tasks", ShutdownPhaseStatus.SUCCEEDED, timedelta(seconds=1)),
            ShutdownPhaseReport("database", ShutdownPhaseStatus.TIMED_OUT, timedelta(seconds=2)),
        ),
        timedelta(seconds=3),
    )
    caplog.set_level(logging.INFO, logger="aster_forge.runtime")
    log_shutdown_report(report)
    levels = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert (logging.INFO, "shutdown phase tasks succeeded in 1.000s") in levels
    assert (logging.WARNING, "shutdown phase database timed_out in 2.000s") in levels
    assert levels[-1] == (
        logging.WARNING,
        "shutdown report: 2 phases, 1 failed (database: timed_out) in 3.000s",
    )
    assert ShutdownPhaseStatus.TIMED_OUT.kind.value == "timed_out"
