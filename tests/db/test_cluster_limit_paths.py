"""A lane's cluster limit holds across the three PostgreSQL claim paths at once.

The one-statement capped claim on asyncpg, the same statement through SQLAlchemy, and
the portable rescue-then-claim (taken for leases too long for the server's clock) race
for one lane: together they never take more than the limit.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from aster_forge import BackgroundTaskRecord, TaskStatus
from aster_forge.db import BackgroundTaskDbStore, create_background_tasks_table
from aster_forge.tasks import NewTask

from ._pg_driver_support import pg_engine

pytestmark = pytest.mark.postgres

# Past the store's saturating delta: claims with it take the portable path.
_FOREVER = timedelta(days=365 * 9000)
_TTL = timedelta(minutes=10)
CAP = 3


async def test_the_three_paths_share_the_limit(postgres_url: str) -> None:
    async with pg_engine(postgres_url) as engine:
        await create_background_tasks_table(engine)
        driver = BackgroundTaskDbStore(engine, notify=False)
        plain = BackgroundTaskDbStore(engine, notify=False)
        assert driver._pg_run is not None and plain._pg_run is not None
        assert driver._pg_run.driver
        plain._pg_run.driver = False
        await driver.enqueue_many([NewTask("k", "capped") for _ in range(60)])

        async def claim(store: BackgroundTaskDbStore, ttl: timedelta, me: int) -> int:
            got: list[BackgroundTaskRecord] = []
            for _ in range(4):
                got += await store.claim_due_for_lane("capped", 2, f"w{me}", ttl, cluster_limit=CAP)
            return len(got)

        paths = [(driver, _TTL), (plain, _TTL), (plain, _FOREVER)]
        claimed = await asyncio.gather(
            *(claim(store, ttl, i) for i in range(8) for store, ttl in paths)
        )
        page = await driver.list_tasks(status=TaskStatus.RUNNING, lane="capped", limit=100)
        assert sum(claimed) == CAP == len(page.items), claimed
