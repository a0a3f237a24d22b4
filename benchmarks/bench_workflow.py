"""A 1,000-task fan-out with one fan-in against 1,000 independent tasks, on PostgreSQL.

One throwaway database and one in-process dispatch worker (the benchmark registry,
concurrency 32, a NOTIFY listener), already running when each round starts. A round
enqueues and runs either 1,000 independent no-op tasks (one ``enqueue_many``) or a
workflow of 1,000 no-op tasks and one no-op fan-in that waits for all of them (one
``enqueue_workflow``: 1,001 rows and 1,000 edges in one transaction). The rounds
alternate, so both kinds see the same load; each figure is the median of its rounds,
timed from the enqueue call until the last task of the round started (for the
workflow: the fan-in, which starts once every dependency's success was written). The
run checks that every task ran exactly once and that the fan-in ran after all of its
dependencies. Results replace ``benchmarks/results/workflow.md``.

Run: ``python -m benchmarks bench_workflow``; ``BENCH_QUICK=1`` for fewer rounds (its file
goes to a scratch directory, see ``_results.py``).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import statistics
import time
from dataclasses import dataclass

from aster_forge.db import BackgroundTaskDbStore, create_background_tasks_table
from aster_forge.tasks import NewTask, TaskDependency

from . import _aster, _results
from ._common import create_postgres_database, drop_postgres_database, load_average, make_engine

FAN_OUT = 1_000
CONCURRENCY = 32


@dataclass
class Round:
    """One round's figures (seconds)."""

    enqueue: float
    total: float


def _rounds() -> int:
    return 2 if _results.quick() else 5


def _arm(server: _aster.Server, count: int) -> asyncio.Event:
    """An event the no-op body sets once ``count`` more payloads have started."""
    state = server.state
    state.expected = len(state.started_at) + count
    event = state.all_started = asyncio.Event()
    return event


async def _independent(store: BackgroundTaskDbStore, server: _aster.Server, n: int) -> Round:
    done = _arm(server, FAN_OUT)
    tasks = [
        NewTask(_aster.Kind.NOOP, _aster.Lane.DEFAULT, payload_json=str(n * 10_000 + i))
        for i in range(FAN_OUT)
    ]
    started = time.perf_counter()
    await store.enqueue_many(tasks)
    enqueued = time.perf_counter()
    await done.wait()
    return Round(enqueued - started, time.perf_counter() - started)


async def _workflow(
    store: BackgroundTaskDbStore, server: _aster.Server, n: int
) -> tuple[Round, int, list[int]]:
    done = _arm(server, FAN_OUT + 1)
    tasks = [
        NewTask(_aster.Kind.NOOP, _aster.Lane.DEFAULT, payload_json=str(n * 10_000 + i))
        for i in range(FAN_OUT + 1)
    ]
    edges = [TaskDependency(task=FAN_OUT, on=i) for i in range(FAN_OUT)]
    started = time.perf_counter()
    made = await store.enqueue_workflow(tasks, edges)
    enqueued = time.perf_counter()
    await done.wait()
    ids = [result.task_id for result in made]
    return Round(enqueued - started, time.perf_counter() - started), ids[-1], ids[:-1]


def _check_join_last(server: _aster.Server, n: int) -> None:
    # The no-op body stamps when each payload started: the fan-in (payload FAN_OUT of
    # the round) must start after every one of its dependencies did.
    started = server.state.started_at
    base = n * 10_000
    join = started.get(base + FAN_OUT)
    last = max(started[base + i] for i in range(FAN_OUT))
    if join is None or join < last:
        raise SystemExit(f"round {n}: the fan-in did not run after all its dependencies")


async def _run(url: str) -> list[str]:
    engine = make_engine(url)
    await create_background_tasks_table(engine)
    server = _aster.Server(url, CONCURRENCY)
    go = asyncio.Event()
    serving = await server.start(go)
    store = BackgroundTaskDbStore(engine)
    independent: list[Round] = []
    workflow: list[Round] = []
    all_ids: list[int] = []
    try:
        go.set()
        await _independent(store, server, 0)  # warm-up: plans, the pool, the listener
        all_ids_before = len(server.state.executed)
        for n in range(1, _rounds() + 1):
            independent.append(await _independent(store, server, 2 * n))
            made, join, fan_out = await _workflow(store, server, 2 * n + 1)
            workflow.append(made)
            _check_join_last(server, 2 * n + 1)
            all_ids.extend([*fan_out, join])
        ran = len(server.state.executed) - all_ids_before
    finally:
        server.token.cancel()
        await asyncio.gather(serving, return_exceptions=True)
        await engine.dispose()
    duplicates = [task_id for task_id, count in server.state.executed.items() if count != 1]
    missing = set(all_ids) - set(server.state.executed)
    expected = _rounds() * (2 * FAN_OUT + 1)
    if duplicates or missing or ran != expected:
        raise SystemExit(
            f"workflow check failed: {len(duplicates)} ran twice, {len(missing)} never ran, "
            f"{ran} of {expected} tasks ran"
        )
    ind_total = statistics.median(r.total for r in independent)
    wf_total = statistics.median(r.total for r in workflow)
    ind_enqueue = statistics.median(r.enqueue for r in independent)
    wf_enqueue = statistics.median(r.enqueue for r in workflow)
    per_edge = (wf_total - ind_total) / FAN_OUT
    return [
        "| round | enqueue | enqueue to last task started | tasks/s |",
        "|---|---:|---:|---:|",
        f"| 1,000 independent tasks | {ind_enqueue * 1000:,.1f} ms | {ind_total * 1000:,.0f} ms "
        f"| {FAN_OUT / ind_total:,.0f} |",
        f"| 1,000-task fan-out + 1 fan-in (1,000 edges) | {wf_enqueue * 1000:,.1f} ms | "
        f"{wf_total * 1000:,.0f} ms | {(FAN_OUT + 1) / wf_total:,.0f} |",
        "",
        f"Cost per edge: {per_edge * 1e6:,.0f} µs of wall time end to end "
        f"({(wf_enqueue - ind_enqueue) / FAN_OUT * 1e6:,.1f} µs of it at enqueue), with "
        f"concurrency {CONCURRENCY}: the successes of tasks with dependents leave the "
        "worker's batched success-and-claim statement for a transaction per batch that also "
        "locks the fan-in's row and lowers its count, so those batches queue on that lock. "
        "Tasks without dependencies keep the batched path.",
        "",
        f"Median of {_rounds()} rounds of each, alternating, 1 worker process; every task "
        "ran exactly once and every fan-in ran.",
    ]


async def main() -> None:
    """Run the workflow benchmark on a throwaway PostgreSQL database."""
    url = await create_postgres_database("af_bench_workflow")
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
        "workflow.md",
        "Workflow fan-in against independent tasks",
        [f"1-minute load average at start {load:.1f}.", "", *lines],
        command=_results.command("python -m benchmarks bench_workflow", "BENCH_QUICK"),
        databases=[database],
        started=started,
    )
    print(path.read_text(encoding="utf-8"), flush=True)
    print(f"results written to {path}")
