"""Real concurrency: many connections (and, on PostgreSQL, processes) race; one wins each time.

Rounds: 200 on PostgreSQL (20 coroutines, and 4 OS processes x 5 coroutines) and on
MariaDB; 20 on SQLite (see ROUNDS). Every contender uses its own pooled connection
(pool_size = contenders, no overflow), all released by one asyncio.Event so they
really overlap.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import create_async_engine

from aster_forge.db import RuntimeLeaseDbStore, ScheduledTaskDbStore
from aster_forge.tasks import IntervalSchedule

from ._support import create_tables, drop_tables

CONTENDERS = 20
# SQLite serializes writers and its busy handler polls, so a contended round costs
# ~0.5-1 s there; it is the single-instance embedded backend, so 20 rounds suffice.
ROUNDS = {"sqlite": 20, "postgres": 200, "mysql": 200}
REPO_ROOT = Path(__file__).resolve().parents[2]


async def _race_rounds(database_url: str, backend: str, what: str) -> None:
    engine = create_async_engine(database_url, pool_size=CONTENDERS, max_overflow=0)
    try:
        await create_tables(engine)
        leases = RuntimeLeaseDbStore(engine)
        catalog = ScheduledTaskDbStore(engine)
        run_id = uuid.uuid4().hex[:8]
        rounds = ROUNDS[backend]
        if what == "claim":
            for round_no in range(rounds):
                await catalog.ensure_scheduled_task(
                    run_id, f"job-{round_no}", IntervalSchedule(every=timedelta(hours=1))
                )
        for round_no in range(rounds):
            start = asyncio.Event()

            async def contend(index: int, r: int = round_no, start: asyncio.Event = start) -> bool:
                await start.wait()
                owner = f"owner-{index}"
                if what == "lease":
                    lease_id = f"{run_id}-lease-{r}"
                    return await leases.try_acquire(lease_id, owner, timedelta(hours=1)) is not None
                claim = await catalog.claim_scheduled_task(
                    run_id, f"job-{r}", owner, timedelta(hours=1)
                )
                return claim is not None

            tasks = [
                asyncio.create_task(contend(i), name=f"race-{round_no}-{i}")
                for i in range(CONTENDERS)
            ]
            await asyncio.sleep(0)
            start.set()
            winners = sum(await asyncio.gather(*tasks))
            assert winners == 1, f"{what} round {round_no}: {winners} winners"
    finally:
        await drop_tables(engine)
        await engine.dispose()


@pytest.mark.timeout(240)
async def test_twenty_connections_race_for_one_lease(database_url: str, backend: str) -> None:
    await _race_rounds(database_url, backend, "lease")


@pytest.mark.timeout(240)
async def test_twenty_connections_race_for_one_firing(database_url: str, backend: str) -> None:
    await _race_rounds(database_url, backend, "claim")


@pytest.mark.postgres
@pytest.mark.timeout(240)
async def test_four_processes_one_winner_per_round(postgres_url: str) -> None:
    engine = create_async_engine(postgres_url)
    processes: list[asyncio.subprocess.Process] = []
    rounds, per_process = 200, 5
    try:
        await create_tables(engine)
        run_id = f"mp-{uuid.uuid4().hex[:8]}"
        catalog = ScheduledTaskDbStore(engine)
        for round_no in range(rounds):
            await catalog.ensure_scheduled_task(
                run_id, f"job-{round_no}", IntervalSchedule(every=timedelta(hours=1))
            )
        for worker in range(4):
            processes.append(  # noqa: PERF401 - sequential awaits
                await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    "tests.db._race_worker",
                    postgres_url,
                    str(worker),
                    str(rounds),
                    str(per_process),
                    run_id,
                    cwd=REPO_ROOT,
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                )
            )

        async def line(proc: asyncio.subprocess.Process) -> str:
            assert proc.stdout is not None
            async with asyncio.timeout(30):
                raw = await proc.stdout.readline()
            assert raw, "worker exited early"
            return raw.decode().strip()

        for round_no in range(rounds):
            readies = await asyncio.gather(*(line(p) for p in processes))
            assert readies == [f"ready {round_no}"] * 4
            for proc in processes:
                assert proc.stdin is not None
                proc.stdin.write(b"go\n")
                await proc.stdin.drain()
            texts = await asyncio.gather(*(line(p) for p in processes))
            reports = [json.loads(text) for text in texts]
            assert sum(r["lease"] for r in reports) == 1, f"round {round_no}: {reports}"
            assert sum(r["claim"] for r in reports) == 1, f"round {round_no}: {reports}"
        for proc in processes:
            async with asyncio.timeout(30):
                assert await proc.wait() == 0
    finally:
        for proc in processes:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        await drop_tables(engine)
        await engine.dispose()
