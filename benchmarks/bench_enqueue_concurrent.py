"""Enqueue speed with concurrent callers (a busy web service), on every backend.

C callers (asyncio tasks, as C requests in flight) each enqueue one task per call
until COUNT are in. Systems, each on a fresh table, the order rotating every round:

- aster-forge, ``store.enqueue`` (a store with the registry, NOTIFY on), with its
  default enqueue coalescing: calls arriving while one is in flight share the next
  statement and commit;
- the same store with ``coalesce_enqueues=False``: every call its own statement,
  connection and commit (what the library did before coalescing);
- PostgreSQL only, pgqueuer ``Queries.enqueue`` in its documented default setup (one
  asyncpg connection, ``AsyncpgDriver``: concurrent calls wait on its lock);
- pgqueuer on ``AsyncpgPoolDriver`` over asyncpg's default pool (10 connections), the
  setup a pgqueuer user picks for concurrent callers;
- raw asyncpg, one ``INSERT`` per call on a pool of C connections (every caller its
  own connection): the most one-statement-per-call could reach.

Every run's row count is checked. Results (medians over the rounds) replace
``benchmarks/results/enqueue-concurrent.md``.

Run: ``python -m benchmarks bench_enqueue_concurrent``; ``BENCH_QUICK=1`` for a short run
(its file goes to a scratch directory, see ``_results.py``).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from aster_forge.db import BackgroundTaskDbStore

from . import _aster, _peers, _results
from ._common import (
    asyncpg_dsn,
    count_rows,
    create_mysql_database,
    create_postgres_database,
    drop_mysql_database,
    drop_postgres_database,
    load_average,
    make_engine,
)

CONCURRENCY = (1, 10, 50)


def _sizes() -> tuple[int, int]:
    """``(tasks per run, rounds)``."""
    if os.environ.get("BENCH_QUICK", "") not in ("", "0"):
        return 1_000, 2
    return 3_000, 3


async def _callers(count: int, concurrency: int, call: Callable[[int], Awaitable[Any]]) -> float:
    """``count`` calls from ``concurrency`` concurrent callers; calls per second."""

    async def caller(first: int) -> None:
        for n in range(first, count, concurrency):
            await call(n)

    started = time.perf_counter()
    async with asyncio.TaskGroup() as group:
        for first in range(concurrency):
            group.create_task(caller(first), name=f"bench-caller-{first}")
    return count / (time.perf_counter() - started)


async def aster(url: str, count: int, concurrency: int, *, coalesce: bool) -> float:
    """aster-forge's ``store.enqueue`` from concurrent callers; calls per second."""
    await _aster.reset_table(url)
    engine = make_engine(url)
    try:
        store = BackgroundTaskDbStore(engine, registry=_aster.REGISTRY, coalesce_enqueues=coalesce)
        await store.enqueue(_aster.REGISTRY.new_task(_aster.Kind.NOOP, -1))  # warm
        rate = await _callers(
            count,
            concurrency,
            lambda n: store.enqueue(_aster.REGISTRY.new_task(_aster.Kind.NOOP, n)),
        )
        await store.flush_notifications()
    finally:
        await engine.dispose()
    if await count_rows(url, "background_tasks") != count + 1:
        raise SystemExit(f"aster-forge (coalesce={coalesce}, c{concurrency}): rows lost")
    return rate


async def raw(url: str, count: int, concurrency: int) -> float:
    """One ``INSERT`` per call on a pool of ``concurrency`` asyncpg connections."""
    import asyncpg

    dsn = asyncpg_dsn(url)
    setup = await asyncpg.connect(dsn)
    try:
        await setup.execute(
            "DROP TABLE IF EXISTS raw_queue; CREATE TABLE raw_queue "
            "(id bigserial PRIMARY KEY, status text NOT NULL, payload text, token text)"
        )
    finally:
        await setup.close()
    insert = "INSERT INTO raw_queue (status, payload) VALUES ('pending', $1)"
    async with asyncpg.create_pool(dsn, min_size=concurrency, max_size=concurrency) as pool:
        await pool.execute(insert, "warm")
        rate = await _callers(count, concurrency, lambda n: pool.execute(insert, str(n)))
    if await count_rows(url, "raw_queue") != count + 1:
        raise SystemExit(f"raw INSERT (c{concurrency}): rows lost")
    return rate


