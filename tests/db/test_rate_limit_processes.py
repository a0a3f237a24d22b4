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
import sys
from collections import Counter
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from aster_forge.db import BackgroundTaskDbStore
from aster_forge.tasks import NewTask
from aster_forge.tasks._rate_limit import rate_window

from ..conftest import drop_all_tables
from ._rate_worker import KIND, LANE, PERIOD, build

ROOT = Path(__file__).resolve().parents[2]
COUNT = 5
TASKS = 60

pytestmark = pytest.mark.parametrize(
    "server",
    [
        pytest.param("postgres_url", id="postgres", marks=pytest.mark.postgres),
        pytest.param("mysql_url", id="mysql", marks=pytest.mark.mysql),
    ],
)


@pytest.fixture
async def server_engine(server: str, request: pytest.FixtureRequest) -> AsyncIterator[AsyncEngine]:
    """An engine on the server's session database, with the forge's tables."""
    url = str(request.getfixturevalue(server))
    engine = create_async_engine(url)
    forge = build(url, COUNT)
    try:
        await drop_all_tables(engine)
        await forge.migrate()
        yield engine
    finally:
        await forge.aclose()
        await drop_all_tables(engine)
        await engine.dispose()


async def _start(url: str, count: int) -> asyncio.subprocess.Process:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.db._rate_worker",
        url,
        str(count),
        cwd=str(ROOT),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    assert process.stdout is not None
    line = await asyncio.wait_for(process.stdout.readline(), 60)
    assert line.strip() == b"ready", line
    return process


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
    processes = await asyncio.gather(*(_start(url, count) for _ in range(3)))
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
