"""The success-and-claim statement while other workers' tasks run, statistics stale.

A busy worker sends one statement per batch: its successes written, the freed slots
claimed. This times that statement (``store.mark_tasks_succeeded_and_claim``, batches of
10 and 50, on PostgreSQL) in two tables of 100,000 due tasks, both analyzed before any
task ran (autovacuum analyzes after a tenth of the table changed, so the planner's view
of "running" is often this old): one where only the measured batch runs, one where
another worker holds 5,000 running tasks. The two are timed in alternating slices in one
run; their ratio is what counts (1.0: the other running tasks cost the write nothing).

Run: ``python -m benchmarks bench_running_rows``; against another tree, e.g. the commit
before a change: ``PYTHONPATH=<tree>/src python -m benchmarks bench_running_rows``.
Results go to ``benchmarks/results/<date>-running-rows.md``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import statistics
import time
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

from aster_forge.db import BackgroundTaskDbStore
from aster_forge.tasks import BackgroundTaskRecord, TaskCompletion, TaskLease

from . import _aster
from ._common import (
    create_postgres_database,
    drop_postgres_database,
    load_average,
    make_engine,
)

RESULTS = Path(__file__).resolve().parent / "results"
OTHERS = 5_000
TABLE_ROWS = 100_000
SLICES = 10
CALLS_PER_SLICE = 60
_TTL = timedelta(seconds=30)
_LANE = _aster.Lane.DEFAULT.value


def _completions(records: Sequence[BackgroundTaskRecord]) -> list[TaskCompletion]:
    completions = []
    for record in records:
        assert record.processing_token is not None and record.lease_expires_at is not None
        lease = TaskLease(record.id, record.processing_token, record.lease_expires_at)
        completions.append(TaskCompletion(lease, None, None))
    return completions


class _Table:
    """One database: its table analyzed, then ``others`` tasks claimed by another worker."""

    def __init__(self, url: str, batch: int) -> None:
        self.url = url
        self.batch = batch
        self.engine = make_engine(url, pool_size=5)
        self.store = BackgroundTaskDbStore(self.engine, notify=False)
        self.records: list[BackgroundTaskRecord] = []
        self.seconds: list[float] = []

    async def prepare(self, others: int) -> None:
        await _aster.fill(self.url, TABLE_ROWS)  # analyzed while nothing runs
        for _ in range(0, others, 500):
            await self.store.claim_due_for_lane(_LANE, 500, "other", timedelta(hours=1))
        self.records = list(await self.store.claim_due_for_lane(_LANE, self.batch, "bench", _TTL))

    async def slice(self, calls: int) -> None:
        for _ in range(calls):
            done = _completions(self.records)
            started = time.perf_counter()
            written, claimed = await self.store.mark_tasks_succeeded_and_claim(
                done, _LANE, self.batch, "bench", _TTL
            )
            self.seconds.append(time.perf_counter() - started)
            if not all(written) or len(claimed) != self.batch:
                raise SystemExit("a success was refused or the claim came back short")
            self.records = list(claimed)

    def median_us(self) -> float:
        # The first slice warms the statement cache (custom plans, then the generic one).
        return statistics.median(self.seconds[CALLS_PER_SLICE:]) * 1e6


async def _measure(batch: int) -> tuple[float, float]:
    urls = [await create_postgres_database("af_bench_rows") for _ in range(2)]
    if None in urls:
        raise SystemExit("PostgreSQL is not reachable")
    alone, crowded = (_Table(url, batch) for url in urls if url is not None)
    try:
        await alone.prepare(0)
        await crowded.prepare(OTHERS)
        for index in range(SLICES):
            order = (alone, crowded) if index % 2 else (crowded, alone)
            for table in order:
                await table.slice(CALLS_PER_SLICE)
        return alone.median_us(), crowded.median_us()
    finally:
        for table in (alone, crowded):
            await table.engine.dispose()
            await drop_postgres_database(table.url)


async def main() -> None:
    """Time the statement alone and beside 5,000 running tasks; append the results."""
    label = os.environ.get("BENCH_RUNNING_ROWS_LABEL", "run")
    lines = [
        f"### {label}",
        "",
        f"- {TABLE_ROWS:,} due tasks, analyzed before any ran; {SLICES} alternating slices "
        f"of {CALLS_PER_SLICE} calls; load average {load_average():.2f}",
        "",
        "| batch | alone | beside 5,000 running | ratio |",
        "|---:|---:|---:|---:|",
    ]
    for batch in (10, 50):
        alone, crowded = await _measure(batch)
        lines.append(f"| {batch} | {alone:,.0f} us | {crowded:,.0f} us | {crowded / alone:.2f} |")
        print(lines[-1], flush=True)
    path = RESULTS / f"{dt.date.today().isoformat()}-running-rows.md"
    header = "" if path.exists() else "# The success-and-claim beside other running tasks\n\n"
    with path.open("a", encoding="utf-8") as out:
        out.write(header + "\n".join(lines) + "\n\n")
    print(f"results appended to {path}")


if __name__ == "__main__":
    asyncio.run(main())
