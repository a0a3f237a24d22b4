"""Enqueue speed on PostgreSQL: one enqueue per call and bulk, beside pgqueuer and raw asyncpg.

Each round runs every system once, interleaved (the machine is shared, so the ratios
inside one round are what counts), on a fresh table in one throwaway database:

- aster-forge, one ``store.enqueue`` per call (a store with the registry, so every task
  is validated; NOTIFY on), tasks built with ``registry.new_task``;
- pgqueuer (its default configuration), one ``Queries.enqueue`` per call;
- raw asyncpg, one prepared ``INSERT`` per call on one connection (the floor);
- bulk: aster-forge ``enqueue_many`` and pgqueuer ``enqueue`` in chunks of 5,000.

Every system's row count is checked after each run. Results (medians over the rounds
and the per-round ratios) go to ``benchmarks/results/<date>-enqueue.md``.

Run: ``python -m benchmarks bench_enqueue``; ``BENCH_QUICK=1`` for a short run;
``BENCH_ENQUEUE_LABEL=before`` names the run in the results file.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import inspect
import os
import statistics
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from aster_forge.db import BackgroundTaskDbStore
from aster_forge.tasks import NewTask

from . import _aster, _peers
from ._common import (
    asyncpg_dsn,
    create_postgres_database,
    drop_postgres_database,
    load_average,
    make_engine,
)

RESULTS = Path(__file__).resolve().parent / "results"
CHUNK = 5000


def _sizes() -> tuple[int, int, int]:
    """``(single calls, bulk rows, rounds)``."""
    if os.environ.get("BENCH_QUICK", "") not in ("", "0"):
        return 500, 20_000, 2
    return 2_000, 50_000, 3


def _store(engine: Any) -> BackgroundTaskDbStore:
    if "registry" in inspect.signature(BackgroundTaskDbStore).parameters:
        return BackgroundTaskDbStore(engine, registry=_aster.REGISTRY)
    return BackgroundTaskDbStore(engine)


def _task(n: int) -> NewTask:
    new_task = getattr(_aster.REGISTRY, "new_task", None)
    if new_task is not None:
        task: NewTask = new_task(_aster.Kind.NOOP, n)
        return task
    return NewTask(_aster.Kind.NOOP, _aster.Lane.DEFAULT, payload_json=str(n))


async def _count(url: str) -> int:
    engine = make_engine(url)
    try:
        async with engine.connect() as conn:
            return int(
                (await conn.execute(sa.text("SELECT count(*) FROM background_tasks"))).scalar_one()
            )
    finally:
        await engine.dispose()


async def aster_single(url: str, count: int) -> float:
    """One ``enqueue`` per call; calls/s."""
    await _aster.reset_table(url)
    engine = make_engine(url)
    try:
        store = _store(engine)
        await store.enqueue(_task(-1))  # warm the pool and the statement cache
        started = time.perf_counter()
        for n in range(count):
            await store.enqueue(_task(n))
        elapsed = time.perf_counter() - started
    finally:
        await engine.dispose()
    if await _count(url) != count + 1:
        raise SystemExit("aster-forge single enqueue: row count mismatch")
    return count / elapsed


async def aster_bulk(url: str, count: int) -> float:
    """``enqueue_many`` in chunks; rows/s."""
    await _aster.reset_table(url)
    engine = make_engine(url)
    try:
        store = _store(engine)
        await store.enqueue(_task(-1))
        started = time.perf_counter()
        for start in range(0, count, CHUNK):
            await store.enqueue_many([_task(n) for n in range(start, min(start + CHUNK, count))])
        elapsed = time.perf_counter() - started
    finally:
        await engine.dispose()
    if await _count(url) != count + 1:
        raise SystemExit("aster-forge bulk enqueue: row count mismatch")
    return count / elapsed


async def raw_single(url: str, count: int) -> float:
    """One prepared ``INSERT`` per call on one asyncpg connection; calls/s."""
    import asyncpg

    conn = await asyncpg.connect(asyncpg_dsn(url))
    try:
        await conn.execute(
            "DROP TABLE IF EXISTS raw_queue; CREATE TABLE raw_queue "
            "(id bigserial PRIMARY KEY, status text NOT NULL, payload text, token text)"
        )
        insert = "INSERT INTO raw_queue (status, payload) VALUES ('pending', $1)"
        await conn.execute(insert, "warm")
        started = time.perf_counter()
        for n in range(count):
            await conn.execute(insert, str(n))
        elapsed = time.perf_counter() - started
        if await conn.fetchval("SELECT count(*) FROM raw_queue") != count + 1:
            raise SystemExit("raw single insert: row count mismatch")
        return count / elapsed
    finally:
        await conn.execute("DROP TABLE IF EXISTS raw_queue")
        await conn.close()


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


async def _run(label: str) -> list[str]:
    single_n, bulk_n, rounds = _sizes()
    problem = _peers.ensure_peers_venv()
    url = await create_postgres_database("af_bench_enqueue")
    if url is None:
        raise SystemExit("bench_enqueue needs PostgreSQL")
    figures: dict[str, list[float]] = {}
    load_start = load_average()
    try:
        for round_no in range(1, rounds + 1):
            print(f"== enqueue round {round_no}/{rounds}", flush=True)
            runs: list[tuple[str, Any]] = [
                ("aster single", aster_single(url, single_n)),
                ("raw single", raw_single(url, single_n)),
                ("aster bulk", aster_bulk(url, bulk_n)),
            ]
            if problem is None:
                runs.insert(
                    1, ("pgqueuer single", _peers.run_peer("pgqueuer", "single", url, single_n, 1))
                )
                runs.append(("pgqueuer bulk", _peers.run_peer("pgqueuer", "bulk", url, bulk_n, 1)))
            for name, job in runs:
                result = await job
                rate = float(result["rate"]) if isinstance(result, dict) else float(result)
                figures.setdefault(name, []).append(rate)
                print(f"  {name:<16} {rate:>10,.0f}/s", flush=True)
    finally:
        await drop_postgres_database(url)
    med = {name: _median(values) for name, values in figures.items()}

    def ratio(a: str, b: str) -> str:
        pairs = [x / y for x, y in zip(figures.get(a, []), figures.get(b, []), strict=False)]
        if not pairs:
            return "n/a"
        per_round = ", ".join(f"{p:.2f}" for p in pairs)
        return f"{_median(pairs):.2f}x (rounds: {per_round})"

    lines = [
        f"### {label}",
        "",
        f"- N single = {single_n:,} calls, N bulk = {bulk_n:,} rows (chunks of {CHUNK:,}), "
        f"{rounds} interleaved rounds; load average {load_start:.2f} -> {load_average():.2f}",
        *(
            [f"- peers skipped: {problem}"]
            if problem is not None
            else ["- peers: " + ", ".join(f"{k} {v}" for k, v in _peers.peer_versions().items())]
        ),
        "",
        "| system | median | rounds |",
        "|---|--:|---|",
        *(
            f"| {name} | {med[name]:,.0f}/s | {', '.join(f'{v:,.0f}' for v in values)} |"
            for name, values in figures.items()
        ),
        "",
        f"- one enqueue per call vs pgqueuer: {ratio('aster single', 'pgqueuer single')} "
        "(goal >= 1.5x)",
        f"- one enqueue per call vs raw INSERT: {ratio('aster single', 'raw single')} "
        "(goal >= 0.70x)",
        f"- bulk vs pgqueuer: {ratio('aster bulk', 'pgqueuer bulk')} (goal >= 1x)",
        "",
    ]
    return lines


def main() -> None:
    """Run the rounds and append the section to ``results/<date>-enqueue.md``."""
    label = os.environ.get("BENCH_ENQUEUE_LABEL", "run")
    lines = asyncio.run(_run(label))
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{dt.date.today().isoformat()}-enqueue.md"
    if not path.exists():
        path.write_text(
            "# Enqueue speed on PostgreSQL\n\nProduced by `python -m benchmarks bench_enqueue` "
            "(part of `make bench`). Each round runs every system once, interleaved; the "
            "ratios are taken inside each round (the machine is shared).\n\n"
        )
    with path.open("a") as handle:
        handle.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"results appended to {path}")


if __name__ == "__main__":
    main()
