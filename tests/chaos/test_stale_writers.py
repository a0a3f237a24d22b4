"""Suite 2 on PostgreSQL: stale writers whose writes land on a task another worker now runs.

The stale worker (``_stall.py``) claims five tasks, decides each task's final write
(step update, success, retry, permanent failure, shutdown release) while its lease is
still valid, and then stalls with those writes (and a heartbeat) on the wire. Its
leases expire; a fresh worker rescues the tasks and runs them under its own tokens
and holds them there. Only then does the stale worker resume: every held write reaches
a row that is running under another worker's token, and the token fence must refuse
each one. The proof comes from the database: the trigger log records which worker sent
every write to a claimed row (none may come from the stale one), and the overlap of
each held write with the fresh worker's claim is measured from the same log.

The scenario runs once with the batched hot path (batched success: the PostgreSQL
``unnest`` statement) and once with one statement per success, retry, failure,
release and step write. Renewals go through the one heartbeat engine either way
(``renew_task_leases_many``, ``unnest`` on PostgreSQL).

The other direction: a live worker whose lease is taken over behind its back (the
database clock jumps past the lease, another worker rescues and claims the task) must
learn it from its next refused renewal: its body sees the lease *lost*, and it writes
nothing more.
"""

from __future__ import annotations

import asyncio
import signal
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from aster_forge import TaskExecutionContext, TaskStatus
from aster_forge.db import BackgroundTaskDbStore, create_background_tasks_table
from aster_forge.runtime import CancellationToken
from aster_forge.tasks import DispatchPollConfig, TaskWorker
from aster_forge.tasks._lease import TaskLeaseTermination

from ._cluster import Cluster, post_mortem, read_log, wait_all_succeeded
from ._product import (
    LANES,
    REPORT_SEQ_BASE,
    ChaosState,
    Job,
    Kind,
    Lane,
    execution_config,
    new_task,
)
from ._stall import Mode, mode_of
from ._worker import install_side_tables
from .report import ScenarioResult, record

pytestmark = [pytest.mark.postgres, pytest.mark.parametrize("backend", ["postgres"], indirect=True)]

LEASE_MS = 2000
SEQS = (REPORT_SEQ_BASE, 1, 2, 3, 4)
"""One task per final write (see :func:`~tests.chaos._stall.mode_of`)."""
EXPECTED_HELD = {mode.value for mode in Mode} | {"heartbeat"}


async def _until(check: Any, what: str, within: float = 30.0) -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        value = await check()
        if value:
            return value
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def _rows(engine: AsyncEngine) -> list[Any]:
    async with engine.connect() as conn:
        return list(
            (
                await conn.execute(
                    sa.text("SELECT id, status, claimed_by, attempt FROM background_tasks")
                )
            ).all()
        )


async def _claim_windows(engine: AsyncEngine, owner: str) -> dict[int, tuple[float, float]]:
    """Per task: when ``owner``'s claim started and ended (epoch seconds, trigger log)."""
    async with engine.connect() as conn:
        rows = (
            await conn.execute(
                sa.text(
                    "SELECT task_id, "
                    "min(extract(epoch FROM at)) FILTER (WHERE new_owner = :o "
                    "AND new_status = 'running' AND new_token IS DISTINCT FROM old_token), "
                    "max(extract(epoch FROM at)) FILTER (WHERE old_owner = :o "
                    "AND old_status = 'running' AND new_token IS DISTINCT FROM old_token) "
                    "FROM chaos_transitions GROUP BY task_id"
                ),
                {"o": owner},
            )
        ).all()
    return {
        int(r[0]): (float(r[1]), float(r[2])) for r in rows if r[1] is not None and r[2] is not None
    }


