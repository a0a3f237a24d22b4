"""A lane's partition limit across worker processes on PostgreSQL and MariaDB.

Three Forge instances (4 slots each, 12 in all) serve one lane with a partition limit
of 2 and tasks spread over three partitions. The test samples the running count of
every partition from the database throughout, SIGKILLs one instance in the middle and
waits for every task to succeed (the killed instance's tasks come back when their
one-second leases expire). A control run without the limit shows the sampler does see
more than 2 of a partition at once when nothing caps it.
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

LANE, KIND = MODES["partition"].lane, MODES["partition"].kind
LIMIT = 2
PARTITIONS = 3
TASKS = 150

pytestmark = ON_SERVERS


@pytest.fixture
async def server_engine(server: str, request: pytest.FixtureRequest) -> AsyncIterator[AsyncEngine]:
    """An engine on the server's session database, with the forge's tables."""
    async for engine in fleet_engine(str(request.getfixturevalue(server)), "partition", LIMIT):
        yield engine


async def _counts(engine: AsyncEngine) -> tuple[dict[str, int], int]:
    """The running count per partition, and how many tasks succeeded."""
    query = sa.text(
        "SELECT status, partition_key, count(*) FROM background_tasks WHERE lane = :lane"
        " GROUP BY status, partition_key"
    )
    running: dict[str, int] = {}
    done = 0
    async with engine.connect() as conn:
        for status, partition, n in await conn.execute(query, {"lane": LANE}):
            if status == "running":
                running[str(partition)] = int(n)
            elif status == "succeeded":
                done += int(n)
    return running, done


async def _run(engine: AsyncEngine, limit: int, *, kill_after: int | None) -> list[int]:
    """Run three instances until every task succeeded; the busiest partition's running
    count per sample."""
    url = engine.url.render_as_string(hide_password=False)
    processes = await asyncio.gather(*(start_worker(url, "partition", limit) for _ in range(3)))
    samples: list[int] = []
    killed = False
    try:
        # Enqueued once every instance runs, so all three compete for the tasks.
        await BackgroundTaskDbStore(engine).enqueue_many(
            [NewTask(KIND, LANE, partition=f"tenant-{n % PARTITIONS}") for n in range(TASKS)]
        )
        async with asyncio.timeout(90):
            while True:
                running, done = await _counts(engine)
                samples.append(max(running.values(), default=0))
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


async def test_never_more_than_the_partition_limit_run_with_an_instance_killed(
    server_engine: AsyncEngine,
) -> None:
    samples = await _run(server_engine, LIMIT, kill_after=TASKS // 3)
    assert max(samples) <= LIMIT, f"{max(samples)} of a partition ran under a limit of {LIMIT}"
    assert samples.count(LIMIT) > len(samples) // 4, "partitions rarely reached their limit"


async def test_without_the_limit_the_sampler_sees_more_of_a_partition(
    server_engine: AsyncEngine,
) -> None:
    samples = await _run(server_engine, 0, kill_after=None)
    assert max(samples) > LIMIT, f"at most {max(samples)} of a partition ran without a limit"
