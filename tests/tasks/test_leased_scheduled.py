"""LeasedScheduledRuntimeConfig: checked declarations, one group per lease, exactly once."""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest

from aster_forge.runtime import CancellationToken
from aster_forge.runtime.errors import RuntimeLeaseConfigError
from aster_forge.tasks import (
    IntervalSchedule,
    LeasedScheduledRuntimeConfig,
    ScheduledJob,
    ScheduledTaskRun,
)
from aster_forge.tasks.errors import (
    PeriodicTaskConfigError,
    ScheduledTaskValueError,
    TaskDedupeKeyError,
)
from aster_forge.testing import InMemoryRuntimeLeaseStore, InMemoryScheduledTaskStore, ManualClock

from ._schedule_support import until

LEASE = "shop.background_tasks"


class Kind(enum.StrEnum):
    MAIL_OUTBOX = "mail-outbox-dispatch"
    AUDIT_CLEANUP = "audit-cleanup"


@dataclass
class State:
    runs: list[tuple[str, ScheduledTaskRun]] = field(default_factory=list)
    recorded: list[tuple[str, str, timedelta]] = field(default_factory=list)
    workers: list[str] = field(default_factory=list)
    worker_stops: list[str] = field(default_factory=list)

    async def mail(self, run: ScheduledTaskRun) -> str:
        self.runs.append(("mail", run))
        return "sent"

    async def audit(self, run: ScheduledTaskRun) -> str:
        self.runs.append(("audit", run))
        raise RuntimeError("audit db down")

    async def record(self, run: ScheduledTaskRun, outcome: str, took: timedelta) -> None:
        self.recorded.append((run.task.name, outcome, took))

    def worker(self, owner: str) -> Callable[[CancellationToken], Awaitable[None]]:
        async def dispatcher(token: CancellationToken) -> None:
            self.workers.append(owner)
            await token.wait()
            self.worker_stops.append(owner)

        return dispatcher


def on_exception(exc: Exception) -> str:
    return "panicked"


def _config(
    state: State,
    leases: InMemoryRuntimeLeaseStore,
    catalog: InMemoryScheduledTaskStore,
    owner: str = "a",
    **changes: Any,
) -> LeasedScheduledRuntimeConfig[str]:
    options: dict[str, Any] = {
        "namespace": "shop",
        "lease_id": LEASE,
        "lease_store": leases,
        "scheduled_store": catalog,
        "jobs": [
            ScheduledJob(
                kind=Kind.MAIL_OUTBOX,
                schedule=IntervalSchedule(every=timedelta(seconds=10)),
                fn=state.mail,
            ),
            ScheduledJob(
                kind=Kind.AUDIT_CLEANUP,
                schedule=IntervalSchedule(
                    every=timedelta(seconds=60), initial_delay=timedelta(seconds=30)
                ),
                fn=state.audit,
            ),
        ],
        "workers": {"dispatcher": state.worker(owner)},
        "on_exception": on_exception,
        "record_outcome": state.record,
        "claim_ttl": timedelta(seconds=60),
        "lease_ttl": timedelta(seconds=30),
        "lease_renew_interval": timedelta(seconds=10),
        "lease_standby_retry_interval": timedelta(seconds=5),
    }
    options.update(changes)
    return LeasedScheduledRuntimeConfig(**options)


def test_config_is_a_checked_frozen_value() -> None:
    state = State()
    leases, catalog = InMemoryRuntimeLeaseStore(), InMemoryScheduledTaskStore()
    base = _config(state, leases, catalog)
    assert base.worker_names() == (
        "dispatcher",
        "scheduled:mail-outbox-dispatch",
        "scheduled:audit-cleanup",
    )
    assert LeasedScheduledRuntimeConfig(
        namespace="shop", lease_id=LEASE, lease_store=leases, scheduled_store=catalog
    ).claim_ttl == timedelta(seconds=120)
    with pytest.raises(AttributeError):
        base.namespace = "other"  # type: ignore[misc]
    with pytest.raises(ScheduledTaskValueError):
        _config(state, leases, catalog, claim_ttl=timedelta(0))
    with pytest.raises(ScheduledTaskValueError):
        _config(state, leases, catalog, shutdown_grace=timedelta(seconds=-1))
    with pytest.raises(RuntimeLeaseConfigError):
        _config(state, leases, catalog, lease_ttl=timedelta(seconds=-1))
    with pytest.raises(RuntimeLeaseConfigError, match="shorter than ttl"):
        _config(state, leases, catalog, lease_ttl=timedelta(seconds=5))
    with pytest.raises(ScheduledTaskValueError):
        _config(state, leases, catalog, namespace=" ")
    with pytest.raises(TaskDedupeKeyError):
        _config(state, leases, catalog, namespace="n" * 65)
    with pytest.raises(PeriodicTaskConfigError, match="on_exception"):
        _config(state, leases, catalog, on_exception=3)


