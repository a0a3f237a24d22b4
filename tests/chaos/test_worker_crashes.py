"""Suite 1 on PostgreSQL: worker processes SIGKILLed (while they run tasks) and restarted.

Each kill waits until the victim has tasks in flight (running rows it claims, read from
the database), so no kill hits an idle worker; once its connections are gone, the rows
it left running are counted, and exactly that many rescues of that owner must follow.
The post-mortem reads a trigger-maintained log of every status/token transition, the
runs each body recorded and the fenced effect table (see ``_worker.py``).
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from aster_forge.db import BackgroundTaskDbStore, create_background_tasks_table

from ._cluster import LANE_CAPS, Cluster, enqueue_mix, post_mortem, wait_all_succeeded
from ._worker import install_side_tables
from .report import ScenarioResult, record

pytestmark = [pytest.mark.postgres, pytest.mark.parametrize("backend", ["postgres"], indirect=True)]


_BUSY = sa.text(
    "SELECT claimed_by, count(*) FROM background_tasks WHERE status = 'running' "
    "AND lease_expires_at > now() GROUP BY claimed_by"
)
_IN_FLIGHT = sa.text(
    "SELECT count(*) FROM background_tasks WHERE status = 'running' AND claimed_by = :owner"
)
_BACKENDS = sa.text("SELECT count(*) FROM pg_stat_activity WHERE application_name = :owner")


async def _busy_victim(
    engine: AsyncEngine, cluster: Cluster, slots: list[str], rng: random.Random
) -> str:
    """A live worker's slot with tasks in flight now (waits until there is one)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    while loop.time() < deadline:
        async with engine.connect() as conn:
            busy = {str(owner) for owner, _ in await conn.execute(_BUSY)}
        candidates = [s for s in slots if cluster.workers[s].owner in busy]
        if candidates:
            return rng.choice(candidates)
        await asyncio.sleep(0.02)
    raise AssertionError("no worker had a task in flight to kill: the fault would hit nothing")


async def _kill_in_flight(engine: AsyncEngine, cluster: Cluster, slot: str) -> tuple[str, int]:
    """SIGKILL ``slot``; once its connections are gone, count the tasks it left running."""
    owner = cluster.workers[slot].owner
    await cluster.kill(slot)
    # A statement already on the wire still commits: wait for its backend to exit (a new
    # transaction per look: pg_stat_activity is a snapshot within one), then count at once,
    # long before any of those leases expires.
    for _ in range(500):
        async with engine.connect() as conn:
            if not (await conn.execute(_BACKENDS, {"owner": owner})).scalar_one():
                count = int((await conn.execute(_IN_FLIGHT, {"owner": owner})).scalar_one())
                return owner, count
        await asyncio.sleep(0.01)
    raise AssertionError(f"the connections of the killed worker {owner} never closed")


async def _crash_run(
    engine: AsyncEngine,
    database_url: str,
    tmp_path: Path,
    *,
    total: int,
    workers: int,
    kill_every: float,
    kills: int,
    lease_ms: int,
    report_sleep_ms: int,
    long: bool,
) -> None:
    await create_background_tasks_table(engine)
    await install_side_tables(engine)
    store = BackgroundTaskDbStore(engine)
    await enqueue_mix(engine, total, store=store, report_sleep_ms=report_sleep_ms)
    cluster = Cluster(database_url, tmp_path, lease_ms)
    slots = [f"w{i}" for i in range(workers)]
    at_kill: list[tuple[str, int]] = []
    try:
        for slot in slots:
            await cluster.start(slot)
        for slot in slots:
            await cluster.workers[slot].wait_ready()
        rng = random.Random(11)
        for _ in range(kills):
            await asyncio.sleep(kill_every)
            # Only a kill that lands while the victim runs tasks tests the rescue.
            victim = await _busy_victim(engine, cluster, slots, rng)
            at_kill.append(await _kill_in_flight(engine, cluster, victim))
            # Not waited on: until it claims, the new worker is never picked as a victim.
            await cluster.start(victim)
        counts = await wait_all_succeeded(
            engine, total, within=120 + total / 20, stalled=5 * lease_ms / 1000
        )
    finally:
        codes = await cluster.stop_all()
    pm = await post_mortem(engine, total, cluster.killed)
    over_limit = {lane: n for lane, n in pm.max_concurrency.items() if n > LANE_CAPS[lane]}
    in_flight = sum(n for _, n in at_kill)
    mismatched = {
        owner: (n, pm.rescues_by_owner.get(owner, 0))
        for owner, n in at_kill
        if pm.rescues_by_owner.get(owner, 0) != n
    }
    problems = []
    if pm.lost or pm.stuck or pm.duplicated:
        problems.append(f"lost={pm.lost} stuck={pm.stuck} duplicated={pm.duplicated}")
    if over_limit:
        problems.append(f"lane limit exceeded {over_limit}")
    if pm.rescues_of_live_owners:
        problems.append(f"{pm.rescues_of_live_owners} rescues of live workers")
    if pm.rescues != pm.expected_rescues:
        problems.append(f"rescues {pm.rescues} != in-flight at kill {pm.expected_rescues}")
    if any(n == 0 for _, n in at_kill) or pm.rescues == 0:
        problems.append(f"a kill hit no task in flight: {at_kill}")
    if mismatched:
        problems.append(
            f"rescues != tasks left running at the kill (owner: left, rescued) {mismatched}"
        )
    if any(code != 0 for code in codes):
        problems.append(f"exit codes {codes}")
    record(
        ScenarioResult(
            scenario=f"worker crashes ({workers} processes, postgres)",
            tasks=total,
            faults=f"{len(at_kill)} SIGKILL + restart, each with tasks in flight "
            f"({in_flight} in all, {min((n for _, n in at_kill), default=0)}-"
            f"{max((n for _, n in at_kill), default=0)} per kill)",
            lost=pm.lost,
            duplicated=pm.duplicated,
            stuck=pm.stuck,
            result="pass" if not problems else "FAIL: " + "; ".join(problems),
            long=long,
            extra=f"rescues {pm.rescues} (= tasks left running at the kills {in_flight}, "
            f"per kill {len(at_kill) - len(mismatched)}/{len(at_kill)}); effects re-found after "
            f"a lost lease {pm.redeliveries}; writes by a non-claimant {pm.fence_violations}; "
            f"peak lane concurrency {pm.max_concurrency}",
        )
    )
    assert not problems, problems
    assert counts.get("succeeded") == total, counts


async def test_worker_crashes_short(engine: AsyncEngine, database_url: str, tmp_path: Path) -> None:
    await _crash_run(
        engine,
        database_url,
        tmp_path,
        total=300,
        workers=2,
        kill_every=0.5,
        kills=2,
        lease_ms=2000,
        report_sleep_ms=600,
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
        kills=30,
        lease_ms=2000,
        report_sleep_ms=1000,
        long=True,
    )
