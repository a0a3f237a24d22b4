"""Worker processes for the multi-process chaos suites, and the post-mortem over the tables."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from ._product import LANE_LIMITS, REPORT_SEQ_BASE, Kind, Lane, new_task

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class WorkerProcess:
    """One running worker: its owner id, process and write log."""

    owner: str
    process: asyncio.subprocess.Process
    log: Path
    ready: bool = False

    async def wait_ready(self, within: float = 60) -> None:
        """Wait for the worker's ``ready`` line (its SIGTERM handler is installed then)."""
        if self.ready:
            return
        assert self.process.stdout is not None
        line = await asyncio.wait_for(self.process.stdout.readline(), within)
        assert line.strip() == b"ready", line
        self.ready = True

    def signal(self, sig: signal.Signals) -> None:
        """Send ``sig`` to the worker process."""
        os.kill(self.process.pid, sig)


@dataclass
class Cluster:
    """Starts and stops worker processes; remembers which owners were killed or paused."""

    url: str
    log_dir: Path
    lease_ms: int
    workers: dict[str, WorkerProcess] = field(default_factory=dict)
    killed: set[str] = field(default_factory=set)
    generation: int = 0

    async def start(self, slot: str, *extra: str) -> WorkerProcess:
        """Start a fresh worker (a new owner id) in ``slot`` (``extra``: worker options)."""
        self.generation += 1
        owner = f"{slot}-gen{self.generation}"
        log = self.log_dir / f"{owner}.log"
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.chaos._worker",
            self.url,
            owner,
            str(log),
            "--lease-ms",
            str(self.lease_ms),
            *extra,
            cwd=REPO_ROOT,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
        worker = WorkerProcess(owner, process, log)
        self.workers[slot] = worker
        return worker

    async def kill(self, slot: str) -> None:
        """SIGKILL the worker in ``slot`` and reap it."""
        worker = self.workers[slot]
        worker.signal(signal.SIGKILL)
        await worker.process.wait()
        self.killed.add(worker.owner)

    async def stop_all(self, within: float = 60) -> list[int]:
        """SIGTERM every worker; return their exit codes."""
        for worker in self.workers.values():
            if worker.process.returncode is None:
                worker.signal(signal.SIGCONT)
                await worker.wait_ready()
                worker.signal(signal.SIGTERM)
        return [
            await asyncio.wait_for(worker.process.wait(), within)
            for worker in self.workers.values()
        ]


async def enqueue_mix(
    engine: AsyncEngine, total: int, *, store: Any, report_sleep_ms: int = 200
) -> None:
    """Enqueue ``total`` tasks: every tenth a slow report, the rest fast work."""
    del engine
    batch = []
    for seq in range(total):
        if seq % 10 == 0:
            batch.append(new_task(Kind.REPORT, REPORT_SEQ_BASE + seq, sleep_ms=report_sleep_ms))
        else:
            batch.append(new_task(Kind.WORK, seq, sleep_ms=seq % 20))
        if len(batch) == 1000:
            await store.enqueue_many(batch)
            batch = []
    if batch:
        await store.enqueue_many(batch)


async def status_counts(engine: AsyncEngine) -> dict[str, int]:
    """Task counts per status."""
    async with engine.connect() as conn:
        rows = await conn.execute(
            sa.text("SELECT status, count(*) FROM background_tasks GROUP BY status")
        )
        return {str(status): int(count) for status, count in rows}


