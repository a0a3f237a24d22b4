"""Startup: single-phase helpers, StartupCoordinator policies, stop requests."""

from __future__ import annotations

import asyncio

import pytest

from aster_forge.runtime import CancellationToken
from aster_forge.runtime._phases import (
    STARTUP_PHASE_FAILED,
    StartupCoordinator,
    StartupPhaseFailurePolicy,
    StartupPhaseStatus,
    run_optional_startup_phase,
    run_required_startup_phase,
)

SECRET = "dsn=postgres://user:secret@db"


class ProductConfigError(Exception):
    """A product's own error type."""


async def test_required_phase_returns_the_product_value() -> None:
    async def prepare() -> dict[str, int]:
        return {"workers": 4}

    outcome = await run_required_startup_phase("prepare_state", prepare)
    assert outcome.value == {"workers": 4}
    assert outcome.report.name == "prepare_state"
    assert outcome.report.status is StartupPhaseStatus.SUCCEEDED
    assert outcome.report.policy is StartupPhaseFailurePolicy.REQUIRED
    assert outcome.report.duration_seconds >= 0.0


async def test_required_phase_keeps_the_product_exception() -> None:
    original = ProductConfigError(SECRET)

    async def prepare() -> int:
        raise original

    with pytest.raises(ProductConfigError) as caught:
        await run_required_startup_phase("prepare_state", prepare)
    assert caught.value is original


async def test_optional_phase_failure_is_skipped_after_failure() -> None:
    async def exporter() -> str:
        raise RuntimeError(SECRET)

    outcome = await run_optional_startup_phase("metrics_exporter", exporter)
    assert outcome.value is None
    assert outcome.report.status is StartupPhaseStatus.SKIPPED_AFTER_FAILURE
    assert outcome.report.error == STARTUP_PHASE_FAILED
    assert SECRET not in repr(outcome.report)


async def test_optional_phase_success_returns_value() -> None:
    async def warm() -> int:
        return 7

    outcome = await run_optional_startup_phase("warm", warm)
    assert outcome.value == 7
    assert outcome.report.status is StartupPhaseStatus.SUCCEEDED


async def test_optional_phase_does_not_swallow_cancellation() -> None:
    started = asyncio.Event()

    async def slow() -> None:
        started.set()
        await asyncio.Event().wait()

    task = asyncio.create_task(run_optional_startup_phase("slow", slow))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_coordinator_required_failure_stops_later_phases() -> None:
    ran: list[str] = []

    async def migrate() -> None:
        ran.append("migrate")

    async def seed() -> None:
        raise RuntimeError(SECRET)

    async def reload() -> None:
        ran.append("reload")

    coordinator = StartupCoordinator()
    coordinator.required("migrate", migrate)
    coordinator.required("seed", seed)
    coordinator.required("reload", reload)
    report = await coordinator.run()
    assert ran == ["migrate"]
    assert report.phase_names() == ("migrate", "seed")
    assert report.aborted and not report.succeeded()
    failed = report.failed_phase()
    assert failed is not None and failed.name == "seed"
    assert failed.error == STARTUP_PHASE_FAILED
    assert SECRET not in repr(report)


async def test_coordinator_optional_failure_continues() -> None:
    ran: list[str] = []

    async def warm() -> None:
        raise RuntimeError("cold")

    async def reload() -> None:
        ran.append("reload")

    coordinator = StartupCoordinator()
    coordinator.optional("warm", warm)
    coordinator.required("reload", reload)
    report = await coordinator.run()
    assert ran == ["reload"]
    assert [p.status for p in report.phases] == [
        StartupPhaseStatus.SKIPPED_AFTER_FAILURE,
        StartupPhaseStatus.SUCCEEDED,
    ]
    assert report.succeeded() and report.has_failures()


async def test_stop_request_cancels_running_and_remaining_phases() -> None:
    token = CancellationToken()
    entered = asyncio.Event()
    ran: list[str] = []

    async def slow_migration() -> None:
        entered.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            ran.append("migration cancelled")
            raise

    async def later() -> None:
        ran.append("later")

    coordinator = StartupCoordinator()
    coordinator.required("migrate", slow_migration)
    coordinator.required("later", later)
    run = asyncio.create_task(coordinator.run(token))
    await entered.wait()
    token.cancel()
    report = await run
    assert ran == ["migration cancelled"]
    assert report.cancelled and not report.aborted and not report.succeeded()
    assert report.phases[0].status is StartupPhaseStatus.CANCELLED
    assert report.phase_names() == ("migrate",)


async def test_already_cancelled_token_runs_nothing() -> None:
    token = CancellationToken()
    token.cancel()
    ran: list[str] = []

    async def phase() -> None:
        ran.append("phase")

    coordinator = StartupCoordinator()
    coordinator.required("phase", phase)
    report = await coordinator.run(token)
    assert ran == []
    assert report.cancelled and report.phases == ()


async def test_keyboard_interrupt_propagates_from_coordinator() -> None:
    async def interrupt() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        coordinator = StartupCoordinator()
        coordinator.required("interrupt", interrupt)
        await coordinator.run()


def test_invalid_phase_registration() -> None:
    from aster_forge.runtime.errors import RuntimeComponentRegistrationError

    async def phase() -> None:
        return None

    with pytest.raises(RuntimeComponentRegistrationError):
        StartupCoordinator().required("", phase)
    coordinator = StartupCoordinator()
    coordinator.optional("a", phase)
    assert coordinator.phase_names == ("a",)
