"""What a lane's cluster-wide limit costs when it never binds, on PostgreSQL.

One worker process, a lane of concurrency C, N tasks enqueued before the worker
starts, each body sleeping ``body_ms``. The same point runs with no cluster limit and
with ``cluster_limit=4*C``, each run in a process of its own, the two alternating. The
limit counts running rows, and a worker holds up to three times a lane's concurrency
in leases (executing, claimed ahead of a free slot, being written), so 4 x C is above
anything one process offers: it never holds a task back, and what is measured is the
capped claim's own cost. The rate is taken from the first body's start to the last
body's end.

Run: ``python -m benchmarks bench_cluster_limit`` (part of ``make bench``). Results
replace ``benchmarks/results/cluster-limit.md``.
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
#: (body in ms, concurrency).
POINTS = ((10, 10), (10, 50))
SECONDS = float(os.environ.get("BENCH_CLUSTER_SECONDS", "3"))
ROUNDS = int(os.environ.get("BENCH_CLUSTER_ROUNDS", "3"))

_CHILD = """
import asyncio, json, sys, time
import sqlalchemy as sa
from aster_forge import Forge

async def main(url: str, body_ms: int, concurrency: int, count: int, cap: int) -> None:
    forge = Forge(url, name="cluster-bench", create_tables=True)
    lane = forge.lane("work", concurrency=concurrency, cluster_limit=cap or None)
    first = last = 0.0

    @forge.task(name="io", lane=lane)
    async def io(payload: int) -> None:
        nonlocal first, last
        first = first or time.perf_counter()
        try:
            await asyncio.sleep(body_ms / 1000)
        finally:
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
    print(json.dumps({"rate": count / (last - first)}))

asyncio.run(main(sys.argv[1], *map(int, sys.argv[2:])))
"""


def _run(url: str, body_ms: int, concurrency: int, cap: int) -> float:
    ideal = concurrency * 1000 / body_ms
    count = max(int(ideal * SECONDS), concurrency * 4)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    argv = [str(body_ms), str(concurrency), str(count), str(cap)]
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, url, *argv],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
        cwd=ROOT,
    ).stdout
    return float(json.loads(out.strip().splitlines()[-1])["rate"])


async def _measure(body_ms: int, concurrency: int, cap: int) -> float:
    url = await create_postgres_database("af_cluster")
    assert url is not None, "PostgreSQL is not reachable"
    try:
        return await asyncio.to_thread(_run, url, body_ms, concurrency, cap)
    finally:
        await drop_postgres_database(url)


async def main() -> None:
    started = datetime.now(UTC)
    rows = []
    for body_ms, concurrency in POINTS:
        variants = [("no limit", 0), (f"cluster_limit={4 * concurrency}", 4 * concurrency)]
        rates: dict[str, list[float]] = {name: [] for name, _ in variants}
        for round_ in range(ROUNDS):
            order = variants if round_ % 2 == 0 else list(reversed(variants))
            for name, cap in order:
                rate = await _measure(body_ms, concurrency, cap)
                rates[name].append(rate)
                print(f"{body_ms} ms x{concurrency} {name}: {rate:,.0f}/s", flush=True)
        plain = statistics.median(rates["no limit"])
        capped = statistics.median(rates[variants[1][0]])
        ideal = concurrency * 1000 / body_ms
        rows.append(
            f"| {body_ms} ms | {concurrency} | {ideal:,.0f}/s | {plain:,.0f}/s | "
            f"{capped:,.0f}/s | {capped / plain - 1:+.1%} |"
        )
    lines = [
        "One worker process on PostgreSQL, a lane of concurrency C, bodies sleeping for the",
        f"given time, tasks enqueued beforehand (ideal rate x {SECONDS:g} s of work); the lane",
        "without a cluster limit and with one of 4 x C (never reached: a worker holds at",
        "most 3 x C leases, executing, claimed ahead and being written), medians of",
        f"{ROUNDS} rounds, each run in a process of its own, the two alternating.",
        "",
        "| body | C | ideal (C / body) | no limit | cluster limit 4 x C | difference |",
        "|---|---|---|---|---|---|",
        *rows,
    ]
    path = _results.write(
        "cluster-limit.md",
        "A cluster-wide lane limit that never binds: its cost",
        lines,
        command=_results.command(
            "python -m benchmarks bench_cluster_limit",
            "BENCH_CLUSTER_SECONDS",
            "BENCH_CLUSTER_ROUNDS",
        ),
        databases=_results.database_versions(["postgresql+asyncpg://postgres@127.0.0.1:5432/test"]),
        started=started,
    )
    print("\n".join(lines))
    print(f"results written to {path}")


if __name__ == "__main__":
    asyncio.run(main())
