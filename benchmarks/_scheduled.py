"""Scenario (f): the scheduled runner, many scheduled tasks at a short interval, 3 instances.

Each instance has its own engine and :class:`~aster_forge.db.ScheduledTaskDbStore` and
runs :func:`~aster_forge.tasks.run_scheduled_periodic_task` for every task (as
``LeasedScheduledRuntimeConfig`` does on the lease holder; here every instance
contends, which is the claim path under test). Reported: claimed firings per second
over all instances, firing lateness (body start minus the firing's ``scheduled_at``)
p50/p99, and the check that no firing ran twice.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass
from datetime import timedelta

import sqlalchemy as sa

from aster_forge.db import ScheduledTaskDbStore, scheduled_tasks_table
from aster_forge.runtime import CancellationToken
from aster_forge.runtime._clock import utc_now
from aster_forge.tasks import IntervalSchedule, ScheduledTaskRun
from aster_forge.tasks._scheduled import run_scheduled_periodic_task
from aster_forge.tasks._schedules import ScheduledPeriodicTask

from ._common import make_engine, percentile


@dataclass(frozen=True)
class ScheduledFigures:
    """What one scheduled run measured."""

    claims_per_second: float
    lateness_p50_ms: float
    lateness_p99_ms: float
    firings: int
    duplicates: int


async def scheduled(
    url: str, *, tasks: int = 100, interval_ms: int = 100, instances: int = 3, seconds: float = 5
) -> ScheduledFigures:
    """Run ``tasks`` scheduled tasks on ``instances`` instances for ``seconds``."""
    setup = make_engine(url)
    try:
        async with setup.begin() as conn:
            await conn.execute(sa.text("DROP TABLE IF EXISTS scheduled_tasks"))
            metadata = sa.MetaData()
            scheduled_tasks_table(metadata)
            await conn.run_sync(metadata.create_all)
    finally:
        await setup.dispose()
    fired: Counter[tuple[str, object]] = Counter()
    lateness: list[float] = []
    token = CancellationToken()
    engines = [make_engine(url, pool_size=10) for _ in range(instances)]
    interval = timedelta(milliseconds=interval_ms)

    async def body(run: ScheduledTaskRun) -> None:
        fired[(run.task.name, run.claim.scheduled_at)] += 1
        lateness.append((utc_now() - run.claim.scheduled_at).total_seconds() * 1e3)

    started = time.perf_counter()
    try:
        async with asyncio.TaskGroup() as group:
            for index, engine in enumerate(engines):
                store = ScheduledTaskDbStore(engine)
                for n in range(tasks):
                    task = ScheduledPeriodicTask(
                        namespace="bench",
                        name=f"job-{n}",
                        owner_id=f"instance-{index}",
                        schedule=IntervalSchedule(every=interval),
                        claim_ttl=timedelta(seconds=10),
                    )
                    group.create_task(
                        run_scheduled_periodic_task(store, task, body, shutdown_token=token),
                        name=f"bench-scheduled-{index}-{n}",
                    )
            await asyncio.sleep(seconds)
            token.cancel()
    finally:
        token.cancel()
        for engine in engines:
            await engine.dispose()
    elapsed = time.perf_counter() - started
    duplicates = sum(n - 1 for n in fired.values() if n > 1)
    return ScheduledFigures(
        claims_per_second=sum(fired.values()) / elapsed,
        lateness_p50_ms=percentile(lateness, 0.5),
        lateness_p99_ms=percentile(lateness, 0.99),
        firings=sum(fired.values()),
        duplicates=duplicates,
    )
