"""A worker's hot statements in a crowded table: other workers' running tasks, future tasks.

On PostgreSQL, each scenario times one statement in two tables of 100,000 due tasks,
timed in alternating slices in one run; their ratio is what counts (1.0: the crowd
costs the statement nothing):

- **running**: the success-and-claim (``store.mark_tasks_succeeded_and_claim``, batches
  of 10 and 50), in a table alone and in one where another worker holds 5,000 running
  tasks, both analyzed before any task ran (autovacuum analyzes after a tenth of the
  table changed, so the planner's view of "running" is often this old);
- **future**: the claim of 10 (``store.claim_due_for_lane``) beside 50,000 tasks due
  tomorrow, at the due tasks' priority and at a higher one (retries of a high-priority
  kind waiting out their backoff are such tasks). The due-work index is ordered by
  priority, then ``run_at``: the claim reads past every not-yet-due task of a higher
  priority before it reaches the due ones.

Run: ``python -m benchmarks bench_crowded_table``; against another tree, e.g. the
commit before a change: ``PYTHONPATH=<tree>/src BENCH_RESULTS_DIR=/tmp/before python -m
benchmarks bench_crowded_table``. Results replace
``benchmarks/results/crowded-table.md`` (``BENCH_RESULTS_DIR``: elsewhere).
"""

from __future__ import annotations

import datetime as dt
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta

import sqlalchemy as sa

from aster_forge import BackgroundTaskRecord
from aster_forge.db import BackgroundTaskDbStore
from aster_forge.tasks import NewTask, TaskLease
from aster_forge.tasks._records import TaskCompletion

from . import _aster, _results
from ._common import (
    create_postgres_database,
    drop_postgres_database,
    load_average,
    make_engine,
    postgres_base_url,
)

RUNNING = 5_000
FUTURE = 50_000
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
    """One throwaway database with its task table, and the timings of one statement."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = make_engine(url, pool_size=5)
        self.store = BackgroundTaskDbStore(self.engine, notify=False)
        self.records: list[BackgroundTaskRecord] = []
        self.seconds: list[float] = []

    async def crowd_running(self, others: int) -> None:
        await _aster.fill(self.url, TABLE_ROWS)  # analyzed while nothing runs
        for _ in range(0, others, 500):
            await self.store.claim_due_for_lane(_LANE, 500, "other", timedelta(hours=1))

    async def crowd_future(self, count: int, priority: int) -> None:
        await _aster.fill(self.url, TABLE_ROWS)
        tomorrow = dt.datetime.now(dt.UTC) + timedelta(days=1)
        steps = _aster.REGISTRY.spec_for(_aster.Kind.NOOP).initial_steps_json()
        for start in range(0, count, 5_000):
            later = [
                NewTask(
                    _aster.Kind.NOOP,
                    _aster.Lane.DEFAULT,
                    payload_json=str(n),
                    steps_json=steps,
                    run_at=tomorrow,
                    priority=priority,
                )
                for n in range(start, min(start + 5_000, count))
            ]
            await self.store.enqueue_many(later)
        async with self.engine.begin() as conn:
            await conn.execute(sa.text("ANALYZE background_tasks"))

    async def succeed_and_claim(self, batch: int) -> None:
        if not self.records:
            self.records = list(await self.store.claim_due_for_lane(_LANE, batch, "b", _TTL))
        done = _completions(self.records)
        started = time.perf_counter()
        written, claimed = await self.store.mark_tasks_succeeded_and_claim(
            done, _LANE, batch, "b", _TTL
        )
        self.seconds.append(time.perf_counter() - started)
        if not all(written) or len(claimed) != batch:
            raise SystemExit("a success was refused or the claim came back short")
        self.records = list(claimed)

    async def claim(self, batch: int) -> None:
        started = time.perf_counter()
        claimed = await self.store.claim_due_for_lane(_LANE, batch, "b", _TTL)
        self.seconds.append(time.perf_counter() - started)
        if len(claimed) != batch:
            raise SystemExit("the claim came back short")

    def median_us(self) -> float:
        # The first slice warms the statement cache (custom plans, then the generic one).
        return statistics.median(self.seconds[CALLS_PER_SLICE:]) * 1e6


async def _compare(
    prepare: Callable[[_Table, _Table], Awaitable[None]],
    statement: Callable[[_Table], Awaitable[None]],
) -> tuple[float, float]:
    """Median microseconds of ``statement`` in the plain and the crowded table."""
    urls = [await create_postgres_database("af_bench_crowd") for _ in range(2)]
    if None in urls:
        raise SystemExit("PostgreSQL is not reachable")
    plain, crowded = (_Table(url) for url in urls if url is not None)
    try:
        await prepare(plain, crowded)
        for index in range(SLICES):
            for table in (plain, crowded) if index % 2 else (crowded, plain):
                for _ in range(CALLS_PER_SLICE):
                    await statement(table)
        return plain.median_us(), crowded.median_us()
    finally:
        for table in (plain, crowded):
            await table.engine.dispose()
            await drop_postgres_database(table.url)


def _row(what: str, plain: float, crowded: float) -> str:
    return f"| {what} | {plain:,.0f} us | {crowded:,.0f} us | {crowded / plain:.2f} |"


async def main() -> None:
    """Time each statement alone and in its crowd; replace ``results/crowded-table.md``."""
    started = dt.datetime.now(dt.UTC)
    database = await _results.database_version(postgres_base_url())
    lines = [
        f"- {TABLE_ROWS:,} due tasks; {SLICES} alternating slices of {CALLS_PER_SLICE} "
        f"calls; load average {load_average():.2f}",
        "",
        "| statement, crowd | plain table | crowded table | ratio |",
        "|---|---:|---:|---:|",
    ]

    async def running(plain: _Table, crowded: _Table) -> None:
        await plain.crowd_running(0)
        await crowded.crowd_running(RUNNING)

    for batch in (10, 50):

        async def success(table: _Table, batch: int = batch) -> None:
            await table.succeed_and_claim(batch)

        plain, crowded = await _compare(running, success)
        lines.append(_row(f"success-and-claim of {batch}, 5,000 running", plain, crowded))
        print(lines[-1], flush=True)

    async def claim(table: _Table) -> None:
        await table.claim(10)

    for priority, what in ((0, "at the same priority"), (5, "at a higher priority")):

        async def future(plain: _Table, crowded: _Table, priority: int = priority) -> None:
            await plain.crowd_future(0, priority)
            await crowded.crowd_future(FUTURE, priority)

        plain, crowded = await _compare(future, claim)
        lines.append(_row(f"claim of 10, 50,000 due tomorrow {what}", plain, crowded))
        print(lines[-1], flush=True)
    path = _results.write(
        "crowded-table.md",
        "Hot statements in a crowded table",
        lines,
        command=_results.command("python -m benchmarks bench_crowded_table"),
        databases=[database],
        started=started,
    )
    print(f"results written to {path}")
