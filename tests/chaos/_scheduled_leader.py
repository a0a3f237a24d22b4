"""One service instance for suite 4 (scheduled firings under leader churn).

Run as ``python -m tests.chaos._scheduled_leader <url> <owner> <run_id>``; prints
``started <owner>`` once running and exits 0 after SIGTERM (the suite SIGKILLs the
lease holder instead, and starts a fresh instance with a new owner id).

Every instance runs the same :class:`LeasedScheduledRuntimeConfig` with one 200 ms
scheduled task. Its body logs an *attempt* row, then inserts the firing's dedupe key
into a unique side table (the product's at-most-once pattern: a second attempt of
the same firing finds the key taken and changes nothing). The proof is read from
those tables, not from the instances (which may die at any point).
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from datetime import timedelta

import sqlalchemy as sa
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
    IntervalSchedule,
    LeasedScheduledRuntimeConfig,
    ScheduledJob,
    ScheduledTaskRun,
)

TASK = "tick"
INTERVAL = timedelta(milliseconds=200)
CLAIM_TTL = timedelta(seconds=1)
LEASE_TTL = timedelta(seconds=2)
LEASE_RENEW = timedelta(milliseconds=500)
LEASE_STANDBY = timedelta(milliseconds=500)

metadata = sa.MetaData()
leases = runtime_leases_table(metadata)
catalog = scheduled_tasks_table(metadata)
attempts = sa.Table(
    "chaos_sched_attempts",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("dedupe_key", sa.String(255), nullable=False),
    sa.Column("owner", sa.String(255), nullable=False),
    sa.Column("scheduled_at", UtcDateTime(), nullable=False),
    sa.Column("claimed_at", UtcDateTime(), nullable=False),
    sa.Column("started", sa.Double(), nullable=False),
    sa.Column("effect", sa.Boolean(), nullable=True),
)
firings = sa.Table(
    "chaos_sched_firings",
    metadata,
    sa.Column("dedupe_key", sa.String(255), primary_key=True),
    sa.Column("owner", sa.String(255), nullable=False),
)


def lease_id(run_id: str) -> str:
    """The runtime lease the instances of ``run_id`` contend for."""
    return f"{run_id}.scheduler"


async def run_firing(engine: AsyncEngine, run: ScheduledTaskRun) -> str:
    """The body: log the attempt, then apply the effect at most once per dedupe key."""
    key = run.dedupe_key.as_str()
    async with engine.begin() as conn:
        inserted = await conn.execute(
            attempts.insert().values(
                dedupe_key=key,
                owner=run.task.owner_id,
                scheduled_at=run.scheduled_at,
                claimed_at=run.claim.claimed_at,
                started=time.time(),
            )
        )
        attempt_id = inserted.inserted_primary_key[0]  # type: ignore[index]
    try:
        async with engine.begin() as conn:
            await conn.execute(firings.insert().values(dedupe_key=key, owner=run.task.owner_id))
        applied = True
    except sa.exc.IntegrityError:
        applied = False  # this firing ran before: the key absorbs the second run
    async with engine.begin() as conn:
        await conn.execute(
            attempts.update().where(attempts.c.id == attempt_id).values(effect=applied)
        )
    return "done" if applied else "duplicate"


async def main(url: str, owner: str, run_id: str) -> None:
    """Run one instance until SIGTERM."""
    engine = create_async_engine(url)
    token = CancellationToken()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, token.cancel)

    async def tick(run: ScheduledTaskRun) -> str:
        return await run_firing(engine, run)

    config = LeasedScheduledRuntimeConfig(
        namespace=run_id,
        lease_id=lease_id(run_id),
        lease_store=RuntimeLeaseDbStore(engine),
        scheduled_store=ScheduledTaskDbStore(engine),
        jobs=[ScheduledJob(kind=TASK, schedule=IntervalSchedule(every=INTERVAL), fn=tick)],
        claim_ttl=CLAIM_TTL,
        lease_ttl=LEASE_TTL,
        lease_renew_interval=LEASE_RENEW,
        lease_standby_retry_interval=LEASE_STANDBY,
        shutdown_grace=timedelta(seconds=1),
    )
    sys.stdout.write(f"started {owner}\n")
    sys.stdout.flush()
    try:
        await config.run(token, owner_id=owner)
    finally:
        await engine.dispose()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
