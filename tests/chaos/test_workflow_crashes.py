"""Workflows on PostgreSQL with two worker processes SIGKILLed mid-workflow and restarted.

Each workflow is a fan-out of fast work tasks, one slow report that waits for all of them
(the fan-in) and a final work task that waits for the report (a chain). Kills land while
the victim has tasks in flight. Afterwards: every node's body ran at least once and
every node succeeded (none stuck), no task succeeded twice, every fan-in and every chain
end was first claimed only after each of its dependencies had succeeded (so it was made
due once, by the last of them), and no dependent was left with a count or a flag.
"""

from __future__ import annotations

import asyncio
import random
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from aster_forge.db import BackgroundTaskDbStore, create_background_tasks_table
from aster_forge.tasks import TaskDependency

from ._cluster import Cluster, post_mortem, wait_all_succeeded
from ._product import REPORT_SEQ_BASE, Kind, new_task
from ._worker import install_side_tables
from .report import ScenarioResult, record
from .test_worker_crashes import _busy_victim, _kill_in_flight

pytestmark = [
    pytest.mark.slow,
    pytest.mark.postgres,
    pytest.mark.parametrize("backend", ["postgres"], indirect=True),
]

_RUNS = sa.text("SELECT task_id, count(*) FROM chaos_runs GROUP BY task_id")
_CLAIMS_AND_SUCCESSES = sa.text(
    "SELECT task_id, new_status, old_status, old_token, new_token, at FROM chaos_transitions "
    "ORDER BY id"
)
_LEFTOVERS = sa.text(
    "SELECT count(*) FROM background_tasks WHERE dependents_waiting OR dependencies_left <> 0"
)


async def _enqueue_workflows(
    store: BackgroundTaskDbStore, workflows: int, fan_out: int
) -> dict[int, list[int]]:
    """Write the workflows; the dependencies of every waiting task, by task id."""
    waits: dict[int, list[int]] = {}
    for n in range(workflows):
        base = n * (fan_out + 2)
        tasks = [new_task(Kind.WORK, base + i, sleep_ms=20 + i % 30) for i in range(fan_out)]
        tasks.append(new_task(Kind.REPORT, REPORT_SEQ_BASE + base, sleep_ms=400))
        tasks.append(new_task(Kind.WORK, base + fan_out + 1, sleep_ms=10))
        edges = [TaskDependency(task=fan_out, on=i) for i in range(fan_out)]
        edges.append(TaskDependency(task=fan_out + 1, on=fan_out))
        ids = [result.task_id for result in await store.enqueue_workflow(tasks, edges)]
        waits[ids[fan_out]] = ids[:fan_out]
        waits[ids[fan_out + 1]] = [ids[fan_out]]
    return waits


def _early_joins(rows: list[Any], waits: dict[int, list[int]]) -> list[int]:
    """The waiting tasks first claimed before one of their dependencies had succeeded."""
    first_claim: dict[int, datetime] = {}
    succeeded: dict[int, datetime] = {}
    for row in rows:
        task_id = int(row.task_id)
        if row.new_status == "running" and row.new_token not in (None, row.old_token):
            first_claim.setdefault(task_id, row.at)
        if row.old_status == "running" and row.new_status == "succeeded":
            succeeded.setdefault(task_id, row.at)
    early = []
    for task_id, deps in waits.items():
        claimed = first_claim.get(task_id)
        ends = [succeeded.get(dep) for dep in deps]
        if claimed is None or any(end is None or end > claimed for end in ends):
            early.append(task_id)
    return early


async def test_workflows_survive_worker_kills(
    engine: AsyncEngine, database_url: str, tmp_path: Path
) -> None:
    workflows, fan_out, lease_ms, kills = 12, 25, 2000, 3
    total = workflows * (fan_out + 2)
    await create_background_tasks_table(engine)
    await install_side_tables(engine)
    store = BackgroundTaskDbStore(engine)
    waits = await _enqueue_workflows(store, workflows, fan_out)
    cluster = Cluster(database_url, tmp_path, lease_ms)
    slots = ["w0", "w1"]
    at_kill: list[tuple[str, int]] = []
    try:
        for slot in slots:
            await cluster.start(slot)
        for slot in slots:
            await cluster.workers[slot].wait_ready()
        rng = random.Random(7)
        for _ in range(kills):
            await asyncio.sleep(0.7)
            victim = await _busy_victim(engine, cluster, slots, rng)
            at_kill.append(await _kill_in_flight(engine, cluster, victim))
            await cluster.start(victim)
        counts = await wait_all_succeeded(
            engine, total, within=240, stalled=5 * lease_ms / 1000 + 5
        )
    finally:
        codes = await cluster.stop_all()
    pm = await post_mortem(engine, total, cluster.killed)
    async with engine.connect() as conn:
        runs: dict[int, int] = defaultdict(int)
        for task_id, count in await conn.execute(_RUNS):
            runs[int(task_id)] = int(count)
        transitions = list((await conn.execute(_CLAIMS_AND_SUCCESSES)).all())
        leftovers = int((await conn.execute(_LEFTOVERS)).scalar_one())
        ids = [
            int(row[0]) for row in await conn.execute(sa.text("SELECT id FROM background_tasks"))
        ]
    never_ran = [task_id for task_id in ids if runs[task_id] == 0]
    early = _early_joins(transitions, waits)
    problems = []
    if pm.lost or pm.stuck or pm.duplicated:
        problems.append(f"lost={pm.lost} stuck={pm.stuck} duplicated={pm.duplicated}")
    if never_ran:
        problems.append(f"{len(never_ran)} nodes never ran")
    if early:
        problems.append(f"{len(early)} joins claimed before all their dependencies succeeded")
    if leftovers:
        problems.append(f"{leftovers} rows still flagged or counting")
    if pm.rescues == 0 or any(n == 0 for _, n in at_kill):
        problems.append(f"a kill hit no task in flight: {at_kill}")
    if any(code != 0 for code in codes):
        problems.append(f"exit codes {codes}")
    record(
        ScenarioResult(
            scenario="workflows under worker crashes (2 processes, postgres)",
            tasks=total,
            faults=f"{len(at_kill)} SIGKILL + restart mid-workflow "
            f"({sum(n for _, n in at_kill)} tasks in flight)",
            lost=pm.lost,
            duplicated=pm.duplicated,
            stuck=pm.stuck,
            result="pass" if not problems else "FAIL: " + "; ".join(problems),
            long=False,
            extra=f"{workflows} workflows of {fan_out} + fan-in + chain end; "
            f"{len(waits)} joins, {len(early)} claimed early; rescues {pm.rescues}",
        )
    )
    assert not problems, problems
    assert counts.get("succeeded") == total, counts
