"""Retention on PostgreSQL: prune 100,000 finished rows while a worker keeps processing.

One throwaway database: ``background_tasks`` holds 100,000 tasks that finished eight
days ago (succeeded, failed and cancelled) plus a backlog of due no-op tasks. A
dispatch worker (the benchmark registry, concurrency 32) drains the backlog; its
throughput is measured over a window before pruning, during one retention pass
(:func:`~aster_forge.tasks.prune_finished_tasks`, 7 days for every status, batches of 1,000)
and over a window after it. The run checks that every old row is gone, that no task
the worker ran was deleted, and that each ran exactly once. Results replace
``benchmarks/results/retention.md``.

Run: ``python -m benchmarks bench_retention``; ``BENCH_QUICK=1`` for a short run (its file
goes to a scratch directory, see ``_results.py``).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import time

import sqlalchemy as sa

from aster_forge import TaskPruneReport, TaskRetention
from aster_forge.db import BackgroundTaskDbStore
from aster_forge.tasks import NewTask
from aster_forge.tasks._retention import prune_finished_tasks

from . import _aster, _results
from ._common import create_postgres_database, drop_postgres_database, load_average, make_engine

OLD_ROWS = 100_000
CONCURRENCY = 32
WINDOW = 4.0
# The default ages, with failed tasks also kept 7 days, so all 100,000 rows qualify.
RETENTION = TaskRetention(failed=dt.timedelta(days=7))

_BACKFILL = """
INSERT INTO background_tasks (kind, lane, status, payload_json, attempt, max_attempts,
    run_at, priority, manual_retry_allowed, cancel_requested, rescued, created_at,
    updated_at, started_at, finished_at, failure_reason, snooze_count)
SELECT 'noop', 'default', s.status, '0', 1, 5, f.at, 0, true, false, false, f.at, f.at, f.at,
    f.at, CASE WHEN s.status = 'succeeded' THEN NULL
               WHEN s.status = 'failed' THEN 'product_error' ELSE 'cancelled' END, 0
FROM generate_series(1, :n) AS g(i)
CROSS JOIN LATERAL (SELECT CASE WHEN g.i % 10 < 7 THEN 'succeeded'
                                WHEN g.i % 10 < 9 THEN 'cancelled' ELSE 'failed' END) AS s(status)
CROSS JOIN LATERAL (SELECT now() - interval '8 days' - g.i * interval '1 second') AS f(at)
"""


def _backlog() -> int:
    return 40_000 if os.environ.get("BENCH_QUICK", "") not in ("", "0") else 120_000


async def _prepare(url: str, backlog: int) -> list[int]:
    await _aster.reset_table(url)
    engine = make_engine(url)
    try:
        async with engine.begin() as conn:
            await conn.execute(sa.text(_BACKFILL), {"n": OLD_ROWS})
        store = BackgroundTaskDbStore(engine, notify=False)
        ids: list[int] = []
        for start in range(0, backlog, _aster.ENQUEUE_CHUNK):
            batch = [
                NewTask(_aster.Kind.NOOP, _aster.Lane.DEFAULT, payload_json=str(n))
                for n in range(start, min(start + _aster.ENQUEUE_CHUNK, backlog))
            ]
            ids.extend(r.record.id for r in await store.enqueue_many(batch))
    finally:
        await engine.dispose()
    await _aster.analyze(url)
    return ids


async def _count(url: str, where: str) -> int:
    engine = make_engine(url)
    try:
        async with engine.connect() as conn:
            query = sa.text(f"SELECT count(*) FROM background_tasks WHERE {where}")
            return int((await conn.execute(query)).scalar_one())
    finally:
        await engine.dispose()


async def _window(server: _aster.Server, seconds: float) -> float:
    before, started = len(server.state.executed), time.perf_counter()
    await asyncio.sleep(seconds)
    return (len(server.state.executed) - before) / (time.perf_counter() - started)


async def _run(url: str) -> list[str]:
    backlog = _backlog()
    ids = await _prepare(url, backlog)
    server = _aster.Server(url, CONCURRENCY)
    server.state.expected = len(ids)
    everything_started = server.state.all_started = asyncio.Event()
    go = asyncio.Event()
    serving = await server.start(go)
    engine = make_engine(url)
    try:
        go.set()
        await asyncio.sleep(1.0)  # warm-up: the first claims and plans
        before = await _window(server, WINDOW)
        store = BackgroundTaskDbStore(engine, notify=False)
        executed_at_start, started = len(server.state.executed), time.perf_counter()
        report: TaskPruneReport = await prune_finished_tasks(store, RETENTION)
        prune_seconds = time.perf_counter() - started
        during = (len(server.state.executed) - executed_at_start) / prune_seconds
        after = await _window(server, WINDOW)
        still_running = len(server.state.executed) < len(ids)
        await asyncio.wait_for(everything_started.wait(), timeout=600)
    finally:
        server.token.cancel()
        await asyncio.gather(serving, return_exceptions=True)
        await engine.dispose()
    _aster.check_once(server.state.executed, ids)
    old_left = await _count(url, "finished_at < now() - interval '7 days'")
    worker_rows = await _count(
        url, "status = 'succeeded' AND finished_at > now() - interval '1 day'"
    )
    if old_left != 0 or report.total != OLD_ROWS or worker_rows != len(ids):
        raise SystemExit(
            f"retention check failed: {old_left} old rows left, {report.total} removed, "
            f"{worker_rows} of {len(ids)} worker rows kept"
        )
    removed = ", ".join(f"{s.value} {n:,}" for s, n in report.removed.items())
    return [
        "| phase | worker throughput | note |",
        "|---|---:|---|",
        f"| before pruning ({WINDOW:.0f} s window) | {before:,.0f} tasks/s | |",
        f"| during pruning ({prune_seconds:.2f} s) | {during:,.0f} tasks/s | "
        f"{report.total:,} rows in {report.batches} batches ({removed}); "
        f"{report.total / prune_seconds:,.0f} rows/s |",
        f"| after pruning ({WINDOW:.0f} s window) | {after:,.0f} tasks/s | "
        f"backlog {'not yet' if still_running else 'already'} drained |",
        "",
        f"Backlog {backlog:,} no-op tasks, concurrency {CONCURRENCY}, 1 worker process; "
        f"every task ran exactly once and no row the worker wrote was pruned.",
    ]


async def main() -> None:
    """Run the retention benchmark on a throwaway PostgreSQL database."""
    url = await create_postgres_database("af_bench_retention")
    if url is None:
        return
    started = dt.datetime.now(dt.UTC)
    try:
        load = load_average()
        database = await _results.database_version(url)
        lines = await _run(url)
    finally:
        await drop_postgres_database(url)
    path = _results.write(
        "retention.md",
        "Retention while a worker runs",
        [f"1-minute load average at start {load:.1f}.", "", *lines],
        command=_results.command("python -m benchmarks bench_retention", "BENCH_QUICK"),
        databases=[database],
        started=started,
    )
    print(path.read_text(encoding="utf-8"), flush=True)
    print(f"results written to {path}")
