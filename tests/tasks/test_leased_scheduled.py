"""LeasedScheduledRuntimeConfig: builder, declarations, one group per lease, exactly once."""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

import pytest

from aster_forge.runtime import CancellationToken
from aster_forge.runtime.errors import RuntimeLeaseConfigError
from aster_forge.tasks import LeasedScheduledRuntime, LeasedScheduledRuntimeConfig, ScheduledTaskRun
from aster_forge.tasks.errors import ScheduledRuntimeDeclarationError, ScheduledTaskValueError
from aster_forge.testing import InMemoryRuntimeLeaseStore, InMemoryScheduledTaskStore, ManualClock

from ._schedule_support import until

LEASE = "shop.background_tasks"


class Kind(enum.StrEnum):
    MAIL_OUTBOX = "mail-outbox-dispatch"
    AUDIT_CLEANUP = "audit-cleanup"


class Registered:
    """A kind with the RegisteredRuntimeTaskKind shape."""

    def as_str(self) -> str:
        return "system-health-check"


@dataclass
class State:
    runs: list[tuple[str, ScheduledTaskRun]] = field(default_factory=list)
    recorded: list[tuple[str, str, timedelta]] = field(default_factory=list)
    workers: list[str] = field(default_factory=list)
    worker_stops: list[str] = field(default_factory=list)


async def mail(state: State, run: ScheduledTaskRun) -> str:
    state.runs.append(("mail", run))
    return "sent"


async def audit(state: State, run: ScheduledTaskRun) -> str:
    state.runs.append(("audit", run))
    raise RuntimeError("audit db down")


async def record(state: State, run: ScheduledTaskRun, outcome: str, took: timedelta) -> None:
    state.recorded.append((run.task.name, outcome, took))


def on_panic(exc: Exception) -> str:
    return "panicked"


def _config(
    state: State, leases: InMemoryRuntimeLeaseStore, catalog: InMemoryScheduledTaskStore
) -> LeasedScheduledRuntimeConfig[State, str]:
    return (
        LeasedScheduledRuntimeConfig("shop", LEASE, leases, catalog, state, on_panic, record)
        .claim_ttl(timedelta(seconds=60))
        .lease_ttl(timedelta(seconds=30))
        .lease_renew_interval(timedelta(seconds=10))
        .lease_standby_retry_interval(timedelta(seconds=5))
    )


def _declare(state: State) -> Callable[[LeasedScheduledRuntime[State, str]], None]:
    def declare(runtime: LeasedScheduledRuntime[State, str]) -> None:
        async def dispatcher(st: State, token: CancellationToken) -> None:
            st.workers.append(runtime.owner_id)
            await token.wait()
            st.worker_stops.append(runtime.owner_id)

        runtime.worker(dispatcher)
        runtime.scheduled(Kind.MAIL_OUTBOX, timedelta(seconds=10), None, mail)
        runtime.scheduled(Kind.AUDIT_CLEANUP, timedelta(seconds=60), timedelta(seconds=30), audit)

    return declare


def test_builder_returns_new_frozen_configs() -> None:
    base = LeasedScheduledRuntimeConfig(
        "shop",
        LEASE,
        InMemoryRuntimeLeaseStore(),
        InMemoryScheduledTaskStore(),
        State(),
        on_panic,
        record,
    )
    tuned = base.claim_ttl(timedelta(seconds=5)).shutdown_grace(timedelta(0))
    assert base.settings.claim_ttl == timedelta(seconds=120)
    assert tuned.settings.claim_ttl == timedelta(seconds=5)
    assert tuned.settings.shutdown_grace == timedelta(0)
    with pytest.raises(AttributeError):
        tuned.namespace = "other"  # type: ignore[misc]
    with pytest.raises(ScheduledTaskValueError):
        base.claim_ttl(timedelta(0))
    with pytest.raises(RuntimeLeaseConfigError):
        base.lease_ttl(timedelta(seconds=-1))
    with pytest.raises(RuntimeLeaseConfigError, match="shorter than ttl"):
        base.lease_ttl(timedelta(seconds=5)).lease_config("owner")
    with pytest.raises(ScheduledTaskValueError):
        LeasedScheduledRuntimeConfig(
            " ",
            LEASE,
            InMemoryRuntimeLeaseStore(),
            InMemoryScheduledTaskStore(),
            State(),
            on_panic,
            record,
        )
    with pytest.raises(ScheduledRuntimeDeclarationError, match="on_panic"):
        LeasedScheduledRuntimeConfig(
            "shop",
            LEASE,
            InMemoryRuntimeLeaseStore(),
            InMemoryScheduledTaskStore(),
            State(),
            3,  # type: ignore[arg-type]
            record,
        )


