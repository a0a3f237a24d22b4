"""HealthCheckRegistry: registration, scopes, concurrency, order, timeouts, failures."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable
from datetime import timedelta

import pytest

from aster_forge.runtime import (
    HealthCheckOptions,
    HealthCheckRegistry,
    HealthCheckScope,
    HealthCheckScopes,
    HealthComponentReport,
    HealthStatus,
)
from aster_forge.runtime._health_registry import (
    HEALTH_CHECK_FAILED_MESSAGE,
    HEALTH_CHECK_INVALID_REPORT_MESSAGE,
    HEALTH_CHECK_STUCK_MESSAGE,
    HEALTH_CHECK_TIMED_OUT_MESSAGE,
    HealthCheckRequirement,
)
from aster_forge.runtime.errors import DuplicateHealthCheckError, InvalidHealthCheckError

Check = Callable[[], Awaitable[HealthComponentReport]]
SHORT = timedelta(milliseconds=30)
GRACE = timedelta(milliseconds=30)


def healthy(name: str) -> Check:
    async def check() -> HealthComponentReport:
        return HealthComponentReport.healthy(name, f"{name} ok")

    return check


def never_finishes(started: asyncio.Event | None = None) -> Check:
    async def check() -> HealthComponentReport:
        if started is not None:
            started.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    return check


# --- scopes, options, descriptors ---------------------------------------------------------


def test_scope_wire_values() -> None:
    assert [s.value for s in HealthCheckScope] == ["liveness", "readiness", "diagnostics"]
    assert HealthCheckScope.parse("readiness") is HealthCheckScope.READINESS
    with pytest.raises(InvalidHealthCheckError, match="unknown health check scope"):
        HealthCheckScope.parse("startup")


def test_scope_sets() -> None:
    both = HealthCheckScopes.readiness_and_diagnostics()
    assert tuple(s.value for s in both) == ("readiness", "diagnostics")
    assert both.contains(HealthCheckScope.READINESS)
    assert HealthCheckScope.LIVENESS not in both
    assert tuple(s.value for s in HealthCheckScopes.all()) == (
        "liveness",
        "readiness",
        "diagnostics",
    )
    assert HealthCheckScopes.liveness() | HealthCheckScopes.diagnostics() == (
        HealthCheckScopes.liveness_and_diagnostics()
    )
    assert HealthCheckScopes.liveness_and_readiness() == HealthCheckScopes.of(
        HealthCheckScope.READINESS, HealthCheckScope.LIVENESS
    )
    assert list(HealthCheckScopes.readiness()) == [HealthCheckScope.READINESS]
    with pytest.raises(InvalidHealthCheckError, match="at least one scope"):
        HealthCheckScopes.of()


def test_requirement_failure_mapping() -> None:
    assert HealthCheckRequirement.REQUIRED.failure_status() is HealthStatus.UNHEALTHY
    assert HealthCheckRequirement.OPTIONAL.failure_status() is HealthStatus.DEGRADED
    assert [r.value for r in HealthCheckRequirement] == ["required", "optional"]


def test_options() -> None:
    options = HealthCheckOptions.required(timedelta(seconds=2)).with_scopes(
        HealthCheckScopes.readiness_and_diagnostics()
    )
    assert options.requirement is HealthCheckRequirement.REQUIRED
    assert options.timeout == timedelta(seconds=2)
    assert options.scopes == HealthCheckScopes.readiness_and_diagnostics()
    assert HealthCheckOptions.optional().scopes == HealthCheckScopes.all()
    assert HealthCheckOptions.optional().with_scopes(HealthCheckScope.LIVENESS).scopes == (
        HealthCheckScopes.liveness()
    )
    assert HealthCheckOptions.optional().with_scopes([HealthCheckScope.READINESS]).scopes == (
        HealthCheckScopes.readiness()
    )
    assert HealthCheckOptions.required().with_timeout(SHORT).timeout == SHORT


@pytest.mark.parametrize("timeout", [timedelta(0), timedelta(seconds=-1), 5])
def test_options_reject_bad_timeouts(timeout: object) -> None:
    with pytest.raises(InvalidHealthCheckError, match="timeout"):
        HealthCheckOptions.required(timeout)  # type: ignore[arg-type]


def test_registration_and_descriptors() -> None:
    registry = HealthCheckRegistry(default_timeout=timedelta(seconds=3))
    registry.register_with_options(
        "database",
        HealthCheckOptions.required(timedelta(seconds=5)).with_scopes(
            HealthCheckScopes.readiness_and_diagnostics()
        ),
        healthy("database"),
    )
    registry.register_with_options(
        "cache",
        HealthCheckOptions.optional(None).with_scopes(HealthCheckScopes.diagnostics()),
        healthy("cache"),
    )
    assert len(registry) == 2
    assert "database" in registry
    assert [d.name for d in registry.descriptors()] == ["database", "cache"]
    database, cache = registry.descriptors()
    assert database.timeout == timedelta(seconds=5)
    assert cache.timeout == timedelta(seconds=3)
    assert cache.requirement is HealthCheckRequirement.OPTIONAL
    assert cache.runs_in(HealthCheckScope.DIAGNOSTICS)
    assert not cache.runs_in(HealthCheckScope.READINESS)
    assert cache.to_json_dict() == {
        "name": "cache",
        "requirement": "optional",
        "timeout_seconds": 3.0,
        "scopes": ["diagnostics"],
    }
    names = [d.name for d in registry.descriptors_for_scope(HealthCheckScope.READINESS)]
    assert names == ["database"]
    assert registry.descriptors_for_scope(HealthCheckScope.LIVENESS) == ()


def test_default_timeout_is_five_seconds() -> None:
    registry = HealthCheckRegistry()
    registry.register_with_options("a", HealthCheckOptions.required(), healthy("a"))
    assert registry.default_timeout == timedelta(seconds=5)
    assert registry.descriptors()[0].timeout == timedelta(seconds=5)


def test_duplicate_name_is_rejected() -> None:
    registry = HealthCheckRegistry()
    registry.register_with_options("database", HealthCheckOptions.required(), healthy("a"))
    with pytest.raises(DuplicateHealthCheckError, match="'database' is already registered"):
        registry.register_with_options("database", HealthCheckOptions.optional(), healthy("b"))
    assert isinstance(DuplicateHealthCheckError("x"), ValueError)
    assert len(registry) == 1


def test_bad_registrations_are_rejected() -> None:
    registry = HealthCheckRegistry()
    with pytest.raises(InvalidHealthCheckError, match="name"):
        registry.register_with_options("", HealthCheckOptions.required(), healthy("a"))
    with pytest.raises(InvalidHealthCheckError, match="not callable"):
        registry.register_with_options("a", HealthCheckOptions.required(), "nope")  # type: ignore[arg-type]
    with pytest.raises(InvalidHealthCheckError, match="HealthCheckOptions"):
        registry.register_with_options("a", "required", healthy("a"))  # type: ignore[arg-type]
    with pytest.raises(InvalidHealthCheckError, match="cancel_grace"):
        HealthCheckRegistry(cancel_grace=timedelta(0))
    assert len(registry) == 0


async def test_run_scope_rejects_a_string_scope() -> None:
    with pytest.raises(InvalidHealthCheckError, match="HealthCheckScope"):
        await HealthCheckRegistry().run_scope("readiness")  # type: ignore[arg-type]


def test_checks_given_to_the_constructor_are_registered_in_order() -> None:
    options = HealthCheckOptions.required(timedelta(seconds=5)).with_scopes(
        HealthCheckScopes.readiness_and_diagnostics()
    )
    registry = HealthCheckRegistry(
        checks={"database": (options, healthy("database"))}, default_timeout=timedelta(seconds=1)
    )
    assert [d.name for d in registry.descriptors()] == ["database"]
    assert registry.default_timeout == timedelta(seconds=1)


def test_checks_share_the_registry_default_timeout_and_their_options_scopes() -> None:
    diagnostics = HealthCheckScopes.diagnostics()
    registry = HealthCheckRegistry(
        checks={
            "database": (HealthCheckOptions.required().with_scopes(diagnostics), healthy("d")),
            "cache": (HealthCheckOptions.optional().with_scopes(diagnostics), healthy("cache")),
            "live": (
                HealthCheckOptions.required(SHORT).with_scopes(HealthCheckScope.LIVENESS),
                healthy("l"),
            ),
        },
        default_timeout=timedelta(seconds=2),
        cancel_grace=GRACE,
    )
    database, cache, live = registry.descriptors()
    assert (database.requirement, cache.requirement) == (
        HealthCheckRequirement.REQUIRED,
        HealthCheckRequirement.OPTIONAL,
    )
    assert database.timeout == cache.timeout == timedelta(seconds=2)
    assert database.scopes == cache.scopes == HealthCheckScopes.diagnostics()
    assert (live.timeout, live.scopes) == (SHORT, HealthCheckScopes.liveness())
    assert registry.cancel_grace == GRACE


def test_constructor_rejects_duplicates_and_bad_input() -> None:
    required = HealthCheckOptions.required()
    registry = HealthCheckRegistry(checks={"database": (required, healthy("a"))})
    with pytest.raises(DuplicateHealthCheckError):
        registry.register_with_options("database", HealthCheckOptions.optional(), healthy("b"))
    with pytest.raises(InvalidHealthCheckError):
        HealthCheckRegistry(default_timeout=timedelta(seconds=-1))
    with pytest.raises(InvalidHealthCheckError):
        HealthCheckOptions(HealthCheckRequirement.REQUIRED, scopes=HealthCheckScope.READINESS)  # type: ignore[arg-type]
    with pytest.raises(InvalidHealthCheckError):
        HealthCheckRegistry(checks={"x": ("opts", healthy("x"))})  # type: ignore[dict-item]
    with pytest.raises(InvalidHealthCheckError):
        HealthCheckRegistry(checks={"": (required, healthy("x"))})
    with pytest.raises(InvalidHealthCheckError):
        HealthCheckRegistry(cancel_grace=timedelta(0))
    assert [d.name for d in registry.descriptors()] == ["database"]


# --- running ------------------------------------------------------------------------------


async def test_seed_example() -> None:
    options = HealthCheckOptions.required(timedelta(seconds=5)).with_scopes(
        HealthCheckScopes.readiness_and_diagnostics()
    )
    registry = HealthCheckRegistry(checks={"database": (options, healthy("database"))})
    report = await registry.run_scope(HealthCheckScope.DIAGNOSTICS)
    assert report.summary() == "database healthy"
    assert report.status() is HealthStatus.HEALTHY
    assert report.duration is not None


async def test_empty_scope_returns_an_empty_healthy_report() -> None:
    registry = HealthCheckRegistry()
    registry.register_with_options(
        "db",
        HealthCheckOptions.required().with_scopes(HealthCheckScopes.readiness()),
        healthy("db"),
    )
    report = await registry.run_scope(HealthCheckScope.LIVENESS)
    assert report.components == ()
    assert report.status() is HealthStatus.HEALTHY


async def test_scope_filtering() -> None:
    registry = HealthCheckRegistry()
    for name, scopes in [
        ("process", HealthCheckScopes.liveness()),
        ("database", HealthCheckScopes.readiness_and_diagnostics()),
        ("cache", HealthCheckScopes.diagnostics()),
        ("everywhere", HealthCheckScopes.all()),
    ]:
        registry.register_with_options(
            name, HealthCheckOptions.required().with_scopes(scopes), healthy(name)
        )
    seen = {
        scope: [c.name for c in (await registry.run_scope(scope)).components]
        for scope in HealthCheckScope
    }
    assert seen == {
        HealthCheckScope.LIVENESS: ["process", "everywhere"],
        HealthCheckScope.READINESS: ["database", "everywhere"],
        HealthCheckScope.DIAGNOSTICS: ["database", "cache", "everywhere"],
    }


@pytest.mark.parametrize("seed", range(5))
async def test_checks_run_concurrently_and_return_in_registration_order(seed: int) -> None:
    rng = random.Random(seed)
    names = [f"check_{i}" for i in range(12)]
    gates = {name: asyncio.Event() for name in names}
    all_started = asyncio.Event()
    started: list[str] = []
    finished: list[str] = []

    def gated(name: str) -> Check:
        async def check() -> HealthComponentReport:
            started.append(name)
            if len(started) == len(names):
                all_started.set()
            await gates[name].wait()
            finished.append(name)
            return HealthComponentReport.healthy(name, "ok")

        return check

    registry = HealthCheckRegistry()
    for name in names:
        registry.register_with_options(name, HealthCheckOptions.required(), gated(name))
    run = asyncio.create_task(registry.run_scope(HealthCheckScope.DIAGNOSTICS), name="test-run")
    # Every check is in flight at once: none can finish before the test opens its gate.
    await all_started.wait()
    release_order = names[:]
    rng.shuffle(release_order)
    for name in release_order:
        gates[name].set()
        for _ in range(rng.randint(0, 3)):
            await asyncio.sleep(0)
    report = await run
    assert finished == release_order
    assert [c.name for c in report.components] == names
    assert report.status() is HealthStatus.HEALTHY


async def test_duration_is_filled_in_only_when_the_check_did_not_set_it() -> None:
    async def measured() -> HealthComponentReport:
        return HealthComponentReport.healthy("measured", "ok").with_duration(timedelta(hours=1))

    registry = HealthCheckRegistry()
    registry.register_with_options("measured", HealthCheckOptions.required(), measured)
    registry.register_with_options("plain", HealthCheckOptions.required(), healthy("plain"))
    measured_report, plain_report = (
        await registry.run_scope(HealthCheckScope.READINESS)
    ).components
    assert measured_report.duration == timedelta(hours=1)
    assert plain_report.duration is not None
    assert plain_report.duration >= timedelta(0)
    assert plain_report.message == "plain ok"


@pytest.mark.parametrize(
    ("requirement", "expected"),
    [
        (HealthCheckRequirement.REQUIRED, HealthStatus.UNHEALTHY),
        (HealthCheckRequirement.OPTIONAL, HealthStatus.DEGRADED),
    ],
)
async def test_timeout_is_mapped_by_requirement_and_the_check_is_cancelled(
    requirement: HealthCheckRequirement, expected: HealthStatus
) -> None:
    cancelled = asyncio.Event()

    async def slow() -> HealthComponentReport:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        raise AssertionError("unreachable")

    registry = HealthCheckRegistry(cancel_grace=GRACE)
    registry.register_with_options("slow", HealthCheckOptions(requirement, SHORT), slow)
    registry.register_with_options("fast", HealthCheckOptions(requirement, None), healthy("fast"))
    report = await registry.run_scope(HealthCheckScope.DIAGNOSTICS)
    slow_report, fast_report = report.components
    assert (slow_report.name, slow_report.status) == ("slow", expected)
    assert slow_report.message == HEALTH_CHECK_TIMED_OUT_MESSAGE
    assert slow_report.duration == SHORT
    assert fast_report.status is HealthStatus.HEALTHY
    assert report.status() is expected
    assert cancelled.is_set()
    assert registry.straggler_count == 0


@pytest.mark.parametrize(
    ("requirement", "expected"),
    [
        (HealthCheckRequirement.REQUIRED, HealthStatus.UNHEALTHY),
        (HealthCheckRequirement.OPTIONAL, HealthStatus.DEGRADED),
    ],
)
async def test_exception_is_mapped_by_requirement_with_a_fixed_message(
    requirement: HealthCheckRequirement,
    expected: HealthStatus,
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def broken() -> HealthComponentReport:
        raise RuntimeError("password=hunter2 leaked in error text")

    async def raises_timeout_itself() -> HealthComponentReport:
        raise TimeoutError("driver timeout, not ours")

    def raises_synchronously() -> Awaitable[HealthComponentReport]:
        raise KeyError("sync")

    registry = HealthCheckRegistry()
    options = HealthCheckOptions(requirement)
    registry.register_with_options("broken", options, broken)
    registry.register_with_options("own_timeout", options, raises_timeout_itself)
    registry.register_with_options("sync", options, raises_synchronously)
    with caplog.at_level(logging.WARNING, logger="aster_forge.runtime.health"):
        report = await registry.run_scope(HealthCheckScope.DIAGNOSTICS)
    assert [(c.name, c.status, c.message) for c in report.components] == [
        ("broken", expected, HEALTH_CHECK_FAILED_MESSAGE),
        ("own_timeout", expected, HEALTH_CHECK_FAILED_MESSAGE),
        ("sync", expected, HEALTH_CHECK_FAILED_MESSAGE),
    ]
    assert "hunter2" not in report.to_json()
    assert "hunter2" not in report.details()
    assert all(c.duration is not None for c in report.components)
    # The operator still gets the real error, in the log only.
    assert any("broken" in r.getMessage() and r.exc_info for r in caplog.records)


async def test_invalid_result_and_self_cancellation_are_failures() -> None:
    async def not_a_report() -> HealthComponentReport:
        return "healthy"  # type: ignore[return-value]

    async def cancels_itself() -> HealthComponentReport:
        raise asyncio.CancelledError

    registry = HealthCheckRegistry()
    registry.register_with_options("weird", HealthCheckOptions.optional(), not_a_report)
    registry.register_with_options("self_cancel", HealthCheckOptions.required(), cancels_itself)
    weird, self_cancel = (await registry.run_scope(HealthCheckScope.READINESS)).components
    assert (weird.status, weird.message) == (
        HealthStatus.DEGRADED,
        HEALTH_CHECK_INVALID_REPORT_MESSAGE,
    )
    assert (self_cancel.status, self_cancel.message) == (
        HealthStatus.UNHEALTHY,
        HEALTH_CHECK_FAILED_MESSAGE,
    )


async def test_a_late_result_after_swallowing_cancellation_is_still_a_timeout() -> None:
    async def swallow_then_report() -> HealthComponentReport:
        # A deliberately misbehaving check: it swallows the timeout's cancellation.
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.Event().wait()
        return HealthComponentReport.healthy("late", "claims to be fine")

    registry = HealthCheckRegistry(cancel_grace=timedelta(seconds=5))
    registry.register_with_options("late", HealthCheckOptions.optional(SHORT), swallow_then_report)
    (late,) = (await registry.run_scope(HealthCheckScope.DIAGNOSTICS)).components
    assert (late.status, late.message) == (HealthStatus.DEGRADED, HEALTH_CHECK_TIMED_OUT_MESSAGE)
    assert registry.straggler_count == 0


async def test_a_check_that_ignores_cancellation_does_not_hang_the_run() -> None:
    release = asyncio.Event()
    cancellations = 0

    async def stubborn() -> HealthComponentReport:
        nonlocal cancellations
        while not release.is_set():
            try:
                await release.wait()
            except asyncio.CancelledError:
                cancellations += 1  # deliberately swallowed
        return HealthComponentReport.healthy("stubborn", "finally done")

    registry = HealthCheckRegistry(cancel_grace=GRACE)
    registry.register_with_options("stubborn", HealthCheckOptions.required(SHORT), stubborn)
    registry.register_with_options("fine", HealthCheckOptions.required(), healthy("fine"))
    report = await registry.run_scope(HealthCheckScope.DIAGNOSTICS)
    # run_scope returned although the check is still running: it did not wait for it.
    assert not release.is_set()
    stuck, fine = report.components
    assert (stuck.status, stuck.message) == (HealthStatus.UNHEALTHY, HEALTH_CHECK_STUCK_MESSAGE)
    assert stuck.duration == SHORT + GRACE
    assert fine.status is HealthStatus.HEALTHY
    assert registry.straggler_count == 1
    await asyncio.sleep(0)  # let the second cancellation reach the check
    assert cancellations == 2  # the timeout, then once more when it was left behind

    release.set()
    assert await registry.aclose(timedelta(seconds=5)) == 0
    assert registry.straggler_count == 0
    assert await registry.aclose() == 0


async def test_straggler_that_finally_raises_is_consumed() -> None:
    release = asyncio.Event()

    async def stubborn() -> HealthComponentReport:
        while not release.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                await release.wait()
        raise RuntimeError("late failure")

    registry = HealthCheckRegistry(cancel_grace=GRACE)
    registry.register_with_options("stubborn", HealthCheckOptions.optional(SHORT), stubborn)
    (stuck,) = (await registry.run_scope(HealthCheckScope.DIAGNOSTICS)).components
    assert stuck.status is HealthStatus.DEGRADED
    release.set()
    assert await registry.aclose(timedelta(seconds=5)) == 0


async def test_cancelling_the_run_cancels_and_awaits_every_check() -> None:
    started = asyncio.Event()
    cleaned_up = asyncio.Event()

    async def slow() -> HealthComponentReport:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            cleaned_up.set()
        raise AssertionError("unreachable")

    registry = HealthCheckRegistry()
    registry.register_with_options("slow", HealthCheckOptions.required(), slow)
    registry.register_with_options("done", HealthCheckOptions.required(), healthy("done"))
    run = asyncio.create_task(registry.run_scope(HealthCheckScope.DIAGNOSTICS), name="test-run")
    await started.wait()
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert cleaned_up.is_set()
    assert registry.straggler_count == 0


async def test_cancelling_the_run_leaves_a_stubborn_check_as_a_straggler() -> None:
    started = asyncio.Event()
    release = asyncio.Event()

    async def stubborn() -> HealthComponentReport:
        started.set()
        while not release.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                await release.wait()
        return HealthComponentReport.healthy("stubborn", "ok")

    registry = HealthCheckRegistry(cancel_grace=GRACE)
    registry.register_with_options("stubborn", HealthCheckOptions.required(), stubborn)
    run = asyncio.create_task(registry.run_scope(HealthCheckScope.DIAGNOSTICS), name="test-run")
    await started.wait()
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert registry.straggler_count == 1
    release.set()
    assert await registry.aclose(timedelta(seconds=5)) == 0


async def test_checks_with_different_timeouts_each_get_their_own() -> None:
    started = asyncio.Event()

    registry = HealthCheckRegistry(cancel_grace=GRACE)
    registry.register_with_options(
        "short", HealthCheckOptions.optional(SHORT), never_finishes(started)
    )
    registry.register_with_options(
        "longer", HealthCheckOptions.required(SHORT * 2), never_finishes()
    )
    registry.register_with_options("ok", HealthCheckOptions.required(), healthy("ok"))
    report = await registry.run_scope(HealthCheckScope.DIAGNOSTICS)
    assert [(c.name, c.status, c.duration) for c in report.components] == [
        ("short", HealthStatus.DEGRADED, SHORT),
        ("longer", HealthStatus.UNHEALTHY, SHORT * 2),
        ("ok", HealthStatus.HEALTHY, report.components[2].duration),
    ]
    assert report.issue_summary() == "short degraded, longer unhealthy"


async def test_concurrent_runs_share_nothing() -> None:
    registry = HealthCheckRegistry()
    for i in range(5):
        registry.register_with_options(f"c{i}", HealthCheckOptions.required(), healthy(f"c{i}"))
    reports = await asyncio.gather(
        *(registry.run_scope(scope) for scope in HealthCheckScope for _ in range(3))
    )
    assert all([c.name for c in r.components] == [f"c{i}" for i in range(5)] for r in reports)
