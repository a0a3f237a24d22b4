"""Retention is part of a forge: on by default with documented ages, run once per
cluster by the instance holding the scheduler lease, off with ``retention=None``."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from aster_forge import (
    ClassifiedTaskError,
    Forge,
    ForgeDeclarationError,
    TaskRetention,
    TaskRetryClass,
    TaskStatus,
)
from aster_forge.forge._worker import ForgeWorker
from aster_forge.runtime import AsterRuntime, CancellationToken
from aster_forge.testing import ManualClock


def _forge(url: str, **options: object) -> Forge:
    forge = Forge(url, name="shop", create_tables=True, **options)  # type: ignore[arg-type]

    @forge.task(max_attempts=1)
    async def work(payload: int) -> int:
        if payload < 0:
            raise ClassifiedTaskError("refused", TaskRetryClass.PERMANENT)
        return payload

    return forge


def _tasks(runtime: AsterRuntime) -> tuple[str, ...]:
    [workers] = [d for d in runtime.descriptors() if d.name == "background_tasks"]
    return workers.tasks


def test_retention_is_on_by_default_with_the_documented_ages() -> None:
    forge = _forge("memory://")
    assert forge.retention == TaskRetention()
    assert forge.retention is not None
    ages = (forge.retention.succeeded, forge.retention.cancelled, forge.retention.failed)
    assert ages == (timedelta(days=7), timedelta(days=7), timedelta(days=30))
    # No periodic job is declared: the leased scheduler runs for retention alone.
    assert "scheduler" in _tasks(forge.runtime(install_signal_handlers=False))


def test_retention_none_turns_it_off() -> None:
    forge = _forge("memory://", retention=None)
    assert forge.retention is None
    assert "scheduler" not in _tasks(forge.runtime(install_signal_handlers=False))
    with pytest.raises(ForgeDeclarationError, match="retention= takes a TaskRetention"):
        Forge("memory://", retention=timedelta(days=7))  # type: ignore[arg-type]


async def _age(forge: Forge, task_id: int, days: int) -> None:
    """Make a finished task look ``days`` old (the store compares with its own now)."""
    engine = forge.backend.engine
    assert engine is not None
    table = forge.backend.tasks_table
    finished = datetime.now(UTC) - timedelta(days=days)
    async with engine.begin() as conn:
        await conn.execute(
            sa.update(table).where(table.c.id == task_id).values(finished_at=finished)
        )


async def test_the_scheduler_lease_holder_prunes_once_per_cluster(forge_url: str) -> None:
    # Two instances on one database; the default ages, a pass every second of the
    # test's clock (shorter than the lease's renewal, so only the retention loop wakes).
    retention = TaskRetention(interval=timedelta(seconds=1))
    first, second = _forge(forge_url, retention=retention), _forge(forge_url, retention=retention)
    work = first.tasks[0]
    old_ok, new_ok, old_failed = [(await work.enqueue(n)).task_id for n in (1, 2, -1)]
    drained = await first.drain()
    assert (drained.succeeded, drained.failed) == (2, 1)
    await _age(first, old_ok, days=8)
    await _age(first, old_failed, days=8)
    clock = ManualClock()
    workers = [ForgeWorker(forge, clock=clock) for forge in (first, second)]
    # The leased scheduler alone (no dispatcher polling beside it): what the retention
    # job runs in, on whichever instance holds the lease.
    stop = CancellationToken()
    running = [
        asyncio.create_task(worker._schedule(stop), name=f"retention-test:scheduler:{n}")
        for n, worker in enumerate(workers)
    ]
    try:
        pruned = [
            asyncio.create_task(worker.pruned.wait(), name=f"retention-test:pruned:{n}")
            for n, worker in enumerate(workers)
        ]
        done, waiting = await asyncio.wait(pruned, timeout=30, return_when="FIRST_COMPLETED")
        for task in waiting:
            task.cancel()
        await asyncio.gather(*pruned, return_exceptions=True)
        assert done, "no instance ran a retention pass"
        [holder] = [worker for worker in workers if worker.last_prune is not None]
        report = holder.last_prune
        assert report is not None
        assert report.removed[TaskStatus.SUCCEEDED] == 1
        assert report.removed[TaskStatus.FAILED] == 0  # kept 30 days
        assert await first.get_task(old_ok) is None
        assert await first.get_task(new_ok) is not None
        assert await first.get_task(old_failed) is not None
        # Every interval after that (a controlled clock: no waiting), still on one instance.
        await _age(first, new_ok, days=8)
        holder.pruned.clear()
        await clock.advance(retention.interval)
        await asyncio.wait_for(holder.pruned.wait(), 30)
        assert holder.last_prune is not None
        assert holder.last_prune.removed[TaskStatus.SUCCEEDED] == 1
        assert await first.get_task(new_ok) is None
        [standby] = [worker for worker in workers if worker is not holder]
        assert standby.last_prune is None
    finally:
        stop.cancel()
        await asyncio.wait_for(asyncio.gather(*running), 30)
        for forge in (first, second):
            await forge.aclose()
