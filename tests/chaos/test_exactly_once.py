"""Exactly-once effects on PostgreSQL: two ``aster-forge worker`` processes run tasks that
each insert one ledger row through ``ctx.transaction()``; one worker is SIGKILLed while
it runs tasks and restarted. The ledger (no unique key) must end with exactly one row
per task: none missing, none duplicated, no task left unfinished.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from aster_forge.db import BackgroundTaskDbStore
from aster_forge.tasks import NewTask

from ..cli._support import free_port
from . import _effects_product as product
from .report import ScenarioResult, record

pytestmark = [pytest.mark.postgres, pytest.mark.parametrize("backend", ["postgres"], indirect=True)]

REPO_ROOT = Path(__file__).resolve().parents[2]
_CLI = Path(sys.executable).parent / "aster-forge"
_COUNTS = sa.text("SELECT status, count(*) FROM background_tasks GROUP BY status")
_LEDGER = sa.text("SELECT count(*), count(DISTINCT task_id) FROM chaos_ledger")
_BUSY = sa.text(
    "SELECT claimed_by, count(*) FROM background_tasks WHERE status = 'running' GROUP BY claimed_by"
)
_RETRIED = sa.text("SELECT count(*) FROM background_tasks WHERE attempt > 0")


async def _start(url: str, log: Path) -> asyncio.subprocess.Process:
    """Start a worker and wait until it serves ``/livez`` (its signal handlers are set)."""
    env = {**os.environ, product.URL_ENV: url, "PYTHONPATH": str(REPO_ROOT)}
    port = free_port()
    with log.open("ab") as out:
        process = await asyncio.create_subprocess_exec(
            str(_CLI),
            "worker",
            "tests.chaos._effects_product:forge",
            "--loop",
            "asyncio",
            "--http",
            f"127.0.0.1:{port}",
            cwd=REPO_ROOT,
            env=env,
            stdout=out,
            stderr=out,
        )
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
        for _ in range(600):
            assert process.returncode is None, f"the worker exited: see {log}"
            try:
                if (await client.get("/livez")).status_code == 200:
                    return process
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.05)
    raise AssertionError(f"the worker did not start: see {log}")


def _pid(owner: str) -> int:
    parts = owner.split(":")
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else -1


async def _scalar(engine: AsyncEngine, query: sa.TextClause) -> int:
    async with engine.connect() as conn:
        return int((await conn.execute(query)).scalar_one())


async def _counts(engine: AsyncEngine) -> dict[str, int]:
    async with engine.connect() as conn:
        return {str(s): int(n) for s, n in await conn.execute(_COUNTS)}


async def _until(engine: AsyncEngine, done: int, *, within: float) -> dict[str, int]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        counts = await _counts(engine)
        if counts.get("succeeded", 0) >= done or loop.time() > deadline:
            return counts
        await asyncio.sleep(0.05)


async def _exactly_once(
    engine: AsyncEngine, database_url: str, tmp_path: Path, *, total: int, long: bool
) -> None:
    async with engine.begin() as conn:
        await conn.run_sync(product.forge.metadata.create_all)
    store = BackgroundTaskDbStore(engine)
    for start in range(0, total, 1000):
        await store.enqueue_many(
            [
                NewTask("book", "default", payload_json=str(i), max_attempts=10)
                for i in range(start, min(start + 1000, total))
            ]
        )
    workers = [await _start(database_url, tmp_path / f"worker-{n}.log") for n in range(2)]
    in_flight_at_kill = 0
    try:
        await _until(engine, total // 3, within=120)
        # Kill a worker while it runs tasks (their bodies may hold open transactions):
        # its claims name it ("<host>:<pid>:<random>").
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        pids = {process.pid: n for n, process in enumerate(workers)}
        while True:
            async with engine.connect() as conn:
                busy = {str(owner): int(n) for owner, n in await conn.execute(_BUSY)}
            running = {pids[pid]: n for owner, n in busy.items() if (pid := _pid(owner)) in pids}
            if running:
                break
            assert loop.time() < deadline, f"no worker was running a task: {busy} {pids}"
            await asyncio.sleep(0.01)
        victim = max(running, key=running.__getitem__)
        in_flight_at_kill = running[victim]
        workers[victim].send_signal(signal.SIGKILL)
        await workers[victim].wait()
        workers[victim] = await _start(database_url, tmp_path / "worker-restarted.log")
        counts = await _until(engine, total, within=120 + total / 20)
    finally:
        for process in workers:
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
        codes = [await asyncio.wait_for(p.wait(), 60) for p in workers]
    rows, distinct = await _ledger(engine)
    retried = await _scalar(engine, _RETRIED)
    stuck = total - counts.get("succeeded", 0)
    problems = []
    if rows != total or distinct != total:
        problems.append(f"ledger rows {rows}, distinct tasks {distinct}, expected {total}")
    if stuck:
        problems.append(f"{stuck} tasks unfinished {counts}")
    if retried == 0:
        problems.append("the kill interrupted no task: nothing was rescued")
    if any(code != 0 for code in codes):
        problems.append(f"exit codes {codes}")
    record(
        ScenarioResult(
            scenario="exactly-once effects (2 worker processes, postgres)",
            tasks=total,
            faults=f"1 SIGKILL + restart with {in_flight_at_kill} tasks running",
            lost=max(total - distinct, 0),
            duplicated=rows - distinct,
            stuck=stuck,
            result="pass" if not problems else "FAIL: " + "; ".join(problems),
            long=long,
            extra=f"ledger rows {rows} for {total} tasks; tasks rescued {retried}",
        )
    )
    assert not problems, problems


async def _ledger(engine: AsyncEngine) -> tuple[int, int]:
    async with engine.connect() as conn:
        rows, distinct = (await conn.execute(_LEDGER)).one()
    return int(rows), int(distinct)


async def test_exactly_once_effects_short(
    engine: AsyncEngine, database_url: str, tmp_path: Path
) -> None:
    await _exactly_once(engine, database_url, tmp_path, total=400, long=False)


@pytest.mark.slow
@pytest.mark.timeout(600)
async def test_exactly_once_effects_long(
    engine: AsyncEngine, database_url: str, tmp_path: Path
) -> None:
    await _exactly_once(engine, database_url, tmp_path, total=2_000, long=True)
