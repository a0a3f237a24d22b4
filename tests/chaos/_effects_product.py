"""The exactly-once chaos product: ``aster-forge worker tests.chaos._effects_product:forge``.

Each task inserts one ledger row through ``ctx.transaction()``. The ledger has no unique
key, so a body whose writes were kept twice shows as a second row. The database URL
comes from ``CHAOS_EFFECTS_URL``; leases are short so a killed worker's tasks come back
within seconds.
"""

from __future__ import annotations

import asyncio
import os
from datetime import timedelta

import sqlalchemy as sa

from aster_forge import Forge, ForgeWorkerSettings, TaskExecutionContext
from aster_forge.tasks import DispatchPollConfig

URL_ENV = "CHAOS_EFFECTS_URL"
LEASE = timedelta(seconds=2)

forge = Forge(
    os.environ.get(URL_ENV, "sqlite:///./chaos-effects.db"),
    name="chaos-effects",
    default_concurrency=8,
    settings=ForgeWorkerSettings(
        task_lease_ttl=LEASE,
        poll=DispatchPollConfig(
            base_interval=timedelta(milliseconds=20), max_interval=timedelta(milliseconds=200)
        ),
    ),
)
ledger = sa.Table(
    "chaos_ledger",
    forge.metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True),
    sa.Column("task_id", sa.BigInteger, nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),
)


@forge.task(max_attempts=10)
async def book(ctx: TaskExecutionContext, payload: int) -> int:
    async with ctx.transaction() as conn:
        await conn.execute(sa.insert(ledger).values(task_id=ctx.task_id, attempt=ctx.attempt))
    # Work after the write: a kill here leaves the write uncommitted, never half-done.
    await asyncio.sleep(0.05)
    return payload
