"""The scheduled catalog runner on cron schedules: a manual clock, an in-memory store."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from aster_forge.runtime import CancellationToken
from aster_forge.tasks import (
    CronSchedule,
    IntervalSchedule,
    LeasedScheduledRuntimeConfig,
    ScheduledJob,
    ScheduledTaskRun,
    scheduled_task_dedupe_key,
)
from aster_forge.tasks._schedules import ScheduledPeriodicTask
from aster_forge.tasks.errors import PeriodicTaskConfigError
from aster_forge.testing import (
    InMemoryRuntimeLeaseStore,
    InMemoryScheduledTaskStore,
    ManualClock,
)

from ._schedule_support import Body, start_runner, until

NS = "shop"
T0 = datetime(2030, 1, 1, 10, 2, tzinfo=UTC)


def _cron_task(
    expression: str = "*/5 * * * *", *, zone: str = "UTC", owner: str = "a"
) -> ScheduledPeriodicTask:
    return ScheduledPeriodicTask(
        namespace=NS,
        name="cleanup",
        owner_id=owner,
        claim_ttl=timedelta(seconds=30),
        schedule=CronSchedule(expression, timezone=zone),
    )


def _at(hour: int, minute: int) -> datetime:
    return T0.replace(hour=hour, minute=minute)


def _harness(
    start: datetime,
) -> tuple[ManualClock, InMemoryScheduledTaskStore, Body, CancellationToken]:
    clock = ManualClock(start)
    return clock, InMemoryScheduledTaskStore(clock), Body(clock), CancellationToken()


async def _advance_to(clock: ManualClock, when: datetime) -> None:
    await clock.advance(when - clock.now())


async def test_fires_on_cron_instants_once_each() -> None:
    clock, store, body, token = _harness(T0)
    runner = start_runner(store, _cron_task(), body, token, clock)
    await clock.wait_for_sleepers(1)
    row = await store.get_scheduled_task(NS, "cleanup")
    assert row is not None and row.next_run_at == _at(10, 5), "first firing: next instant"
    assert (row.cron_expression, row.cron_timezone) == ("*/5 * * * *", "UTC")
    assert row.schedule_text == "*/5 * * * * (UTC)" and row.interval == timedelta(0)
    assert body.runs == [], "a cron task does not fire when its row is created"
    for n in range(1, 4):
        await _advance_to(clock, _at(10, 5 * n))
        await until(lambda n=n: len(body.recorded) == n)  # type: ignore[misc]
        await clock.wait_for_sleepers(1)
    assert [r.scheduled_at for r in body.runs] == [_at(10, 5), _at(10, 10), _at(10, 15)]
    assert [r.dedupe_key for r in body.runs] == [
        scheduled_task_dedupe_key(NS, "cleanup", _at(10, m)) for m in (5, 10, 15)
    ]
    row = await store.get_scheduled_task(NS, "cleanup")
    assert row is not None and row.next_run_at == _at(10, 20) and row.run_count == 3
    token.cancel()
    await asyncio.wait_for(runner, 5)


async def test_catch_up_after_downtime_runs_once_then_the_next_instant_after_now() -> None:
    clock, store, body, token = _harness(T0)
    runner = start_runner(store, _cron_task(), body, token, clock)
    await clock.wait_for_sleepers(1)
    await _advance_to(clock, _at(10, 5))
    await until(lambda: len(body.recorded) == 1)
    token.cancel()
    await asyncio.wait_for(runner, 5)
    # Every instance is down from 10:05 to 10:37: 10:10 ... 10:35 are missed.
    await _advance_to(clock, _at(10, 37))
    token = CancellationToken()
    runner = start_runner(store, _cron_task(owner="b"), body, token, clock)
    await until(lambda: len(body.recorded) == 2)
    await clock.wait_for_sleepers(1)
    row = await store.get_scheduled_task(NS, "cleanup")
    assert row is not None and row.next_run_at == _at(10, 40), "next: first instant after now"
    await _advance_to(clock, _at(10, 39))
    assert len(body.runs) == 2, "the missed firings ran once, not once per missed instant"
    await _advance_to(clock, _at(10, 40))
    await until(lambda: len(body.recorded) == 3)
    assert [r.scheduled_at for r in body.runs] == [_at(10, 5), _at(10, 10), _at(10, 40)]
    token.cancel()
    await asyncio.wait_for(runner, 5)


async def test_two_instances_run_each_cron_firing_once() -> None:
    clock, store, body, token = _harness(T0)
    tasks = [_cron_task("* * * * *", owner=owner) for owner in ("a", "b")]
    runners = [start_runner(store, task, body, token, clock) for task in tasks]
    for _ in range(5 * 60):
        await clock.wait_for_sleepers(2)
        await clock.advance(1)
    await until(lambda: len(body.recorded) == 5)
    keys = body.keys()
    assert len(keys) == len(set(keys)) == 5
    assert [r.scheduled_at for r in body.runs] == [_at(10, m) for m in range(3, 8)]
    token.cancel()
    await asyncio.wait_for(asyncio.gather(*runners), 5)


async def test_runner_follows_the_timezone_across_spring_forward() -> None:
    clock, store, body, token = _harness(datetime(2026, 3, 28, 12, tzinfo=UTC))
    runner = start_runner(store, _cron_task("30 2 * * *", zone="Europe/Paris"), body, token, clock)
    for firing in (datetime(2026, 3, 29, 1, tzinfo=UTC), datetime(2026, 3, 30, 0, 30, tzinfo=UTC)):
        await clock.wait_for_sleepers(1)
        await _advance_to(clock, firing)
        await until(lambda firing=firing: bool(body.runs) and body.runs[-1].scheduled_at == firing)  # type: ignore[misc]
    token.cancel()
    await clock.advance(1)
    await asyncio.wait_for(runner, 5)
    assert len(body.runs) == 2


async def test_a_changed_cron_schedule_replaces_the_pending_firing() -> None:
    clock = ManualClock(T0)
    store = InMemoryScheduledTaskStore(clock)
    await store.ensure_scheduled_task(NS, "job", CronSchedule("0 3 * * *"))
    row = await store.ensure_scheduled_task(NS, "job", CronSchedule("*/5 * * * *"))
    assert row.next_run_at == _at(10, 5) and row.cron_expression == "*/5 * * * *"
    row = await store.ensure_scheduled_task(NS, "job", IntervalSchedule(every=timedelta(hours=1)))
    assert row.cron_expression is None and row.interval == timedelta(hours=1)
    assert row.next_run_at == _at(10, 5), "an interval change keeps the pending firing"


def test_task_takes_a_schedule_value() -> None:
    cron = CronSchedule("* * * * *")
    with pytest.raises(PeriodicTaskConfigError, match="IntervalSchedule or"):
        ScheduledPeriodicTask(
            namespace=NS,
            name="x",
            owner_id="a",
            schedule="*/5 * * * *",  # type: ignore[arg-type]
        )
    task = ScheduledPeriodicTask(namespace=NS, name="x", owner_id="a", schedule=cron)
    assert task.schedule is cron


async def _noop(run: ScheduledTaskRun) -> str:
    return "ok"


def _config(*jobs: ScheduledJob[str]) -> LeasedScheduledRuntimeConfig[str]:
    return LeasedScheduledRuntimeConfig(
        namespace=NS,
        lease_id="shop.background_tasks",
        lease_store=InMemoryRuntimeLeaseStore(),
        scheduled_store=InMemoryScheduledTaskStore(),
        jobs=jobs,
    )


async def test_leased_runtime_declares_cron_and_interval_schedules() -> None:
    config = _config(
        ScheduledJob(kind="report", schedule=CronSchedule("0 6 * * 1-5", "Europe/Paris"), fn=_noop),
        ScheduledJob(kind="poll", schedule=IntervalSchedule(every=timedelta(minutes=1)), fn=_noop),
        ScheduledJob(kind="tick", schedule=IntervalSchedule(every=timedelta(seconds=10)), fn=_noop),
    )
    assert [job.schedule.text for job in config.jobs] == [
        "0 6 * * 1-5 (Europe/Paris)",
        "every 1m",
        "every 10s",
    ]
    with pytest.raises(PeriodicTaskConfigError, match="not callable"):
        ScheduledJob(kind="x", schedule=CronSchedule("* * * * *"), fn=None)  # type: ignore[arg-type]
    with pytest.raises(PeriodicTaskConfigError, match="IntervalSchedule or"):
        _config(ScheduledJob(kind="x", schedule=timedelta(1), fn=_noop))  # type: ignore[arg-type]
