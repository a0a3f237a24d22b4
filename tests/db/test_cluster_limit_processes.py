"""A lane's cluster limit across worker processes on PostgreSQL and MariaDB.

Three Forge instances (4 slots each) serve one lane with a cluster limit of 3. The
test samples ``count(*)`` of the lane's running rows from the database throughout,
SIGKILLs one instance in the middle and waits for every task to succeed (the killed
instance's tasks come back when their one-second leases expire). A control run
without the limit shows the sampler does see more than 3 at once when nothing caps
the lane.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from aster_forge.db import BackgroundTaskDbStore
from aster_forge.tasks import NewTask

from ._fleet import ON_SERVERS, fleet_engine, start_worker
from ._fleet_worker import MODES

LANE, KIND = MODES["cluster"].lane, MODES["cluster"].kind
CAP = 3
TASKS = 150

pytestmark = ON_SERVERS


@pytest.fixture
async def server_engine(server: str, request: pytest.FixtureRequest) -> AsyncIterator[AsyncEngine]:
    """An engine on the server's session database, with the forge's tables."""
    async for engine in fleet_engine(str(request.getfixturevalue(server)), "cluster", CAP):
        yield engine


async def _counts(engine: AsyncEngine) -> dict[str, int]:
    query = sa.text(
        "SELECT status, count(*) FROM background_tasks WHERE lane = :lane GROUP BY status"
    )
    async with engine.connect() as conn:
        return {str(s): int(n) for s, n in await conn.execute(query, {"lane": LANE})}


async def _run(engine: AsyncEngine, limit: int, *, kill_after: int | None) -> list[int]:
    """Run three instances until every task succeeded; the running count per sample."""
    url = engine.url.render_as_string(hide_password=False)
    processes = await asyncio.gather(*(start_worker(url, "cluster", limit) for _ in range(3)))
    samples: list[int] = []
    killed = False
    try:
        # Enqueued once every instance runs, so all three compete for the tasks.
        await BackgroundTaskDbStore(engine).enqueue_many(
            [NewTask(KIND, LANE) for _ in range(TASKS)]
        )
        async with asyncio.timeout(90):
            while True:
                counts = await _counts(engine)
                samples.append(counts.get("running", 0))
                done = counts.get("succeeded", 0)
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
    return samples


async def test_never_more_than_the_cluster_limit_run_with_an_instance_killed(
    server_engine: AsyncEngine,
) -> None:
    samples = await _run(server_engine, CAP, kill_after=TASKS // 3)
    assert max(samples) <= CAP, f"{max(samples)} running under a cluster limit of {CAP}"
    assert samples.count(CAP) > len(samples) // 4, "the lane rarely reached its limit"


async def test_without_the_limit_the_sampler_sees_more_running(
    server_engine: AsyncEngine,
) -> None:
    samples = await _run(server_engine, 0, kill_after=None)
    assert max(samples) > CAP, f"at most {max(samples)} ran at once without a limit"