async def wait_all_succeeded(
    engine: AsyncEngine, total: int, within: float, *, stalled: float | None = None
) -> dict[str, int]:
    """Poll until every task succeeded (or the timeout passes); return the last counts.

    With ``stalled``, give up early once the counts have not changed for that long
    (work that is stuck for good, e.g. leases that are never rescued).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    counts = await status_counts(engine)
    changed = loop.time()
    while counts.get("succeeded", 0) < total and loop.time() < deadline:
        if stalled is not None and loop.time() - changed > stalled:
            break
        await asyncio.sleep(0.5)
        latest = await status_counts(engine)
        if latest != counts:
            counts, changed = latest, loop.time()
    return counts


@dataclass
class PostMortem:
    """What the tables say after a run."""

    total: int
    counts: dict[str, int]
    effects: int
    successes_per_task_max: int
    success_token_mismatch: int
    live_redeliveries: int
    redeliveries: int
    """Tasks whose effect was applied under an earlier claim that was then rescued."""
    live_overlaps: int
    rescues: int
    rescues_of_live_owners: int
    expected_rescues: int
    max_concurrency: dict[str, int]
    fence_violations: int = 0
    """Writes to a claimed row, while its lease was live, by a worker other than the claimant
    (from the trigger log's ``chaos.writer``)."""
    rescues_by_owner: dict[str, int] = field(default_factory=dict)
    """Rescued claims per (dead) owner."""

    @property
    def lost(self) -> int:
        """Tasks that did not succeed, or succeeded without their effect."""
        return self.total - min(self.counts.get("succeeded", 0), self.effects)

    @property
    def stuck(self) -> int:
        """Tasks left pending or running."""
        return self.counts.get("pending", 0) + self.counts.get("running", 0)

    @property
    def duplicated(self) -> int:
        """Effects applied twice by live workers, concurrent live runs, double successes."""
        doubles = max(self.successes_per_task_max - 1, 0)
        return (
            self.live_redeliveries
            + self.live_overlaps
            + doubles
            + self.success_token_mismatch
            + self.fence_violations
        )


FENCE_VIOLATIONS = sa.text(
    "SELECT count(*) FROM chaos_writes "
    "WHERE writer IS NOT NULL AND writer <> claimant AND NOT expired"
)


async def post_mortem(engine: AsyncEngine, total: int, dead: set[str]) -> PostMortem:
    """Read the side tables and transitions and check them against the killed owners."""
    async with engine.connect() as conn:
        effects = {
            int(r.task_id): (r.token, r.owner)
            for r in await conn.execute(sa.text("SELECT task_id, token, owner FROM chaos_effects"))
        }
        transitions = (
            await conn.execute(sa.text("SELECT * FROM chaos_transitions ORDER BY id"))
        ).all()
        runs = (
            await conn.execute(
                sa.text("SELECT task_id, token, owner, lane, started, finished FROM chaos_runs")
            )
        ).all()
        redeliveries = (
            await conn.execute(
                sa.text(
                    "SELECT r.task_id, e.owner, e.token FROM chaos_redeliveries r "
                    "JOIN chaos_effects e USING (task_id)"
                )
            )
        ).all()
        violations = (await conn.execute(FENCE_VIOLATIONS)).scalar_one()
    successes: dict[int, list[Any]] = defaultdict(list)
    rescued_at: dict[str, datetime] = {}
    # When each claim ended, and whether it ended other than by its own success.
    ended_at: dict[str, datetime] = {}
    ended_unsuccessfully: set[str] = set()
    claims_by_dead = 0
    successes_by_dead = 0
    rescues = 0
    rescues_live = 0
    rescues_by_owner: dict[str, int] = defaultdict(int)
    for t in transitions:
        if t.old_token is not None and t.new_token != t.old_token:
            ended_at.setdefault(t.old_token, t.at)
            if t.new_status != "succeeded":
                ended_unsuccessfully.add(t.old_token)
        # A claim: a new token on a running row (from pending, or from an expired running
        # row when the PostgreSQL claim folds the rescue into the same statement).
        claimed = t.new_status == "running" and t.new_token not in (None, t.old_token)
        if claimed and t.new_owner in dead:
            claims_by_dead += 1
        if t.old_status == "running" and t.new_status == "succeeded":
            successes[int(t.task_id)].append(t)
            if t.old_owner in dead:
                successes_by_dead += 1
        # A rescue ends an expired claim and counts its attempt; the row goes back to
        # pending (token cleared) or, folded into a claim, straight to the new claim.
        if (
            t.old_status == "running"
            and t.failure_reason == "lease_expired"
            and t.new_token != t.old_token
            and t.new_attempt == t.old_attempt + 1
        ):
            rescues += 1
            rescues_by_owner[t.old_owner] += 1
            rescued_at[t.old_token] = t.at
            if t.old_owner not in dead:
                rescues_live += 1
    # An effect written under an earlier claim is a legitimate redelivery only when that
    # claim then ended without succeeding (rescued after its lease expired, or retried
    # because its success write failed); anything else means two claims both wrote.
    mismatch = sum(
        1
        for task_id, rows in successes.items()
        if task_id in effects
        and rows[0].old_token != effects[task_id][0]
        and effects[task_id][0] not in ended_unsuccessfully
    )
    live_redeliveries = sum(1 for r in redeliveries if r.token not in ended_unsuccessfully)
    moved = sum(
        1
        for task_id, rows in successes.items()
        if task_id in effects and rows[0].old_token != effects[task_id][0]
    )
    # Two claims running the same task at once is only allowed after the first one's
    # lease expired (its late writes are then fenced off).
    by_task: dict[int, list[Any]] = defaultdict(list)
    for run in runs:
        by_task[int(run.task_id)].append(run)
    overlaps = 0
    for task_runs in by_task.values():
        live = sorted((r for r in task_runs if r.token not in rescued_at), key=lambda r: r.started)
        for first, second in itertools.pairwise(live):
            end = first.finished or ended_at.get(first.token)
            if end is None or end > second.started:
                overlaps += 1
    # Lane concurrency per owner; an unfinished run ends when its claim was rescued.
    concurrency: dict[str, int] = defaultdict(int)
    events: dict[tuple[str, str], list[tuple[datetime, int]]] = defaultdict(list)
    for run in runs:
        events[(run.owner, run.lane)].append((run.started, 1))
        end = run.finished if run.finished is not None else ended_at.get(run.token)
        if end is not None:
            events[(run.owner, run.lane)].append((end, -1))
    for (_, lane), points in events.items():
        level = peak = 0
        for _, delta in sorted(points, key=lambda p: (p[0], p[1])):
            level += delta
            peak = max(peak, level)
        concurrency[lane] = max(concurrency[lane], peak)
    return PostMortem(
        total=total,
        counts=await status_counts(engine),
        effects=len(effects),
        successes_per_task_max=max((len(v) for v in successes.values()), default=0),
        success_token_mismatch=mismatch,
        live_redeliveries=live_redeliveries,
        redeliveries=moved - mismatch,
        live_overlaps=overlaps,
        rescues=rescues,
        rescues_of_live_owners=rescues_live,
        expected_rescues=claims_by_dead - successes_by_dead,
        max_concurrency=dict(concurrency),
        fence_violations=int(violations),
        rescues_by_owner=dict(rescues_by_owner),
    )


LANE_CAPS = {"fast": LANE_LIMITS[Lane.FAST], "reports": LANE_LIMITS[Lane.REPORTS]}


def read_log(path: Path, offset: int = 0) -> list[dict[str, Any]]:
    """The JSON lines a worker logged from byte ``offset`` on."""
    if not path.exists():
        return []
    with path.open("rb") as handle:
        handle.seek(offset)
        return [json.loads(line) for line in handle.read().splitlines() if line.strip()]
