"""Suites 1 and 2 on PostgreSQL: worker processes SIGKILLed and restarted; a worker paused
with SIGSTOP past its lease and resumed.

The post-mortem reads a trigger-maintained log of every status/token transition, the
runs each body recorded and the fenced effect table (see ``_worker.py``).
"""

from __future__ import annotations

import asyncio
import random
import signal
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from aster_forge.db import BackgroundTaskDbStore, create_background_tasks_table

from ._cluster import LANE_CAPS, Cluster, enqueue_mix, post_mortem, read_log, wait_all_succeeded
from ._product import Kind, new_task
from ._worker import REPORT_SEQ_BASE, install_side_tables
from .report import ScenarioResult, record

pytestmark = [pytest.mark.postgres, pytest.mark.parametrize("backend", ["postgres"], indirect=True)]


async def _crash_run(
    engine: AsyncEngine,
    database_url: str,
    tmp_path: Path,
    *,
    total: int,
    workers: int,
    kill_every: float,
    duration: float,
    lease_ms: int,
    long: bool,
) -> None:
    await create_background_tasks_table(engine)
    await install_side_tables(engine)
    store = BackgroundTaskDbStore(engine)
    await enqueue_mix(engine, total, store=store)
    cluster = Cluster(database_url, tmp_path, lease_ms)
    slots = [f"w{i}" for i in range(workers)]
    try:
        for slot in slots:
            await cluster.start(slot)
        for slot in slots:
            await cluster.workers[slot].wait_ready()
        rng = random.Random(11)
        loop = asyncio.get_running_loop()
        end = loop.time() + duration
        kills = 0
        while loop.time() < end:
            await asyncio.sleep(kill_every)
            victim = rng.choice(slots)
            await cluster.kill(victim)
            kills += 1
            await cluster.start(victim)
        counts = await wait_all_succeeded(engine, total, within=120 + total / 20)
    finally:
        codes = await cluster.stop_all()
    pm = await post_mortem(engine, total, cluster.killed)
    over_limit = {lane: n for lane, n in pm.max_concurrency.items() if n > LANE_CAPS[lane]}
    problems = []
    if pm.lost or pm.stuck or pm.duplicated:
        problems.append(f"lost={pm.lost} stuck={pm.stuck} duplicated={pm.duplicated}")
    if over_limit:
        problems.append(f"lane limit exceeded {over_limit}")
    if pm.rescues_of_live_owners:
        problems.append(f"{pm.rescues_of_live_owners} rescues of live workers")
    if pm.rescues != pm.expected_rescues:
        problems.append(f"rescues {pm.rescues} != in-flight at kill {pm.expected_rescues}")
    if any(code != 0 for code in codes):
        problems.append(f"exit codes {codes}")
    record(
        ScenarioResult(
            scenario=f"worker crashes ({workers} processes, postgres)",
            tasks=total,
            faults=f"{kills} SIGKILL + restart",
            lost=pm.lost,
            duplicated=pm.duplicated,
            stuck=pm.stuck,
            result="pass" if not problems else "FAIL: " + "; ".join(problems),
            long=long,
            extra=f"rescues {pm.rescues} (= tasks in flight in killed workers "
            f"{pm.expected_rescues}); effects re-found after a lost lease {pm.redeliveries}; "
            f"peak lane concurrency {pm.max_concurrency}",
        )
    )
    assert counts.get("succeeded") == total, counts
    assert not problems, problems


async def test_worker_crashes_short(engine: AsyncEngine, database_url: str, tmp_path: Path) -> None:
    await _crash_run(
        engine,
        database_url,
        tmp_path,
        total=300,
        workers=2,
        kill_every=1.5,
        duration=3.0,
        lease_ms=1000,
        long=False,
    )


@pytest.mark.slow
@pytest.mark.timeout(900)
async def test_worker_crashes_long(engine: AsyncEngine, database_url: str, tmp_path: Path) -> None:
    await _crash_run(
        engine,
        database_url,
        tmp_path,
        total=10_000,
        workers=3,
        kill_every=2.0,
        duration=60.0,
        lease_ms=2000,
        long=True,
    )


async def _stale_writer_run(
    engine: AsyncEngine, database_url: str, tmp_path: Path, *, tasks: int, long: bool
) -> None:
    await create_background_tasks_table(engine)
    await install_side_tables(engine)
    store = BackgroundTaskDbStore(engine)
    await store.enqueue_many(
        [new_task(Kind.REPORT, REPORT_SEQ_BASE + i, sleep_ms=1500) for i in range(tasks)]
    )
    cluster = Cluster(database_url, tmp_path, lease_ms=600)
    stale = await cluster.start("stale")
    await stale.wait_ready()
    try:
        # Wait until the first worker is inside the bodies of as many tasks as its lane allows.
        in_flight = min(tasks, LANE_CAPS["reports"])
        for _ in range(200):
            runs = [e for e in read_log(stale.log) if e["op"] == "steps" and e["ok"]]
            if len({e["task"] for e in runs}) >= in_flight:
                break
            await asyncio.sleep(0.05)
        stale.signal(signal.SIGSTOP)
        fresh = await cluster.start("fresh")
        await fresh.wait_ready()
        counts = await wait_all_succeeded(engine, tasks, within=60)
        offset = stale.log.stat().st_size
        stale.signal(signal.SIGCONT)
        # Give the resumed worker time to try its late writes (heartbeat, steps, success).
        for _ in range(100):
            late = read_log(stale.log, offset)
            if len({e["task"] for e in late}) >= in_flight:
                break
            await asyncio.sleep(0.05)
    finally:
        codes = await cluster.stop_all()
    late = read_log(stale.log, offset)
    accepted_late = [e for e in late if e["ok"] and e["op"] in ("succeed", "steps")]
    refused_late = [e for e in late if not e["ok"]]
    pm = await post_mortem(engine, tasks, {stale.owner})
    record(
        ScenarioResult(
            scenario="stale writers (SIGSTOP past the lease, postgres)",
            tasks=tasks,
            faults=f"1 SIGSTOP/SIGCONT, {in_flight} leases taken over",
            lost=pm.lost,
            duplicated=pm.duplicated,
            stuck=pm.stuck,
            result="pass" if not accepted_late and not pm.duplicated else "FAIL",
            long=long,
            extra=f"late writes refused by the fence: {len(refused_late)} "
            f"({sorted({e['op'] for e in refused_late})}); accepted: {len(accepted_late)}",
        )
    )
    assert counts.get("succeeded") == tasks, counts
    assert accepted_late == [], accepted_late
    assert pm.lost == 0 and pm.stuck == 0 and pm.duplicated == 0
    assert pm.rescues >= in_flight and pm.rescues_of_live_owners == 0
    # Every success (and its effect) was written by the claim that replaced the stale one.
    assert pm.success_token_mismatch == 0
    assert codes == [0, 0]


async def test_stale_writer_short(engine: AsyncEngine, database_url: str, tmp_path: Path) -> None:
    await _stale_writer_run(engine, database_url, tmp_path, tasks=3, long=False)


@pytest.mark.slow
async def test_stale_writer_long(engine: AsyncEngine, database_url: str, tmp_path: Path) -> None:
    await _stale_writer_run(engine, database_url, tmp_path, tasks=12, long=True)