async def test_holder_runs_workers_and_scheduled_tasks_with_kind_and_outcomes() -> None:
    clock = ManualClock()
    leases = InMemoryRuntimeLeaseStore(clock)
    catalog = InMemoryScheduledTaskStore(clock)
    state = State()
    token = CancellationToken()
    runner = asyncio.create_task(
        _config(state, leases, catalog).run(token, clock=clock, owner_id="a"), name="runner:a"
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
            _config(state, leases, catalog, owner).run(tokens[owner], clock=clock, owner_id=owner),
            name=f"runner:{owner}",
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
    assert leases.holder(LEASE) is None  # released on shutdown
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


async def test_lease_loss_stops_the_whole_group() -> None:
    clock = ManualClock()
    leases = InMemoryRuntimeLeaseStore(clock)
    state = State()
    token = CancellationToken()
    config = _config(state, leases, InMemoryScheduledTaskStore(clock), jobs=[])
    runner = asyncio.create_task(config.run(token, clock=clock, owner_id="a"), name="runner:a")
    await until(lambda: state.workers == ["a"])
    # Another owner takes the lease over (e.g. after a long pause of this process).
    assert await leases.release(LEASE, "a")
    assert await leases.try_acquire(LEASE, "intruder", timedelta(seconds=300)) is not None
    await clock.wait_for_sleepers(1)
    await clock.advance(10)  # the next renewal finds the lease lost
    await until(lambda: state.worker_stops == ["a"])
    assert not token.cancelled  # the process keeps running, as a standby
    assert leases.holder(LEASE) == "intruder"
    token.cancel()
    await asyncio.wait_for(runner, 5)


async def test_default_owner_ids_are_unique_per_run() -> None:
    clock = ManualClock()
    state = State()
    for _ in range(2):
        token = CancellationToken()
        config = _config(state, InMemoryRuntimeLeaseStore(clock), InMemoryScheduledTaskStore(clock))
        runner = asyncio.create_task(config.run(token, clock=clock), name="runner")
        count = len(state.runs)
        await until(lambda count=count: len(state.runs) == count + 1)  # type: ignore[misc]
        token.cancel()
        await asyncio.wait_for(runner, 5)
    owners = [run.task.owner_id for _, run in state.runs]
    assert len(set(owners)) == 2


def test_declaration_errors() -> None:
    state = State()
    leases, catalog = InMemoryRuntimeLeaseStore(), InMemoryScheduledTaskStore()
    every = IntervalSchedule(every=timedelta(seconds=1))
    mail = ScheduledJob(kind=Kind.MAIL_OUTBOX, schedule=every, fn=state.mail)
    same = ScheduledJob(kind="mail-outbox-dispatch", schedule=every, fn=state.mail)
    assert same.name == mail.name
    with pytest.raises(PeriodicTaskConfigError, match="declared twice"):
        _config(state, leases, catalog, jobs=[mail, same])
    with pytest.raises(PeriodicTaskConfigError, match="declared twice"):
        _config(state, leases, catalog, jobs=[mail], workers={"scheduled:" + mail.name: state.mail})
    with pytest.raises(PeriodicTaskConfigError, match="must be a str"):
        ScheduledJob(kind=42, schedule=every, fn=state.mail)  # type: ignore[arg-type]
    with pytest.raises(PeriodicTaskConfigError, match="ScheduledJob values"):
        _config(state, leases, catalog, jobs=[state.mail])
    with pytest.raises(PeriodicTaskConfigError, match="non-empty name"):
        _config(state, leases, catalog, workers={" ": state.worker("a")})
    with pytest.raises(PeriodicTaskConfigError, match="non-empty name"):
        _config(state, leases, catalog, workers={"x": 3})
    with pytest.raises(ScheduledTaskValueError):
        ScheduledJob(
            kind=Kind.MAIL_OUTBOX,
            schedule=IntervalSchedule(every=every.every, initial_delay=timedelta(seconds=-1)),
            fn=state.mail,
        )
