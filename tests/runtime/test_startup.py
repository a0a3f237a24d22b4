"""Startup: the value-returning phase helper, the registry's phase policies, stop requests."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from aster_forge.runtime import (
    CancellationToken,
    RuntimeComponentKind,
    RuntimeComponentRegistry,
    run_startup_phase,
)
from aster_forge.runtime._reports import (
    STARTUP_PHASE_FAILED,
    StartupPhaseFailurePolicy,
    StartupPhaseStatus,
)

REQUIRED = StartupPhaseFailurePolicy.REQUIRED
OPTIONAL = StartupPhaseFailurePolicy.OPTIONAL

SECRET = "dsn=postgres://user:secret@db"


class ProductConfigError(Exception):
    """A product's own error type."""


def add(
    registry: RuntimeComponentRegistry,
    name: str,
    fn: Callable[[], Awaitable[object]],
    policy: StartupPhaseFailurePolicy = REQUIRED,
) -> None:
    """Add a startup phase to one component (its phases run in registration order)."""
    optional = policy is OPTIONAL
    registry.component_startup("service", RuntimeComponentKind.CORE, name, fn, optional=optional)


async def test_required_phase_returns_the_product_value() -> None:
    async def prepare() -> dict[str, int]:
        return {"workers": 4}

    outcome = await run_startup_phase("prepare_state", prepare)
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
        await run_startup_phase("prepare_state", prepare)
    assert caught.value is original


async def test_optional_phase_failure_is_skipped_after_failure() -> None:
    async def exporter() -> str:
        raise RuntimeError(SECRET)

    outcome = await run_startup_phase("metrics_exporter", exporter, optional=True)
    assert outcome.value is None
    assert outcome.report.status is StartupPhaseStatus.SKIPPED_AFTER_FAILURE
    assert outcome.report.error == STARTUP_PHASE_FAILED
    assert SECRET not in repr(outcome.report)


async def test_optional_phase_success_returns_value() -> None:
    async def warm() -> int:
        return 7

    outcome = await run_startup_phase("warm", warm, optional=True)
    assert outcome.value == 7
    assert outcome.report.status is StartupPhaseStatus.SUCCEEDED


async def test_optional_phase_does_not_swallow_cancellation() -> None:
    started = asyncio.Event()

    async def slow() -> None:
        started.set()
        await asyncio.Event().wait()

    task = asyncio.create_task(run_startup_phase("slow", slow, optional=True))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_required_failure_stops_later_phases() -> None:
    ran: list[str] = []

    async def migrate() -> None:
        ran.append("migrate")

    async def seed() -> None:
        raise RuntimeError(SECRET)

    async def reload() -> None:
        ran.append("reload")

    registry = RuntimeComponentRegistry()
    add(registry, "migrate", migrate)
    add(registry, "seed", seed)
    add(registry, "reload", reload)
    report = await registry.startup()
    assert ran == ["migrate"]
    assert report.phase_names() == ("migrate", "seed")
    assert report.aborted and not report.succeeded()
    failed = report.failed_phase()
    assert failed is not None and failed.name == "seed"
    assert failed.error == STARTUP_PHASE_FAILED
    assert SECRET not in repr(report)


async def test_optional_failure_continues() -> None:
    ran: list[str] = []

    async def warm() -> None:
        raise RuntimeError("cold")

    async def reload() -> None:
        ran.append("reload")

    registry = RuntimeComponentRegistry()
    add(registry, "warm", warm, OPTIONAL)
    add(registry, "reload", reload)
    report = await registry.startup()
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

    registry = RuntimeComponentRegistry()
    add(registry, "migrate", slow_migration)
    add(registry, "later", later)
    run = asyncio.create_task(registry.startup(token))
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

    registry = RuntimeComponentRegistry()
    add(registry, "phase", phase)
    report = await registry.startup(token)
    assert ran == []
    assert report.cancelled and report.phases == ()


async def test_keyboard_interrupt_propagates_from_startup() -> None:
    async def interrupt() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        registry = RuntimeComponentRegistry()
        add(registry, "interrupt", interrupt)
        await registry.startup()


def test_invalid_phase_registration() -> None:
    from aster_forge.runtime.errors import RuntimeComponentRegistrationError

    async def phase() -> None:
        return None

    with pytest.raises(RuntimeComponentRegistrationError):
        add(RuntimeComponentRegistry(), "", phase)
    registry = RuntimeComponentRegistry()
    add(registry, "a", phase, OPTIONAL)
    descriptor = registry.descriptor("service")
    assert descriptor is not None
    assert [(p.phase, p.policy) for p in descriptor.startup_phases] == [("a", OPTIONAL)]
