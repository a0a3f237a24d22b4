"""A lane's rate limit across worker processes on PostgreSQL and MariaDB.

Three Forge instances (4 slots each) serve one lane limited to 5 starts per 500 ms
window. The test collects every ``started_at`` it sees in the database throughout (a
task's earlier start is overwritten when it starts again, so it samples often),
SIGKILLs one instance in the middle and waits for every task to succeed (the killed
instance's tasks start again when their one-second leases expire). No window may hold
more than 5 starts. A control run without the limit shows the sampler does see more.
"""

from __future__ import annotations

import asyncio
import signal
from collections import Counter
from collections.abc import AsyncIterator
from datetime import datetime

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from aster_forge.db import BackgroundTaskDbStore
from aster_forge.tasks import NewTask
from aster_forge.tasks._rate_limit import rate_window

from ._fleet import ON_SERVERS, fleet_engine, start_worker
from ._fleet_worker import MODES, PERIOD

LANE, KIND = MODES["rate"].lane, MODES["rate"].kind
COUNT = 5
TASKS = 60

pytestmark = ON_SERVERS


@pytest.fixture
async def server_engine(server: str, request: pytest.FixtureRequest) -> AsyncIterator[AsyncEngine]:
    """An engine on the server's session database, with the forge's tables."""
    async for engine in fleet_engine(str(request.getfixturevalue(server)), "rate", COUNT):
        yield engine


async def _sample(engine: AsyncEngine, starts: set[tuple[int, datetime]]) -> int:
    """Add every row's ``(id, started_at)`` to ``starts``; how many tasks succeeded."""
    store_table = BackgroundTaskDbStore(engine).table
    query = sa.select(store_table.c.id, store_table.c.status, store_table.c.started_at).where(
        store_table.c.lane == LANE, store_table.c.started_at.is_not(None)
    )
    done = 0
    async with engine.connect() as conn:
        for task_id, status, started_at in await conn.execute(query):
            starts.add((int(task_id), started_at))
            done += status == "succeeded"
    return done


async def _run(engine: AsyncEngine, count: int, *, kill_after: int | None) -> Counter[datetime]:
    """Run three instances until every task succeeded; the starts seen per window."""
    url = engine.url.render_as_string(hide_password=False)
    processes = await asyncio.gather(*(start_worker(url, "rate", count) for _ in range(3)))
    starts: set[tuple[int, datetime]] = set()
    killed = False
    try:
        await BackgroundTaskDbStore(engine).enqueue_many(
            [NewTask(KIND, LANE, max_attempts=5) for _ in range(TASKS)]
        )
        async with asyncio.timeout(120):
            while True:
                done = await _sample(engine, starts)
                if done == TASKS:
                    break
                if kill_after is not None and not killed and done >= kill_after:
                    processes[0].send_signal(signal.SIGKILL)
                    killed = True
                await asyncio.sleep(0.005)
    finally:
        for process in processes:
            if process.returncode is None:
                process.send_signal(signal.SIGKILL)
            await process.wait()
    assert kill_after is None or killed
    assert len({task_id for task_id, _ in starts}) == TASKS
    return Counter(rate_window(at, PERIOD) for _, at in starts)


async def test_no_window_sees_more_starts_than_the_rate_with_an_instance_killed(
    server_engine: AsyncEngine,
) -> None:
    per_window = await _run(server_engine, COUNT, kill_after=TASKS // 3)
    worst = max(per_window.values())
    assert worst <= COUNT, f"{worst} starts in one {PERIOD} window under a rate of {COUNT}"
    full = sum(1 for n in per_window.values() if n == COUNT)
    assert full >= len(per_window) // 2, f"only {full} of {len(per_window)} windows were full"


async def test_without_the_rate_limit_the_sampler_sees_more_starts(
    server_engine: AsyncEngine,
) -> None:
    per_window = await _run(server_engine, 0, kill_after=None)
    worst = max(per_window.values())
    assert worst > COUNT, f"at most {worst} starts in a window without a rate limit"
