"""What one claim of a rate-limited lane costs, against the plain claim, on PostgreSQL.

One store, one lane with enough due tasks that no claim runs dry, claims of 4 tasks
one after another (each timed on its own): with no limit, with ``rate_limit`` (a budget
never spent: a century-long window of a large count) and with
``partition_rate_limit`` (the same, per partition; the tasks spread over 8
partitions), the last also on the portable path (the transaction the other databases
run; the store takes it on PostgreSQL for a lease too long for the server's clock).
The variants alternate by round; the table gives each one's median and 90th
percentile latency in milliseconds over every round.

Run: ``python -m benchmarks bench_rate_claim``. Results replace
``benchmarks/results/rate-claim.md``.
"""

from __future__ import annotations

import asyncio
import os
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from aster_forge.db import BackgroundTaskDbStore, create_background_tasks_table
from aster_forge.tasks import NewTask

from . import _common, _results
from ._common import (
    create_postgres_database,
    drop_postgres_database,
    make_engine,
    median,
    percentile,
)

CLAIMS = int(os.environ.get("BENCH_RATE_CLAIMS", "200"))
ROUNDS = int(os.environ.get("BENCH_RATE_ROUNDS", "3"))
BATCH = 4
_CENTURY = timedelta(days=36525)
_LEASE = timedelta(minutes=5)
# Past the store's saturating delta: the claim takes the portable path.
_PORTABLE_LEASE = timedelta(days=365 * 9000)
_PARTITION_RATE = {"partition_rate_limit": (1_000_000, _CENTURY)}
VARIANTS: tuple[tuple[str, dict[str, Any], timedelta], ...] = (
    ("no limit", {}, _LEASE),
    ("rate_limit", {"rate_limit": (1_000_000, _CENTURY)}, _LEASE),
    ("partition_rate_limit", _PARTITION_RATE, _LEASE),
    ("partition_rate_limit, portable path", _PARTITION_RATE, _PORTABLE_LEASE),
)


async def _claims(
    store: BackgroundTaskDbStore, lane: str, options: dict[str, Any], lease: timedelta
) -> list[float]:
    """Time ``CLAIMS`` claims of ``BATCH`` tasks of ``lane`` (milliseconds each)."""
    await store.enqueue_many(
        [NewTask("k", lane, partition=f"p{n % 8}") for n in range(CLAIMS * BATCH)]
    )
    times: list[float] = []
    for _ in range(CLAIMS):
        started = time.perf_counter()
        claimed = await store.claim_due_for_lane(lane, BATCH, "bench", lease, **options)
        times.append((time.perf_counter() - started) * 1000)
        assert len(claimed) == BATCH, f"{lane} ran dry"
    return times


async def main() -> None:
    """Measure, print and write ``rate-claim.md``."""
    started = datetime.now(UTC)
    url = await create_postgres_database("af_bench_rate")
    if url is None:
        return
    engine = make_engine(url)
    times: dict[str, list[float]] = {name: [] for name, _, _ in VARIANTS}
    try:
        await create_background_tasks_table(engine)
        store = BackgroundTaskDbStore(engine)
        for round_ in range(ROUNDS):
            for index, (name, options, lease) in enumerate(VARIANTS):
                times[name] += await _claims(store, f"v{index}-{round_}", options, lease)
    finally:
        await engine.dispose()
        await drop_postgres_database(url)
    rows = [
        f"| {name} | {median(samples):.2f} | {percentile(samples, 0.9):.2f} |"
        for name, samples in times.items()
    ]
    lines = [
        f"One store on PostgreSQL, {ROUNDS} rounds of {CLAIMS} claims of {BATCH} tasks per",
        "variant, one claim at a time, on a lane with enough due tasks; the rate budgets",
        "are never spent. Milliseconds per claim.",
        "",
        "| claim | median | p90 |",
        "|---|---|---|",
        *rows,
    ]
    path = _results.write(
        "rate-claim.md",
        "The claim of a rate-limited lane: its latency",
        lines,
        command=_results.command(
            "python -m benchmarks bench_rate_claim", "BENCH_RATE_CLAIMS", "BENCH_RATE_ROUNDS"
        ),
        databases=_results.database_versions([_common.postgres_base_url()]),
        started=started,
    )
    print("\n".join(lines))
    print(f"results written to {path}")


if __name__ == "__main__":
    asyncio.run(main())
