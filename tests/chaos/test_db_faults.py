"""Suite 3, database faults on PostgreSQL: killed backends, latency, a client-side outage.

The tasks are sized so that work is in flight for the whole run: the test asserts that
tasks were running when the outage began, that faults interrupted the worker's fenced
writes (errors seen by the store, logged per task) and that tasks were rescued
afterwards, so a run in which the faults touched no task fails.

The workers, the runtime-lease holder and the stores talk to PostgreSQL through
``ChaosProxy`` (``_proxy.py``). The shared PostgreSQL server is never restarted (other
suites use it concurrently): the outage is simulated by the proxy cutting every
connection and refusing new ones for longer than the runtime lease's TTL. Meanwhile a
direct admin connection runs ``pg_terminate_backend`` on this database's other
backends every second. Nothing is restarted; at the end every task has succeeded
exactly once and the lease holder stopped its group during the outage.
"""

from __future__ import annotations

import asyncio
import os
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from aster_forge.db import BackgroundTaskDbStore, RuntimeLeaseDbStore, create_background_tasks_table
from aster_forge.db._tables import create_runtime_leases_table
from aster_forge.runtime import CancellationToken, RuntimeLeaseConfig, run_runtime_lease_supervisor
from aster_forge.tasks import DispatchPollConfig, TaskWorker

from ._cluster import post_mortem, read_log, wait_all_succeeded
from ._product import LANE_LIMITS, LANES, ChaosState, Kind, Lane, execution_config, new_task
from ._proxy import ChaosProxy
from ._worker import install_side_tables, make_hook
from ._write_log import LoggingStore
from .report import ScenarioResult, record

pytestmark = [pytest.mark.postgres, pytest.mark.parametrize("backend", ["postgres"], indirect=True)]

TERMINATE = sa.text(
    "SELECT state, pg_terminate_backend(pid) FROM pg_stat_activity "
    "WHERE datname = current_database() AND pid <> pg_backend_pid() "
    "AND application_name = 'aster-forge-chaos'"
)
RUNNING = sa.text("SELECT count(*) FROM background_tasks WHERE status = 'running'")


