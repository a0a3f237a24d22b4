"""One service instance for the multi-process scheduling tests.

Run as ``python -m tests.integration._scheduled_instance <mode> <url> <owner> <run_id>``;
prints ``started <owner>`` once running and exits 0 after SIGTERM.

Modes:
    ``leased``: a :class:`LeasedScheduledRuntimeConfig` with one 200 ms scheduled task.
    ``contend``: a bare :func:`run_scheduled_periodic_task` (no runtime lease) whose
        body outlives the claim TTL, so only claim renewal keeps the others off it.
    ``cron``: a bare :func:`run_scheduled_periodic_task` (no runtime lease) on a
        per-second cron schedule, so only the catalog claim keeps firings single.

Every body records an *attempt* row, then inserts the firing's dedupe key into a
unique side table (the product pattern: a second attempt of the same firing finds
the key taken and does nothing).
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from aster_forge.db import (
    RuntimeLeaseDbStore,
    ScheduledTaskDbStore,
    UtcDateTime,
    runtime_leases_table,
    scheduled_tasks_table,
)
from aster_forge.runtime import CancellationToken
from aster_forge.tasks import (
    CronSchedule,
    IntervalSchedule,
    LeasedScheduledRuntimeConfig,
    ScheduledJob,
    ScheduledTaskRun,
)
from aster_forge.tasks._scheduled import run_scheduled_periodic_task
from aster_forge.tasks._schedules import ScheduledPeriodicTask

TICK_INTERVAL = timedelta(milliseconds=200)
CLAIM_TTL = timedelta(seconds=1)
LEASE_TTL = timedelta(seconds=2)
LEASE_RENEW = timedelta(milliseconds=500)
LEASE_STANDBY = timedelta(milliseconds=500)
SLOW_INTERVAL = timedelta(milliseconds=300)
SLOW_BODY_SECONDS = 1.6
EVERY_SECOND = CronSchedule("* * * * * *")  # six fields: a leading seconds field

metadata = sa.MetaData()
runtime_leases_table(metadata)
scheduled_tasks_table(metadata)
attempts = sa.Table(
    "it_attempts",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("task", sa.String(64), nullable=False),
    sa.Column("dedupe_key", sa.String(255), nullable=False),
    sa.Column("owner", sa.String(255), nullable=False),
    sa.Column("scheduled_at", UtcDateTime(), nullable=False),
    sa.Column("claimed_at", UtcDateTime(), nullable=False),
    sa.Column("started", sa.Double(), nullable=False),
    sa.Column("finished", sa.Double(), nullable=True),
)
firings = sa.Table(
    "it_firings",
    metadata,
    sa.Column("dedupe_key", sa.String(255), primary_key=True),
    sa.Column("owner", sa.String(255), nullable=False),
)


def make_engine(url: str) -> AsyncEngine:
    """An engine; SQLite gets WAL and a generous busy timeout (several processes write)."""
    if not url.startswith("sqlite"):
        return create_async_engine(url)
    engine = create_async_engine(url, connect_args={"timeout": 30})

    @event.listens_for(engine.sync_engine, "connect")
    def _pragmas(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.close()

    return engine


async def record_attempt(engine: AsyncEngine, run: ScheduledTaskRun, slow: float) -> str:
    """The body: log the attempt, claim the dedupe key, optionally work for a while."""
    started = time.time()
    key = run.dedupe_key.as_str()
    async with engine.begin() as conn:
        result = await conn.execute(
            attempts.insert().values(
                task=run.task.name,
                dedupe_key=key,
                owner=run.task.owner_id,
                scheduled_at=run.scheduled_at,
                claimed_at=run.claim.claimed_at,
                started=started,
            )
        )
        attempt_id = result.inserted_primary_key[0]  # type: ignore[index]
    outcome = "done"
    try:
        async with engine.begin() as conn:
            await conn.execute(firings.insert().values(dedupe_key=key, owner=run.task.owner_id))
    except sa.exc.IntegrityError:
        outcome = "duplicate"
    if slow:
        await asyncio.sleep(slow)
    async with engine.begin() as conn:
        await conn.execute(
            attempts.update().where(attempts.c.id == attempt_id).values(finished=time.time())
        )
    return outcome


async def main(mode: str, url: str, owner: str, run_id: str) -> None:
    engine = make_engine(url)
    token = CancellationToken()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, token.cancel)
    leases = RuntimeLeaseDbStore(engine)
    catalog = ScheduledTaskDbStore(engine)
    sys.stdout.write(f"started {owner}\n")
    sys.stdout.flush()
    try:
        if mode == "leased":

            async def tick(run: ScheduledTaskRun) -> str:
                return await record_attempt(engine, run, 0)

            config = LeasedScheduledRuntimeConfig(
                namespace=run_id,
                lease_id=f"{run_id}.workers",
                lease_store=leases,
                scheduled_store=catalog,
                jobs=[
                    ScheduledJob(
                        kind="tick", schedule=IntervalSchedule(every=TICK_INTERVAL), fn=tick
                    )
                ],
                claim_ttl=CLAIM_TTL,
                lease_ttl=LEASE_TTL,
                lease_renew_interval=LEASE_RENEW,
                lease_standby_retry_interval=LEASE_STANDBY,
                shutdown_grace=timedelta(seconds=1),
            )
            await config.run(token, owner_id=owner)
        elif mode == "cron":
            every_second = ScheduledPeriodicTask(
                namespace=run_id,
                name="cron",
                owner_id=owner,
                claim_ttl=CLAIM_TTL,
                schedule=EVERY_SECOND,
            )

            async def fire(run: ScheduledTaskRun) -> str:
                return await record_attempt(engine, run, 0)

            await run_scheduled_periodic_task(catalog, every_second, fire, shutdown_token=token)
        else:
            task = ScheduledPeriodicTask(
                namespace=run_id,
                name="slow",
                owner_id=owner,
                schedule=IntervalSchedule(every=SLOW_INTERVAL),
                claim_ttl=CLAIM_TTL,
            )

            async def slow(run: ScheduledTaskRun) -> str:
                return await record_attempt(engine, run, SLOW_BODY_SECONDS)

            await run_scheduled_periodic_task(catalog, task, slow, shutdown_token=token)
    finally:
        await engine.dispose()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
