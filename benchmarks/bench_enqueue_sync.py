"""Enqueue from synchronous code (Django, Flask, a script) on PostgreSQL, beside the peers.

Each system enqueues COUNT no-op tasks, one per call, from T threads (1 and 8), each
through its documented synchronous API; every run's rows are counted:

- aster-forge: ``Forge(url)``, one decorated task, ``task.enqueue_sync(n)`` (payload
  validated in the calling thread; the store call runs on the forge's one
  synchronous-enqueue loop thread and its pool);
- a fresh event loop per call: ``asyncio.run(store.enqueue(...))`` on an engine without a
  pool (a loop's connections cannot outlive it), the task built by the forge's registry:
  what ``enqueue_sync`` did before the loop thread, and what a naive wrapper around any
  asyncio library does;
- pgqueuer 1.6: ``SyncQueries`` on a psycopg connection per thread (``sync`` in
  ``peer_runner.py``);
- Procrastinate 3.10: ``task.defer(...)`` on a ``SyncPsycopgConnector`` shared by the
  threads (its connection pool).

Runs rotate their order every round; medians of the rounds. Results replace
``benchmarks/results/enqueue-sync.md``.

Run: ``python -m benchmarks bench_enqueue_sync``; ``BENCH_QUICK=1`` for a short run (its
file goes to a scratch directory, see ``_results.py``).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.pool import NullPool

from aster_forge import Forge
from aster_forge.db import BackgroundTaskDbStore, create_database_engine

from . import _peers, _results
from ._common import (
    count_rows,
    create_postgres_database,
    drop_postgres_database,
    load_average,
    make_engine,
)

THREADS = (1, 8)
TABLE = "sync_tasks"


def _sizes() -> tuple[int, int]:
    """``(tasks per run, rounds)``."""
    if os.environ.get("BENCH_QUICK", "") not in ("", "0"):
        return 300, 2
    return 1_000, 3


def _threads(count: int, threads: int, call: Callable[[int], Any]) -> float:
    """``count`` calls of ``call(n)`` from ``threads`` threads; calls per second."""

    def caller(first: int) -> None:
        for n in range(first, count, threads):
            call(n)

    workers = [
        threading.Thread(target=caller, args=(first,), name=f"bench-sync-{first}")
        for first in range(threads)
    ]
    started = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return count / (time.perf_counter() - started)


def _forge(url: str) -> tuple[Forge, Any]:
    forge = Forge(url, name="bench-sync", tasks_table=TABLE)

    @forge.task(name="noop")
    async def noop(payload: int) -> None:
        del payload

    return forge, noop


async def _fresh_table(url: str) -> None:
    forge, _ = _forge(url)
    engine = make_engine(url)
    try:
        async with engine.begin() as conn:
            await conn.execute(sa.text(f"DROP TABLE IF EXISTS {TABLE} CASCADE"))
    finally:
        await engine.dispose()
    await forge.migrate()
    await forge.aclose()


def aster(url: str, count: int, threads: int) -> float:
    """``task.enqueue_sync(n)`` from ``threads`` threads; calls per second."""
    asyncio.run(_fresh_table(url))
    forge, noop = _forge(url)
    noop.enqueue_sync(-1)  # warm: the loop thread and its first connection
    rate = _threads(count, threads, noop.enqueue_sync)
    asyncio.run(forge.aclose())
    if asyncio.run(count_rows(url, TABLE)) != count + 1:
        raise SystemExit(f"aster-forge enqueue_sync (t{threads}): rows lost")
    return rate


def loop_per_call(url: str, count: int, threads: int) -> float:
    """``asyncio.run(store.enqueue(...))`` per call, no pool; calls per second."""
    asyncio.run(_fresh_table(url))
    forge, _ = _forge(url)
    engine = create_database_engine(url, poolclass=NullPool)
    store = BackgroundTaskDbStore(
        engine,
        table=forge.backend.tasks_table,
        notify_window=timedelta(0),
        coalesce_enqueues=False,
    )

    def enqueue(n: int) -> None:
        asyncio.run(store.enqueue(forge.registry.new_task("noop", n)))

    enqueue(-1)
    rate = _threads(count, threads, enqueue)
    asyncio.run(engine.dispose())
    if asyncio.run(count_rows(url, TABLE)) != count + 1:
        raise SystemExit(f"loop per call (t{threads}): rows lost")
    return rate


def _peer(system: str, url: str, count: int, threads: int) -> float:
    result = asyncio.run(_peers.run_peer(system, "sync", url, count, threads))
    return float(result["rate"])


def _systems(url: str, count: int, threads: int, peers: bool) -> dict[str, Callable[[], float]]:
    systems: dict[str, Callable[[], float]] = {
        "aster-forge `enqueue_sync`": lambda: aster(url, count, threads),
        "a fresh event loop per call (`enqueue_sync` before)": lambda: loop_per_call(
            url, count, threads
        ),
    }
    if peers:
        systems["pgqueuer `SyncQueries` (a connection per thread)"] = lambda: _peer(
            "pgqueuer", url, count, threads
        )
        systems["Procrastinate `defer` (`SyncPsycopgConnector`)"] = lambda: _peer(
            "procrastinate", url, count, threads
        )
    return systems


def _run(databases: list[str]) -> list[str]:
    count, rounds = _sizes()
    why = _peers.ensure_peers_venv()
    if why is not None:
        print(f"peers skipped: {why}", flush=True)
    url = asyncio.run(create_postgres_database("af_bench_sync"))
    if url is None:
        raise SystemExit("bench_enqueue_sync needs PostgreSQL")
    medians: dict[tuple[int, str], float] = {}
    load_start = load_average()
    try:
        databases.append(asyncio.run(_results.database_version(url)))
        for threads in THREADS:
            systems = _systems(url, count, threads, why is None)
            names = list(systems)
            rates: dict[str, list[float]] = {name: [] for name in names}
            for index in range(rounds):
                shift = index % len(names)
                for name in names[shift:] + names[:shift]:
                    rates[name].append(systems[name]())
            for name in names:
                medians[threads, name] = statistics.median(rates[name])
                print(f"t{threads} {name}: {medians[threads, name]:,.0f}/s", flush=True)
    finally:
        asyncio.run(drop_postgres_database(url))
    names = list(dict.fromkeys(name for _, name in medians))
    first = names[0]
    lines = [
        f"{count:,} tasks per run, one per call, median of {rounds} rounds; load average "
        f"{load_start:.2f} -> {load_average():.2f}.",
        "",
        "| system | " + " | ".join(f"{t} thread(s), tasks/s" for t in THREADS) + " |",
        "| --- | " + " | ".join("---:" for _ in THREADS) + " |",
        *(
            f"| {name} | " + " | ".join(f"{medians[t, name]:,.0f}" for t in THREADS) + " |"
            for name in names
        ),
        "",
        *(
            f"- {first} / {other}: "
            + ", ".join(
                f"{t} thread(s) {medians[t, first] / medians[t, other]:.2f}x" for t in THREADS
            )
            for other in names[1:]
        ),
        "",
    ]
    return lines


def main() -> None:
    """Run the rounds and replace ``results/enqueue-sync.md``."""
    started = datetime.now(UTC)
    databases: list[str] = []
    lines = _run(databases)
    path = _results.write(
        "enqueue-sync.md",
        "Synchronous enqueue on PostgreSQL",
        lines,
        command=_results.command("python -m benchmarks bench_enqueue_sync", "BENCH_QUICK"),
        databases=databases,
        started=started,
    )
    print("\n".join(lines))
    print(f"written to {path}")