def _systems(
    backend: str, url: str, count: int, concurrency: int, peers: bool
) -> dict[str, Callable[[], Awaitable[float]]]:
    systems: dict[str, Callable[[], Awaitable[float]]] = {
        "aster-forge": lambda: aster(url, count, concurrency, coalesce=True),
        "aster-forge, coalescing off": lambda: aster(url, count, concurrency, coalesce=False),
    }
    if backend == "postgresql":
        if peers:
            for scenario, name in (
                ("concurrent", "pgqueuer (default: one connection)"),
                ("concurrent-pool", "pgqueuer (asyncpg pool of 10)"),
            ):
                systems[name] = partial(_peer, scenario, url, count, concurrency)
        systems["raw INSERT (pool of C)"] = lambda: raw(url, count, concurrency)
    return systems


async def _peer(scenario: str, url: str, count: int, concurrency: int) -> float:
    result = await _peers.run_peer("pgqueuer", scenario, url, count, concurrency)
    return float(result["rate"])


async def _backend(
    backend: str, url: str, count: int, rounds: int, peers: bool
) -> dict[tuple[int, str], float]:
    medians: dict[tuple[int, str], float] = {}
    for concurrency in CONCURRENCY:
        systems = _systems(backend, url, count, concurrency, peers)
        names = list(systems)
        rates: dict[str, list[float]] = {name: [] for name in names}
        for index in range(rounds):
            shift = index % len(names)
            for name in names[shift:] + names[:shift]:
                rates[name].append(await systems[name]())
        for name in names:
            medians[concurrency, name] = statistics.median(rates[name])
            print(f"{backend} c{concurrency} {name}: {medians[concurrency, name]:,.0f}/s")
    return medians


def _table(backend: str, medians: dict[tuple[int, str], float]) -> list[str]:
    names = list(dict.fromkeys(name for _, name in medians))
    lines = [
        f"## {backend}",
        "",
        "| system | " + " | ".join(f"c{c} tasks/s" for c in CONCURRENCY) + " |",
        "| --- | " + " | ".join("---:" for _ in CONCURRENCY) + " |",
    ]
    for name in names:
        cells = " | ".join(f"{medians[c, name]:,.0f}" for c in CONCURRENCY)
        lines.append(f"| {name} | {cells} |")
    lines.append("")
    for other in names[1:]:
        ratios = ", ".join(
            f"c{c} {medians[c, 'aster-forge'] / medians[c, other]:.2f}x" for c in CONCURRENCY
        )
        lines.append(f"- aster-forge / {other}: {ratios}")
    return [*lines, ""]


async def _run(databases: list[str]) -> list[str]:
    count, rounds = _sizes()
    why = _peers.ensure_peers_venv()
    peers = why is None
    if why is not None:
        print(f"pgqueuer skipped: {why}", flush=True)
    lines: list[str] = []
    sqlite_dir = Path(os.environ.get("TMPDIR", "/tmp")) / f"af-bench-{uuid.uuid4().hex[:8]}"
    sqlite_dir.mkdir()
    try:
        url = f"sqlite+aiosqlite:///{sqlite_dir / 'bench.db'}"
        databases.append(await _results.database_version(url))
        lines += _table("sqlite", await _backend("sqlite", url, count, rounds, peers))
    finally:
        for path in sqlite_dir.iterdir():
            path.unlink()
        sqlite_dir.rmdir()
    if (pg := await create_postgres_database()) is not None:
        try:
            databases.append(await _results.database_version(pg))
            lines += _table("postgresql", await _backend("postgresql", pg, count, rounds, peers))
        finally:
            await drop_postgres_database(pg)
    if (my := await create_mysql_database()) is not None:
        try:
            databases.append(await _results.database_version(my))
            lines += _table("mariadb", await _backend("mariadb", my, count, rounds, peers))
        finally:
            await drop_mysql_database(my)
    versions = _peers.peer_versions()
    header = [
        f"{count:,} tasks per run, median of {rounds} rounds; load average "
        f"{load_average():.2f}; pgqueuer {versions.get('pgqueuer', 'n/a')}.",
        "",
    ]
    return header + lines


async def main() -> None:
    """Run every backend and replace ``results/enqueue-concurrent.md``."""
    started = datetime.now(UTC)
    databases: list[str] = []
    lines = await _run(databases)
    path = _results.write(
        "enqueue-concurrent.md",
        "Enqueue speed with concurrent callers",
        lines,
        command=_results.command("python -m benchmarks bench_enqueue_concurrent", "BENCH_QUICK"),
        databases=databases,
        started=started,
    )
    print(f"written to {path}")