async def _db_fault_run(
    engine: AsyncEngine,
    database_url: str,
    proxy: ChaosProxy,
    tmp_path: Path,
    *,
    tasks: int,
    duration: float,
    long: bool,
) -> None:
    await create_background_tasks_table(engine)
    await install_side_tables(engine)
    async with engine.begin() as conn:
        await conn.execute(create_runtime_leases_table("postgresql", if_not_exists=True))
    # Long enough that the fast lane (8 slots) is busy for most of the run.
    sleep_ms = int(duration * 1000 * LANE_LIMITS[Lane.FAST] / tasks * 0.8)
    await BackgroundTaskDbStore(engine).enqueue_many(
        [new_task(Kind.WORK, seq, sleep_ms=sleep_ms) for seq in range(tasks)]
    )
    url = make_url(database_url).set(port=proxy.port)
    settings = {"application_name": "aster-forge-chaos", "chaos.writer": "faulty-worker"}
    faulty = create_async_engine(url, connect_args={"server_settings": settings})
    writes = tmp_path / "writes.log"
    log_fd = os.open(writes, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    store = LoggingStore(faulty, log_fd)
    state = ChaosState(track_done=False, hook=make_hook(faulty, "faulty-worker", log_fd))
    config = execution_config(state, lease_ttl=timedelta(seconds=3))
    token = CancellationToken()
    poll = DispatchPollConfig(
        base_interval=timedelta(milliseconds=50),
        max_interval=timedelta(milliseconds=200),
        error_max_interval=timedelta(milliseconds=500),
    )
    dispatcher = TaskWorker(store, lanes=LANES, execution=config, poll=poll, owner="faulty-worker")
    group_events: list[tuple[str, float]] = []
    loop = asyncio.get_running_loop()

    async def start_group(stop: CancellationToken) -> CancellationToken:
        group_events.append(("start", loop.time()))
        return stop

    async def stop_group(stop: CancellationToken) -> None:
        group_events.append(("stop", loop.time()))

    lease_config = RuntimeLeaseConfig(
        lease_id="chaos.singleton",
        owner_id="faulty-holder",
        ttl=timedelta(seconds=2),
        renew_interval=timedelta(milliseconds=400),
        standby_retry_interval=timedelta(milliseconds=300),
    )
    lease_store = RuntimeLeaseDbStore(faulty)
    worker = asyncio.create_task(dispatcher.run(token), name="chaos:faulty-worker")
    supervisor = asyncio.create_task(
        run_runtime_lease_supervisor(lease_store, lease_config, token, start_group, stop_group),
        name="chaos:faulty-lease",
    )
    terminated = 0
    busy_terminated = 0
    running_at_outage = 0
    outage = (0.0, 0.0)
    try:
        start = loop.time()
        second = 0
        while loop.time() - start < duration:
            await asyncio.sleep(1)
            second += 1
            async with engine.connect() as conn:
                killed = (await conn.execute(TERMINATE)).all()
                if second == 5:
                    running_at_outage = int((await conn.execute(RUNNING)).scalar_one())
            terminated += len(killed)
            busy_terminated += sum(1 for state, _ in killed if state != "idle")
            if second == 2:
                proxy.latency = 0.05
            if second == 4:
                proxy.latency = 0.0
            if second == 5:
                outage = (loop.time(), 0.0)
                proxy.outage(True)
            if second == 9:
                proxy.outage(False)
                outage = (outage[0], loop.time())
        counts = await wait_all_succeeded(engine, tasks, within=120)
    finally:
        token.cancel()
        await asyncio.gather(worker, supervisor, return_exceptions=True)
        await faulty.dispose()
        os.close(log_fd)
    pm = await post_mortem(engine, tasks, set())
    interrupted = [e for e in read_log(writes) if "error" in e]
    touched = len({e["task"] for e in interrupted})
    starts = [t for kind, t in group_events if kind == "start"]
    stops_in_outage = [
        t for kind, t in group_events if kind == "stop" and outage[0] <= t <= outage[1]
    ]
    restarted = [t for t in starts if t > outage[1]]
    doubles = pm.duplicated
    ok = (
        counts.get("succeeded") == tasks
        and pm.effects == tasks
        and not doubles
        and stops_in_outage
        and restarted
        and running_at_outage > 0
        and touched > 0
        and pm.rescues > 0
    )
    record(
        ScenarioResult(
            scenario="database faults (proxy outage, killed backends, postgres)",
            tasks=tasks,
            faults=f"{terminated} backends terminated ({busy_terminated} mid-statement or "
            f"mid-transaction), {proxy.cuts} proxy cuts, {proxy.refused} refused connects, "
            f"4 s outage with {running_at_outage} tasks running, 2 s of +50 ms latency",
            lost=pm.lost,
            duplicated=doubles,
            stuck=pm.stuck,
            result="pass" if ok else "FAIL",
            long=long,
            extra=f"fenced writes interrupted by a fault {len(interrupted)} "
            f"(on {touched} tasks); rescues {pm.rescues}; effects re-found after a lost lease "
            f"{pm.redeliveries}; lease group stopped during the outage "
            f"{len(stops_in_outage)}x and restarted after it {len(restarted)}x",
        )
    )
    assert counts.get("succeeded") == tasks, counts
    assert pm.effects == tasks and doubles == 0
    assert stops_in_outage, f"the lease holder kept its group through the outage: {group_events}"
    assert restarted, f"the lease holder did not come back after the outage: {group_events}"
    assert terminated > 0
    # Not vacuous: the faults hit work in flight.
    assert running_at_outage > 0, "no task was running when the outage began"
    assert touched > 0, "no fault interrupted a fenced write of a task"
    assert pm.rescues > 0, "no task lost its lease to the outage"
    assert pm.fence_violations == 0


async def test_database_faults_short(
    engine: AsyncEngine, database_url: str, proxy: ChaosProxy, tmp_path: Path
) -> None:
    await _db_fault_run(engine, database_url, proxy, tmp_path, tasks=200, duration=11, long=False)


@pytest.mark.slow
@pytest.mark.timeout(900)
async def test_database_faults_long(
    engine: AsyncEngine, database_url: str, proxy: ChaosProxy, tmp_path: Path
) -> None:
    await _db_fault_run(engine, database_url, proxy, tmp_path, tasks=3000, duration=30, long=True)