async def test_holder_runs_workers_and_scheduled_tasks_with_state_kind_and_outcomes() -> None:
    clock = ManualClock()
    leases = InMemoryRuntimeLeaseStore(clock)
    catalog = InMemoryScheduledTaskStore(clock)
    state = State()
    token = CancellationToken()
    runner = asyncio.create_task(
        _config(state, leases, catalog).run(token, _declare(state), clock=clock, owner_id="a")
    )
    await until(lambda: len(state.recorded) == 1)
    assert state.workers == ["a"]
    name, run = state.runs[0]
    assert name == "mail" and run.kind is Kind.MAIL_OUTBOX and run.task.owner_id == "a"
    assert run.task.claim_ttl == timedelta(seconds=60)
    assert run.dedupe_key.as_str().startswith("scheduled:shop:mail-outbox-dispatch:")
    assert state.recorded[0][:2] == ("mail-outbox-dispatch", "sent")
    for _ in range(30):
        await clock.advance(1)
    await until(lambda: any(n == "audit" for n, _ in state.runs))
    await until(lambda: ("audit-cleanup", "panicked") in [r[:2] for r in state.recorded])
    rows = {r.name: r for r in await catalog.list_scheduled_tasks("shop")}
    assert set(rows) == {"mail-outbox-dispatch", "audit-cleanup"}
    assert rows["audit-cleanup"].last_run_status == "failed"
    token.cancel()
    await asyncio.wait_for(runner, 5)
    assert state.worker_stops == ["a"]
    assert leases.holder(LEASE) is None


async def test_failover_runs_every_firing_once_and_only_one_group_at_a_time() -> None:
    clock = ManualClock()
    leases = InMemoryRuntimeLeaseStore(clock)
    catalog = InMemoryScheduledTaskStore(clock)
    state = State()
    tokens = {"a": CancellationToken(), "b": CancellationToken()}
    runners = {
        owner: asyncio.create_task(
            _config(state, leases, catalog).run(
                tokens[owner], _declare(state), clock=clock, owner_id=owner
            )
        )
        for owner in ("a", "b")
    }
    await until(lambda: len(state.workers) == 1)
    first = state.workers[0]
    second = "b" if first == "a" else "a"
    for _ in range(25):
        await clock.advance(1)
    tokens[first].cancel()
    await asyncio.wait_for(runners[first], 5)
    for _ in range(40):
        await clock.advance(1)
    await until(lambda: state.workers == [first, second])
    mail_runs = [run for name, run in state.runs if name == "mail"]
    keys = [run.dedupe_key for run in mail_runs]
    assert len(keys) == len(set(keys)) >= 5
    owners = [run.task.owner_id for run in mail_runs]
    assert owners == sorted(owners, key=[first, second].index)  # never interleaved
    tokens[second].cancel()
    await asyncio.wait_for(runners[second], 5)
    assert state.worker_stops == [first, second]


async def test_default_owner_ids_are_unique_per_run() -> None:
    clock = ManualClock()
    owners: list[str] = []
    for _ in range(2):
        token = CancellationToken()
        token.cancel()

        def declare(runtime: LeasedScheduledRuntime[State, str]) -> None:
            owners.append(runtime.owner_id)

        config = _config(
            State(), InMemoryRuntimeLeaseStore(clock), InMemoryScheduledTaskStore(clock)
        )
        await config.run(token, declare, clock=clock)
    assert len(set(owners)) == 2


async def test_declaration_errors() -> None:
    config = _config(State(), InMemoryRuntimeLeaseStore(), InMemoryScheduledTaskStore())
    token = CancellationToken()
    token.cancel()
    kept: list[LeasedScheduledRuntime[State, str]] = []

    def duplicate(runtime: LeasedScheduledRuntime[State, str]) -> None:
        runtime.scheduled(Kind.MAIL_OUTBOX, timedelta(seconds=1), None, mail)
        runtime.scheduled("mail-outbox-dispatch", timedelta(seconds=1), None, mail)

    with pytest.raises(ScheduledRuntimeDeclarationError, match="declared twice"):
        await config.run(token, duplicate)

    def no_wire(runtime: LeasedScheduledRuntime[State, str]) -> None:
        runtime.scheduled(42, timedelta(seconds=1), None, mail)

    with pytest.raises(ScheduledRuntimeDeclarationError, match="no wire value"):
        await config.run(token, no_wire)

    async def keep(runtime: LeasedScheduledRuntime[State, str]) -> None:
        runtime.scheduled(Registered(), timedelta(seconds=1), None, mail)
        kept.append(runtime)

    await config.run(token, keep)
    assert kept[0].worker_names() == ("scheduled:system-health-check",)
    with pytest.raises(ScheduledRuntimeDeclarationError, match="inside declare"):
        kept[0].scheduled(Kind.AUDIT_CLEANUP, timedelta(seconds=1), None, audit)

    def bad_duration(runtime: LeasedScheduledRuntime[State, str]) -> None:
        runtime.scheduled(Kind.MAIL_OUTBOX, timedelta(seconds=1), timedelta(seconds=-1), mail)

    with pytest.raises(ScheduledTaskValueError):
        await config.run(token, bad_duration)
