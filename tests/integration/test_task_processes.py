"""Real worker processes on PostgreSQL: exactly-once execution, lane limits, SIGKILL rescue."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from aster_forge import TaskStatus
from aster_forge.db import BackgroundTaskDbStore, create_background_tasks_table
from aster_forge.tasks import NewTask, TaskLease
from aster_forge.tasks._records import LEASE_EXPIRED_ERROR

from ._task_worker import EXECUTIONS_DDL, LANE_OF, LIMITS, STARTS_DDL, Kind

pytestmark = pytest.mark.postgres

ROOT = Path(__file__).resolve().parents[2]
WORKERS = 4


@pytest.fixture
async def pg(postgres_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_async_engine(
        postgres_url, connect_args={"server_settings": {"synchronous_commit": "off"}}
    )
    async with engine.begin() as conn:
        for table in ("background_tasks", "task_executions", "task_starts"):
            await conn.execute(sa.text(f"DROP TABLE IF EXISTS {table}"))
        await conn.execute(sa.text(EXECUTIONS_DDL))
        await conn.execute(sa.text(STARTS_DDL))
    await create_background_tasks_table(engine)
    try:
        yield engine
    finally:
        async with engine.begin() as conn:
            for table in ("background_tasks", "task_executions", "task_starts"):
                await conn.execute(sa.text(f"DROP TABLE IF EXISTS {table}"))
        await engine.dispose()


class Worker:
    """One worker process speaking the ``_task_worker`` stdin/stdout protocol."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    @classmethod
    async def start(cls, url: str, mode: str, lease_ttl: float) -> Worker:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.integration._task_worker",
            url,
            mode,
            str(lease_ttl),
            cwd=ROOT,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        worker = cls(proc)
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), timeout=20)
        assert line.strip() == b"ready", line
        return worker

    async def stop(self) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(b"stop\n")
        await self.proc.stdin.drain()
        out = await asyncio.wait_for(self.proc.stdout.read(), timeout=20)
        assert await self.proc.wait() == 0
        summary: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
        return summary

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)

    async def reap(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()
        await self.proc.wait()


async def _scalar(engine: AsyncEngine, sql: str) -> Any:
    async with engine.connect() as conn:
        return (await conn.execute(sa.text(sql))).scalar_one()


@pytest.mark.parametrize(
    "tasks",
    [
        # The full scenario; the generous timeout only guards a stuck run.
        pytest.param(5_000, id="5000", marks=[pytest.mark.timeout(180)]),
    ],
)
async def test_four_processes_run_tasks_exactly_once(
    pg: AsyncEngine, postgres_url: str, tasks: int
) -> None:
    workers = await asyncio.gather(
        *(Worker.start(postgres_url, "run", 10.0) for _ in range(WORKERS))
    )
    sampled: dict[str, int] = {}
    try:
        store = BackgroundTaskDbStore(pg)
        # Tasks per lane in proportion to its limit (1 : 4 : 8), so every lane is busy
        # for about the same time.
        kinds = [Kind.ONE] + [Kind.FOUR] * 4 + [Kind.EIGHT] * 8
        for start in range(0, tasks, 100):
            await store.enqueue_many(
                [
                    NewTask(kinds[n % 13], LANE_OF[kinds[n % 13]], payload_json=f'{{"n": {n}}}')
                    for n in range(start, start + 100)
                ]
            )
        async with asyncio.timeout(tasks / 20):
            while True:
                async with pg.connect() as conn:
                    rows = await conn.execute(
                        sa.text(
                            "SELECT lane, count(*) FROM background_tasks "
                            "WHERE status = 'running' GROUP BY lane"
                        )
                    )
                    for lane, count in rows:
                        sampled[lane] = max(sampled.get(lane, 0), int(count))
                    done = (
                        await conn.execute(
                            sa.text(
                                "SELECT count(*) FROM background_tasks WHERE status = 'succeeded'"
                            )
                        )
                    ).scalar_one()
                if done == tasks:
                    break
                await asyncio.sleep(0.02)
        summaries = [await worker.stop() for worker in workers]
    finally:
        for worker in workers:
            await worker.reap()
    assert await _scalar(pg, "SELECT count(*) FROM task_executions") == tasks
    assert await _scalar(pg, "SELECT count(DISTINCT task_n) FROM task_executions") == tasks
    assert (
        await _scalar(pg, "SELECT count(*) FROM background_tasks WHERE status <> 'succeeded'") == 0
    )
    assert (
        await _scalar(
            pg, "SELECT count(*) FROM background_tasks WHERE processing_token IS NOT NULL"
        )
        == 0
    )
    for summary in summaries:
        assert summary["duplicates"] == 0
        for lane, limit in LIMITS.items():
            assert summary["max_running"].get(lane.value, 0) <= limit, summary
    # Rows a worker holds per lane: its running bodies (the limit), the tasks it claimed
    # ahead for the next free slot (at most the limit) and the successes still being
    # written (at most the limit).
    for lane, limit in LIMITS.items():
        assert sampled.get(lane.value, 0) <= WORKERS * 3 * limit, sampled
    # Every process took part (claims are spread by SKIP LOCKED, not serialized).
    assert await _scalar(pg, "SELECT count(DISTINCT pid) FROM task_executions") == WORKERS


async def test_sigkilled_worker_task_is_rescued_once_and_stale_write_refused(
    pg: AsyncEngine, postgres_url: str
) -> None:
    store = BackgroundTaskDbStore(pg)
    doomed = await Worker.start(postgres_url, "hang", 1.0)
    try:
        record = (
            await store.enqueue(NewTask(Kind.FOUR, LANE_OF[Kind.FOUR], payload_json='{"n": 7}'))
        ).record
        async with asyncio.timeout(20):
            while True:
                if await _scalar(pg, "SELECT count(*) FROM task_starts"):
                    break
                await asyncio.sleep(0.02)
        running = await store.get_task(record.id)
        assert running is not None and running.status is TaskStatus.RUNNING
        assert running.processing_token and running.lease_expires_at
        stale = TaskLease(record.id, running.processing_token, running.lease_expires_at)
        doomed.kill()
        await doomed.reap()
    finally:
        await doomed.reap()
    rescuer = await Worker.start(postgres_url, "run", 1.0)
    try:
        async with asyncio.timeout(20):
            while True:
                current = await store.get_task(record.id)
                if current is not None and current.status is TaskStatus.SUCCEEDED:
                    break
                await asyncio.sleep(0.05)
        summary = await rescuer.stop()
    finally:
        await rescuer.reap()
    assert summary["duplicates"] == 0
    final = await store.get_task(record.id)
    assert final is not None and final.status is TaskStatus.SUCCEEDED
    assert final.attempt == 1, "the killed execution counts one attempt"
    assert final.last_error == LEASE_EXPIRED_ERROR
    assert await _scalar(pg, "SELECT count(*) FROM task_executions WHERE task_n = 7") == 1
    # The context numbers executions from 1: the rescued run is the second.
    assert await _scalar(pg, "SELECT attempt FROM task_executions WHERE task_n = 7") == 2
    # The killed attempt's late writes (its stale token) are refused and change nothing.
    assert await store.mark_task_succeeded(stale, '"late"', None) is False
    assert await store.renew_task_lease(stale, timedelta(seconds=30)) is None
    assert await store.release_task_for_shutdown(stale) is False
    after = await store.get_task(record.id)
    assert after == final
