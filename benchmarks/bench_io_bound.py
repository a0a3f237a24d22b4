"""I/O-bound bodies: how much of the configured concurrency the Forge path keeps busy.

One worker process, a lane of concurrency C (``Forge(url, default_concurrency=C)``),
N tasks enqueued before the workers start, each body sleeping ``body_ms`` (an HTTP call
or a query, as far as the worker can tell). The ideal rate is ``C / body``; the table
gives the measured rate as a share of it, and the most bodies that ran at once (counted
inside the bodies: it must never exceed C). Each point runs in a process of its own,
alternating with the same point of ``BENCH_BASE`` (another tree's ``src``, e.g. the
commit before a change) when that is set, so the two trees are compared side by side.

Run: ``python -m benchmarks bench_io_bound`` (part of ``make bench``); side by side:
``BENCH_BASE=/tmp/base/src python -m benchmarks bench_io_bound``. Results replace
``benchmarks/results/io-bound.md``.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from . import _results
from ._common import create_postgres_database, drop_postgres_database

ROOT = Path(__file__).resolve().parent.parent
#: (body in ms, concurrency): the points the issue of slot utilization names.
POINTS = ((20, 10), (20, 50), (20, 100), (100, 200))
SECONDS = float(os.environ.get("BENCH_IO_SECONDS", "3"))
ROUNDS = int(os.environ.get("BENCH_IO_ROUNDS", "2"))

_CHILD = """
import asyncio, json, sys, time
import sqlalchemy as sa
from aster_forge import Forge

async def main(url: str, body_ms: int, concurrency: int, count: int) -> None:
    forge = Forge(url, name="io-bench", default_concurrency=concurrency, create_tables=True)
    running = 0
    peak = 0
    first = last = 0.0

    @forge.task(name="io")
    async def io(payload: int) -> None:
        nonlocal running, peak, first, last
        running += 1
        peak = max(peak, running)
        first = first or time.perf_counter()
        try:
            await asyncio.sleep(body_ms / 1000)
        finally:
            running -= 1
            last = time.perf_counter()

    await forge.migrate()
    await io.enqueue_many(range(count))
    engine = forge.backend.engine
    assert engine is not None
    table = forge.backend.tasks_table
    done = sa.select(sa.func.count()).select_from(table).where(table.c.status == "succeeded")
    async with forge.running():
        while True:
            async with engine.connect() as conn:
                if (await conn.execute(done)).scalar_one() >= count:
                    break
            await asyncio.sleep(0.01)
    await forge.aclose()
    # From the first body's start to the last body's end: the worker's own pace.
    print(json.dumps({"rate": count / (last - first), "peak": peak}))

asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])))
"""


def _run(src: Path, url: str, body_ms: int, concurrency: int) -> dict[str, float]:
    ideal = concurrency * 1000 / body_ms
    count = max(int(ideal * SECONDS), concurrency * 4)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), str(ROOT)])}
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, url, str(body_ms), str(concurrency), str(count)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
        cwd=ROOT,
    ).stdout
    result: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    result["share"] = result["rate"] / ideal
    return result


def _fresh_sqlite(scratch: Path, label: str) -> str:
    path = scratch / f"io-{label}.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    return f"sqlite+aiosqlite:///{path}"


async def _fresh_url(backend: str, scratch: Path, label: str) -> str:
    if backend == "sqlite":
        return _fresh_sqlite(scratch, label)
    url = await create_postgres_database("af_io")
    assert url is not None, "PostgreSQL is not reachable"
    return url


async def _measure(src: Path, backend: str, body_ms: int, concurrency: int) -> dict[str, float]:
    scratch = Path(os.environ.get("TMPDIR", "/tmp"))
    url = await _fresh_url(backend, scratch, f"{body_ms}-{concurrency}")
    try:
        return await asyncio.to_thread(_run, src, url, body_ms, concurrency)
    finally:
        if backend == "postgres":
            await drop_postgres_database(url)


async def main() -> None:
    started = datetime.now(UTC)
    base = os.environ.get("BENCH_BASE", "")
    trees = [("current", ROOT / "src")] + ([("base", Path(base))] if base else [])
    backends = os.environ.get("BENCH_IO_BACKENDS", "postgres sqlite").split()
    rows = []
    for backend in backends:
        for body_ms, concurrency in POINTS:
            measured: dict[str, list[dict[str, float]]] = {name: [] for name, _ in trees}
            for round_ in range(ROUNDS):
                order = trees if round_ % 2 == 0 else list(reversed(trees))
                for name, src in order:
                    result = await _measure(src, backend, body_ms, concurrency)
                    measured[name].append(result)
                    rate, share, peak = result["rate"], result["share"], result["peak"]
                    print(
                        f"{backend} {body_ms} ms x{concurrency} {name}: "
                        f"{rate:,.0f}/s ({share:.0%}), peak {peak:.0f}",
                        flush=True,
                    )
            ideal = concurrency * 1000 / body_ms
            cells = [backend, f"{body_ms} ms", str(concurrency), f"{ideal:,.0f}/s"]
            for name, _ in trees:
                rate = statistics.median(r["rate"] for r in measured[name])
                peak = max(r["peak"] for r in measured[name])
                cells += [f"{rate:,.0f}/s", f"{rate / ideal:.0%}", f"{peak:.0f}"]
            rows.append("| " + " | ".join(cells) + " |")
    columns = ["backend", "body", "C", "ideal (C / body)"]
    for name, _ in trees:
        columns += [f"{name} rate", f"{name} share of ideal", f"{name} most bodies at once"]
    lines = [
        "One worker process, a lane of concurrency C, bodies sleeping for the given time,",
        f"tasks enqueued beforehand (ideal rate x {SECONDS:g} s of work), the rate taken from",
        f"the first body's start to the last body's end; medians of {ROUNDS} rounds, each point",
        "in a process of its own, the trees alternating.",
        "",
        "| " + " | ".join(columns) + " |",
        "|" + "---|" * len(columns),
        *rows,
    ]
    if base:
        lines += ["", f"base: `{base}`"]
    urls = ["postgresql+asyncpg://postgres@127.0.0.1:5432/test"] if "postgres" in backends else []
    path = _results.write(
        "io-bound.md",
        "I/O-bound bodies: share of the configured concurrency",
        lines,
        command=_results.command(
            "python -m benchmarks bench_io_bound",
            "BENCH_BASE",
            "BENCH_IO_SECONDS",
            "BENCH_IO_ROUNDS",
            "BENCH_IO_BACKENDS",
        ),
        databases=_results.database_versions(urls),
        started=started,
    )
    print("\n".join(lines))
    print(f"results written to {path}")


if __name__ == "__main__":
    asyncio.run(main())
