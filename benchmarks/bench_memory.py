"""RSS over a long run: one worker process executes 200,000 tasks while a producer refills.

One process, one PostgreSQL database (SQLite when PostgreSQL is unreachable): a worker at
concurrency 50 drains the table while the producer keeps 5,000 to 10,000 tasks due
(``enqueue_many`` chunks of 5,000). The process's resident set (``VmRSS``) is sampled
after every 20,000 finished tasks; "flat" means the last sample is within 10 % of the
sample after the first 20,000 (the warm-up: pools, caches and prepared statements).
The task body only counts, so the figure is the library's own memory.

Run: ``python -m benchmarks bench_memory`` (``BENCH_MEMORY_TASKS`` sets the total).
"""

from __future__ import annotations

import asyncio
import enum
import os
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from aster_forge import TaskExecutionContext, TaskStatus
from aster_forge.db import BackgroundTaskDbStore, create_background_tasks_table
from aster_forge.runtime import CancellationToken
from aster_forge.tasks import (
    ClaimedTaskExecutionConfig,
    DispatchPollConfig,
    NewTask,
    TaskLaneConfig,
    TaskRegistry,
    TaskSpec,
    TaskWorker,
)
from aster_forge.tasks._admin_query import TaskQuery

from ._common import create_postgres_database, drop_postgres_database, load_average, make_engine

SAMPLE_EVERY = 20_000
CHUNK = 5_000


class Kind(enum.StrEnum):
    COUNT = "count"


class Lane(enum.StrEnum):
    DEFAULT = "default"


class Counter:
    """The body's state: how many tasks ran."""

    def __init__(self) -> None:
        self.ran = 0


async def _count(ctx: TaskExecutionContext, state: Counter, payload: int) -> None:
    state.ran += 1


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


async def measure(url: str, total: int) -> list[tuple[int, float]]:
    """Run ``total`` tasks; ``(finished, RSS MiB)`` after every ``SAMPLE_EVERY``."""
    registry: TaskRegistry[Counter, Kind, Lane] = TaskRegistry(kind=Kind, lane=Lane, state=Counter)
    registry.register(TaskSpec(Kind.COUNT, int, None, _count))
    registry.lane(Lane.DEFAULT, [Kind.COUNT])
    registry.validate()
    engine = make_engine(url, pool_size=10)
    await create_background_tasks_table(engine)
    store = BackgroundTaskDbStore(engine, notify=False)
    state = Counter()
    token = CancellationToken()
    worker = TaskWorker(
        store,
        lanes=[TaskLaneConfig(Lane.DEFAULT, 50)],
        execution=ClaimedTaskExecutionConfig(state=state, registry=registry),
        poll=DispatchPollConfig(
            base_interval=timedelta(milliseconds=20), max_interval=timedelta(milliseconds=100)
        ),
    )
    samples: list[tuple[int, float]] = []
    running = asyncio.create_task(worker.run(token), name="bench-memory-worker")
    try:
        enqueued = 0
        while worker.stats.total().succeeded < total:
            backlog = enqueued - worker.stats.total().succeeded
            if backlog < 2 * CHUNK and enqueued < total:
                count = min(CHUNK, total - enqueued)
                await store.enqueue_many(
                    [NewTask(Kind.COUNT, Lane.DEFAULT, payload_json=str(n)) for n in range(count)]
                )
                enqueued += count
                worker.wake()
            done = worker.stats.total().succeeded
            if done >= (len(samples) + 1) * SAMPLE_EVERY:
                samples.append((done, _rss_mib()))
                print(f"{done:,} tasks: RSS {samples[-1][1]:.1f} MiB", flush=True)
            await asyncio.sleep(0.01)
        samples.append((worker.stats.total().succeeded, _rss_mib()))
        print(f"{samples[-1][0]:,} tasks: RSS {samples[-1][1]:.1f} MiB", flush=True)
    finally:
        token.cancel()
        await running
    left = (await store.count_tasks(TaskQuery()))[TaskStatus.PENDING]
    await engine.dispose()
    if state.ran != total or left:
        raise SystemExit(f"ran {state.ran} of {total} tasks, {left} left pending")
    return samples


async def _main() -> None:
    total = int(os.environ.get("BENCH_MEMORY_TASKS", "200000"))
    url = await create_postgres_database("af_bench_memory")
    print(f"bench_memory: {total:,} tasks, load average {load_average():.2f}", flush=True)
    started = time.perf_counter()
    if url is not None:
        try:
            samples = await measure(url, total)
        finally:
            await drop_postgres_database(url)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            samples = await measure(f"sqlite+aiosqlite:///{Path(tmp) / 'm.db'}", total)
    first, last = samples[0][1], samples[-1][1]
    growth = (last - first) / first
    verdict = "flat" if growth <= 0.10 else "GROWING"
    print(
        f"bench_memory: RSS {first:.1f} MiB after {samples[0][0]:,} tasks, {last:.1f} MiB after "
        f"{samples[-1][0]:,} ({growth:+.1%}): {verdict}; {time.perf_counter() - started:.0f} s"
    )


def main() -> None:
    """Entry point for ``python -m benchmarks bench_memory``."""
    asyncio.run(_main())
