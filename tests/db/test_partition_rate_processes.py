"""A lane's per-partition rate limit across worker processes on PostgreSQL and MariaDB.

Three Forge instances (4 slots each) serve one lane limited to 3 starts per partition
per 500 ms window. Partition ``hot`` holds 30 tasks of a higher priority, ``cold`` 30
of the default: were a spent partition's tasks to block the claim, ``cold`` would wait
for ``hot`` to drain. The test collects every ``(id, partition, started_at)`` it sees
in the database throughout (a task's earlier start is overwritten when it starts
again, so it samples often), SIGKILLs one instance in the middle and waits for every
task to succeed. No window may hold more than 3 starts of one partition, and ``cold``
starts in most of the windows ``hot`` starts in. A control run without the limit shows
the sampler does see more.
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

LANE, KIND = MODES["partition_rate"].lane, MODES["partition_rate"].kind
COUNT = 3
PER_PARTITION = 30
TASKS = 2 * PER_PARTITION

pytestmark = ON_SERVERS

Start = tuple[int, str, datetime]


@pytest.fixture
async def server_engine(server: str, request: pytest.FixtureRequest) -> AsyncIterator[AsyncEngine]:
    """An engine on the server's session database, with the forge's tables."""
    url = str(request.getfixturevalue(server))
    async for engine in fleet_engine(url, "partition_rate", COUNT):
        yield engine


async def _sample(engine: AsyncEngine, starts: set[Start]) -> int:
    """Add every row's ``(id, partition, started_at)`` to ``starts``; how many succeeded."""
    t = BackgroundTaskDbStore(engine).table
    query = sa.select(t.c.id, t.c.partition_key, t.c.status, t.c.started_at).where(
        t.c.lane == LANE, t.c.started_at.is_not(None)
    )
    done = 0
    async with engine.connect() as conn:
        for task_id, partition, status, started_at in await conn.execute(query):
            starts.add((int(task_id), str(partition), started_at))
            done += status == "succeeded"
    return done


async def _run(engine: AsyncEngine, count: int, *, kill_after: int | None) -> list[Start]:
    """Run three instances until every task succeeded; every start seen."""
    url = engine.url.render_as_string(hide_password=False)
    processes = await asyncio.gather(
        *(start_worker(url, "partition_rate", count) for _ in range(3))
    )
    starts: set[Start] = set()
    killed = False
    try:
        await BackgroundTaskDbStore(engine).enqueue_many(
            [
                NewTask(KIND, LANE, partition="hot", priority=10, max_attempts=5)
                for _ in range(PER_PARTITION)
            ]
            + [NewTask(KIND, LANE, partition="cold", max_attempts=5) for _ in range(PER_PARTITION)]
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
    assert len({task_id for task_id, _, _ in starts}) == TASKS
    return sorted(starts, key=lambda start: start[2])


def _per_window(starts: list[Start]) -> Counter[tuple[str, datetime]]:
    return Counter((partition, rate_window(at, PERIOD)) for _, partition, at in starts)


async def test_no_partition_starts_more_than_its_rate_in_any_window(
    server_engine: AsyncEngine,
) -> None:
    starts = await _run(server_engine, COUNT, kill_after=TASKS // 3)
    per_window = _per_window(starts)
    (partition, window), worst = per_window.most_common(1)[0]
    assert worst <= COUNT, f"{worst} starts of {partition} in the window {window} (rate {COUNT})"
    hot = {w for p, w in per_window if p == "hot"}
    cold = {w for p, w in per_window if p == "cold"}
    # While the high-priority partition waits for its next window, the other flows.
    assert len(hot & cold) >= len(hot) // 2, f"cold started in {len(hot & cold)} of {len(hot)}"
    first_cold = min(at for _, p, at in starts if p == "cold")
    last_hot = max(at for _, p, at in starts if p == "hot")
    assert first_cold < last_hot, "cold waited for the hot partition to drain"


async def test_without_the_partition_rate_limit_the_sampler_sees_more_starts(
    server_engine: AsyncEngine,
) -> None:
    per_window = _per_window(await _run(server_engine, 0, kill_after=None))
    worst = max(per_window.values())
    assert worst > COUNT, f"at most {worst} starts of a partition in a window without a limit"
