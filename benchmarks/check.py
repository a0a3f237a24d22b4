"""Regression gate (``make bench-check``): scenario (a) at concurrency 10 and 50, as ratios.

Runs, three times, the aster-forge burn-down (one process, concurrency 10, then 50) right
next to the raw asyncpg 50-rows-per-claim loop on the same PostgreSQL database, and
takes, per concurrency, the median of ``aster-forge / raw``: a ratio, so the machine's
speed cancels out. Fails (exit 1) when either median falls below 70 % of the committed
baseline in ``benchmarks/baseline.json``. ``--write-baseline`` stores the measured
medians instead.

Run: ``python -m benchmarks.check`` (not part of ``make test``). ``BENCH_CHECK_TASKS``
sets N (default 10,000).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import statistics
import sys
from pathlib import Path

from . import _aster, _raw
from ._common import create_postgres_database, drop_postgres_database, load_average

BASELINE = Path(__file__).resolve().parent / "baseline.json"
TOLERANCE = 0.70
RUNS = 3
WARM_UP = 2000
#: The gated concurrencies and the baseline key of each one's ratio.
GATES = {10: "ratio_to_raw_batched", 50: "ratio_to_raw_batched_c50"}


async def measure(count: int) -> dict[int, list[float]]:
    """``RUNS`` ratios (aster-forge / raw 50-row tasks/s) per gated concurrency."""
    url = await create_postgres_database("af_bench_check")
    if url is None:
        raise SystemExit("bench-check needs PostgreSQL")
    ratios: dict[int, list[float]] = {concurrency: [] for concurrency in GATES}
    try:
        # One short untimed pass of each first: the first burn-down of a process runs
        # slower than the next ones (the gate compares steady states).
        await _raw.raw_burn_down(url, WARM_UP, 50)
        for concurrency in GATES:
            await _aster.burn_down(url, WARM_UP, concurrency)
        for run in range(RUNS):
            raw = await _raw.raw_burn_down(url, count, 50)
            for concurrency, measured in ratios.items():
                ours = (await _aster.burn_down(url, count, concurrency)).rate
                measured.append(ours / raw)
                print(
                    f"run {run + 1}: aster-forge c{concurrency} {ours:,.0f} tasks/s, raw 50-row "
                    f"{raw:,.0f} tasks/s, ratio {ours / raw:.3f}",
                    flush=True,
                )
    finally:
        await drop_postgres_database(url)
    return ratios


def main() -> int:
    """Measure, compare with the baseline (or write it); the exit status."""
    count = int(os.environ.get("BENCH_CHECK_TASKS", "10000"))
    print(f"bench-check: load average {load_average():.2f}, N={count:,}", flush=True)
    medians = {c: statistics.median(values) for c, values in asyncio.run(measure(count)).items()}
    if "--write-baseline" in sys.argv:
        BASELINE.write_text(
            json.dumps(
                {
                    "scenario": "a: 1 process x concurrency 10 and 50, PostgreSQL",
                    **{GATES[c]: round(ratio, 4) for c, ratio in medians.items()},
                    "tasks": count,
                    "measured_on": dt.date.today().isoformat(),
                    "load_average": round(load_average(), 2),
                },
                indent=2,
            )
            + "\n"
        )
        print(f"bench-check: baseline written: {medians}")
        return 0
    stored = json.loads(BASELINE.read_text())
    failed = False
    for concurrency, ratio in medians.items():
        baseline = float(stored[GATES[concurrency]])
        floor = baseline * TOLERANCE
        verdict = "OK" if ratio >= floor else "REGRESSION"
        failed = failed or ratio < floor
        print(
            f"bench-check: concurrency {concurrency}: median ratio to the raw 50-row limit "
            f"{ratio:.3f}; baseline {baseline:.3f}, floor ({TOLERANCE:.0%}) {floor:.3f}: "
            f"{verdict}"
        )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
