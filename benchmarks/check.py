"""Regression gate (``make bench-check``): scenario (a) at concurrency 10, as a ratio.

Runs, three times, the aster-forge burn-down (one process, concurrency 10) right next to
the raw asyncpg 50-rows-per-claim loop on the same PostgreSQL database, and takes the
median of ``aster-forge / raw``: a ratio, so the machine's speed cancels out. Fails
(exit 1) when that median falls below 70 % of the committed baseline in
``benchmarks/baseline.json``. ``--write-baseline`` stores the measured median instead.

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


async def measure(count: int) -> list[tuple[float, float]]:
    """``RUNS`` pairs of (aster-forge tasks/s, raw 50-row tasks/s)."""
    url = await create_postgres_database("af_bench_check")
    if url is None:
        raise SystemExit("bench-check needs PostgreSQL")
    pairs: list[tuple[float, float]] = []
    try:
        for run in range(RUNS):
            ours = (await _aster.burn_down(url, count, 10)).rate
            raw = await _raw.raw_burn_down(url, count, 50)
            pairs.append((ours, raw))
            print(
                f"run {run + 1}: aster-forge {ours:,.0f} tasks/s, raw 50-row {raw:,.0f} tasks/s, "
                f"ratio {ours / raw:.3f}",
                flush=True,
            )
    finally:
        await drop_postgres_database(url)
    return pairs


def main() -> int:
    """Measure, compare with the baseline (or write it); the exit status."""
    count = int(os.environ.get("BENCH_CHECK_TASKS", "10000"))
    print(f"bench-check: load average {load_average():.2f}, N={count:,}", flush=True)
    pairs = asyncio.run(measure(count))
    ratio = statistics.median(ours / raw for ours, raw in pairs)
    if "--write-baseline" in sys.argv:
        BASELINE.write_text(
            json.dumps(
                {
                    "scenario": "a: 1 process x concurrency 10, PostgreSQL",
                    "ratio_to_raw_batched": round(ratio, 4),
                    "tasks": count,
                    "measured_on": dt.date.today().isoformat(),
                    "load_average": round(load_average(), 2),
                },
                indent=2,
            )
            + "\n"
        )
        print(f"bench-check: baseline written: ratio {ratio:.3f}")
        return 0
    baseline = float(json.loads(BASELINE.read_text())["ratio_to_raw_batched"])
    floor = baseline * TOLERANCE
    verdict = "OK" if ratio >= floor else "REGRESSION"
    print(
        f"bench-check: median ratio to the raw 50-row limit {ratio:.3f}; baseline {baseline:.3f}, "
        f"floor ({TOLERANCE:.0%}) {floor:.3f}: {verdict}"
    )
    return 0 if ratio >= floor else 1


if __name__ == "__main__":
    raise SystemExit(main())
