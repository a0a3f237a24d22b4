"""Scenario (a) burn-downs of two source trees, interleaved in one run, compared as ratios.

The machine is shared, so absolute figures drift; running both trees alternately, round
after round, with the same N, concurrency and database, makes their ratio meaningful. The
process CPU time per task (fill, burn-down and checks) is printed too: it is far less
sensitive to other load than the wall-clock rate.
Each measurement runs in its own process with ``PYTHONPATH`` pointing at one tree.

Run: ``python -m benchmarks.side_by_side --base /tmp/base --rounds 3 --count 3000``
(``--base`` is an unpacked copy of the previous commit, for example
``git archive main | tar -x -C /tmp/base``; the current tree is this checkout).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent

_CHILD = """
import asyncio, json, sys, time
from benchmarks import _aster
from benchmarks._common import create_postgres_database, drop_postgres_database

async def main(backend: str, count: int, concurrency: int, sqlite_path: str) -> None:
    cpu = time.process_time()
    if backend == "sqlite":
        url = f"sqlite+aiosqlite:///{sqlite_path}"
        result = await _aster.burn_down(url, count, concurrency)
    else:
        url = await create_postgres_database("af_side")
        assert url is not None, "PostgreSQL is not reachable"
        try:
            result = await _aster.burn_down(url, count, concurrency)
        finally:
            await drop_postgres_database(url)
    cpu_ms = (time.process_time() - cpu) * 1000 / count
    print(json.dumps({"rate": result.rate, "cpu_ms": cpu_ms}))

asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]))
"""


def _measure(tree: Path, backend: str, count: int, concurrency: int) -> tuple[float, float]:
    env = dict(os.environ, PYTHONPATH=f"{tree / 'src'}{os.pathsep}{tree}")
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run(
            [sys.executable, "-c", _CHILD, backend, str(count), str(concurrency), f"{tmp}/b.db"],
            env=env,
            cwd=tmp,
            capture_output=True,
            text=True,
            check=False,
        )
    if done.returncode != 0:
        raise SystemExit(f"{tree} {backend} x{concurrency} failed:\n{done.stderr[-2000:]}")
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    return float(figures["rate"]), float(figures["cpu_ms"])


def main() -> int:
    """Measure both trees alternately and print a markdown table of medians and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, required=True, help="the previous commit's tree")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--count", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 10, 50])
    parser.add_argument("--backends", nargs="+", default=["sqlite", "postgresql"])
    args = parser.parse_args()
    trees = {"base": args.base.resolve(), "current": HERE}
    rates: dict[tuple[str, int, str], list[float]] = {}
    cpus: dict[tuple[str, int, str], list[float]] = {}
    for round_ in range(args.rounds):
        for backend in args.backends:
            for concurrency in args.concurrency:
                # Alternate which tree goes first, so drift does not favour one of them.
                order = list(trees.items()) if round_ % 2 == 0 else list(trees.items())[::-1]
                for label, tree in order:
                    rate, cpu = _measure(tree, backend, args.count, concurrency)
                    rates.setdefault((backend, concurrency, label), []).append(rate)
                    cpus.setdefault((backend, concurrency, label), []).append(cpu)
                    print(
                        f"round {round_ + 1} {backend} x{concurrency} {label}: "
                        f"{rate:,.0f}/s, {cpu:.3f} ms CPU/task",
                        flush=True,
                    )
    print()
    print(
        "| backend | concurrency | base tasks/s | current tasks/s | current / base "
        "| base CPU ms/task | current CPU ms/task |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for backend in args.backends:
        for concurrency in args.concurrency:
            base = statistics.median(rates[(backend, concurrency, "base")])
            current = statistics.median(rates[(backend, concurrency, "current")])
            ratio = current / base
            cpu_base = statistics.median(cpus[(backend, concurrency, "base")])
            cpu_now = statistics.median(cpus[(backend, concurrency, "current")])
            print(
                f"| {backend} | {concurrency} | {base:,.0f} | {current:,.0f} | {ratio:.2f} "
                f"| {cpu_base:.3f} | {cpu_now:.3f} |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