async def _stale_writer_run(
    engine: AsyncEngine, database_url: str, tmp_path: Path, *, unbatched: bool
) -> None:
    await create_background_tasks_table(engine)
    await install_side_tables(engine)
    store = BackgroundTaskDbStore(engine)
    await store.enqueue_many(
        [
            new_task(Kind.REPORT if seq >= REPORT_SEQ_BASE else Kind.WORK, seq, sleep_ms=300)
            for seq in SEQS
        ]
    )
    extra = ("--unbatched",) if unbatched else ()
    cluster = Cluster(database_url, tmp_path, lease_ms=LEASE_MS)
    stale = await cluster.start("stale", "--stale", *extra)
    await stale.wait_ready()
    try:

        async def all_held() -> bool:
            held = {e["op"] for e in read_log(stale.log) if e.get("stalled")}
            return held >= EXPECTED_HELD

        await _until(all_held, "the stale worker to hold every kind of write")
        fresh = await cluster.start("fresh", "--hold", *extra)
        await fresh.wait_ready()

        async def taken_over() -> bool:
            rows = await _rows(engine)
            return len(rows) == len(SEQS) and all(
                r.status == "running" and r.claimed_by == fresh.owner for r in rows
            )

        # The stale writes resume only once every task runs under the fresh worker's token.
        await _until(taken_over, "the fresh worker to run every task")
        stale.signal(signal.SIGUSR1)
        stale_code = await asyncio.wait_for(stale.process.wait(), 60)
        fresh.signal(signal.SIGUSR1)
        counts = await wait_all_succeeded(engine, len(SEQS), within=60, stalled=10)
    finally:
        codes = await cluster.stop_all()
    log = read_log(stale.log)
    held = [e for e in log if e.get("held")]
    accepted = [e for e in held if e["ok"]]
    windows = await _claim_windows(engine, fresh.owner)
    inside = [
        e
        for e in held
        if e["task"] in windows
        and windows[e["task"]][0] < e["sent"] <= e["done"] < windows[e["task"]][1]
    ]
    pm = await post_mortem(engine, len(SEQS), {stale.owner})
    rows = {r.id: r for r in await _rows(engine)}
    held_ops = sorted({e["op"] for e in held})
    problems = []
    if accepted:
        problems.append(
            f"{len(accepted)} stale writes accepted ({sorted({e['op'] for e in accepted})})"
        )
    if pm.fence_violations:
        problems.append(f"{pm.fence_violations} writes by a non-claimant under a live lease")
    if set(held_ops) != EXPECTED_HELD:
        problems.append(f"held writes {held_ops}, expected {sorted(EXPECTED_HELD)}")
    if len(inside) != len(held):
        problems.append(f"only {len(inside)} of {len(held)} held writes landed in the fresh claim")
    if pm.lost or pm.stuck or pm.duplicated:
        problems.append(f"lost={pm.lost} stuck={pm.stuck} duplicated={pm.duplicated}")
    if any(r.attempt != 1 for r in rows.values()):
        problems.append(f"attempts {sorted(r.attempt for r in rows.values())} (1 rescue each)")
    record(
        ScenarioResult(
            scenario="stale writers (writes held past the lease, "
            f"{'one statement per write' if unbatched else 'batched'}, postgres)",
            tasks=len(SEQS),
            faults=f"{len(held)} writes held until {len(SEQS)} leases were taken over "
            f"({', '.join(held_ops)})",
            lost=pm.lost,
            duplicated=pm.duplicated,
            stuck=pm.stuck,
            result="pass" if not problems else "FAIL: " + "; ".join(problems),
            extra=f"held writes landing while another worker's claim ran (trigger log): "
            f"{len(inside)}/{len(held)}; refused by the fence {len(held) - len(accepted)}; "
            f"writes by a non-claimant {pm.fence_violations}",
        )
    )
    assert not problems, problems
    assert counts.get("succeeded") == len(SEQS), counts
    assert {mode_of(seq).value for seq in SEQS} == {m.value for m in Mode}
    assert stale_code == 0 and codes == [0, 0], (stale_code, codes)


async def test_stale_writers_batched(
    engine: AsyncEngine, database_url: str, tmp_path: Path
) -> None:
    await _stale_writer_run(engine, database_url, tmp_path, unbatched=False)


async def test_stale_writers_one_statement_per_write(
    engine: AsyncEngine, database_url: str, tmp_path: Path
) -> None:
    await _stale_writer_run(engine, database_url, tmp_path, unbatched=True)


_CLOCK_JUMP = sa.text(
    "UPDATE background_tasks SET lease_expires_at = now() - interval '1 second' "
    "WHERE status = 'running'"
)


@pytest.mark.parametrize("unbatched", [False, True], ids=["batched-success", "single-success"])
async def test_a_lease_taken_over_behind_a_live_workers_back_is_reported_lost(
    engine: AsyncEngine, unbatched: bool
) -> None:
    await create_background_tasks_table(engine)
    store = BackgroundTaskDbStore(engine)
    await store.enqueue(new_task(Kind.WORK, 0, sleep_ms=60_000))
    seen: dict[str, Any] = {}
    started, stopped = asyncio.Event(), asyncio.Event()

    async def hook(ctx: TaskExecutionContext, state: ChaosState, job: Job) -> None:
        started.set()
        await ctx.cancellation.wait()
        seen["termination"] = ctx.lease_guard.termination
        stopped.set()
        ctx.ensure_active()

    config = execution_config(
        ChaosState(hook=hook),
        lease_ttl=timedelta(seconds=3),
        shutdown_grace=timedelta(milliseconds=100),
    )
    dispatcher = TaskWorker(
        store,
        lanes=LANES,
        execution=config,
        poll=DispatchPollConfig(base_interval=timedelta(milliseconds=50)),
        owner="worker-a",
        batch_completions=not unbatched,
    )
    token = CancellationToken()
    worker = asyncio.create_task(dispatcher.run(token), name="chaos:worker-a")
    try:
        await asyncio.wait_for(started.wait(), 30)
        taken = []
        for _ in range(50):  # worker A may renew in between: jump again
            async with engine.begin() as conn:
                await conn.execute(_CLOCK_JUMP)
            taken = await store.claim_due_for_lane(Lane.FAST, 1, "worker-b", timedelta(minutes=1))
            if taken:
                break
        assert taken, "worker B never rescued the task"
        await asyncio.wait_for(stopped.wait(), 10)
    finally:
        token.cancel()
        await asyncio.wait_for(worker, 30)
    row = await store.get_task(taken[0].id)
    assert row is not None
    record(
        ScenarioResult(
            scenario="lease taken over behind a live worker (database clock jump, "
            f"{'single' if unbatched else 'batched'} success, postgres)",
            tasks=1,
            faults="1 lease expired early in the database, rescued and claimed by another worker",
            lost=0,
            duplicated=int(row.claimed_by != "worker-b"),
            stuck=0,
            result="pass" if seen["termination"] is TaskLeaseTermination.LOST else "FAIL",
            extra=f"the live worker's body saw: {seen['termination']}",
        )
    )
    # Learned from the refused renewal (not from its own deadline running out) ...
    assert seen["termination"] is TaskLeaseTermination.LOST, seen
    # ... and wrote nothing after it: the row is still worker B's claim.
    assert (row.status, row.claimed_by, row.processing_token) == (
        TaskStatus.RUNNING,
        "worker-b",
        taken[0].processing_token,
    )
