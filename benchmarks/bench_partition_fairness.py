"""Fair claims across partitions, and what they cost, on PostgreSQL and MariaDB.

Fairness: one worker, a lane of concurrency 10 with ``partition_limit=10``, 10,000
tasks of partition ``big`` enqueued before 10 of ``small``, bodies sleeping 10 ms. The
bodies record the order they start in; the figure is the start at which the last
``small`` task began (the issue asks for at most 100) and, for comparison, the same
lane without ``partition_limit`` (plain due order: the small partition waits behind
the big one).

Cost: the rate of the first 2,000 starts of that lane with and without the limit
(partitioned claims take the lane's row lock, rank the lane's due tasks and claim in
a transaction of several statements; the plain claim is one statement).

Run: ``python -m benchmarks bench_partition_fairness`` (part of ``make bench``).
Results replace ``benchmarks/results/partition-fairness.md``.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

from aster_forge import Forge, ForgeWorkerSettings
from aster_forge.tasks import DispatchPollConfig

from . import _results
from ._common import (
    create_mysql_database,
    create_postgres_database,
    drop_mysql_database,
    drop_postgres_database,
)

BIG = int(os.environ.get("BENCH_PARTITION_BIG", "10000"))
SMALL = 10
CONCURRENCY = 10
BODY_SECONDS = 0.01
STARTS = int(os.environ.get("BENCH_PARTITION_STARTS", "2000"))


async def _starts(url: str, partition_limit: int | None) -> tuple[list[str], float]:
    """The partitions of the first :data:`STARTS` starts in order, and their rate."""
    poll = DispatchPollConfig(
        base_interval=timedelta(milliseconds=10), max_interval=timedelta(milliseconds=50)
    )
    forge = Forge(
        url, name="partition-bench", retention=None, settings=ForgeWorkerSettings(poll=poll)
    )
    lane = forge.lane("tenants", concurrency=CONCURRENCY, partition_limit=partition_limit)
    starts: list[str] = []
    enough = asyncio.Event()
    stamps: list[float] = []

    @forge.task(name="visit", lane=lane)
    async def visit(payload: str) -> None:
        stamps.append(time.perf_counter())
        starts.append(payload)
        if len(starts) >= STARTS:
            enough.set()
        await asyncio.sleep(BODY_SECONDS)

    try:
        await forge.migrate()
        await visit.enqueue_many(["big"] * BIG, partition="big")
        await visit.enqueue_many(["small"] * SMALL, partition="small")
        async with forge.running():
            await asyncio.wait_for(enough.wait(), 600)
    finally:
        await forge.aclose()
    rate = (STARTS - 1) / (stamps[STARTS - 1] - stamps[0])
    return starts[:STARTS], rate


def _last_small(starts: list[str]) -> str:
    seen = [index + 1 for index, partition in enumerate(starts) if partition == "small"]
    return str(seen[-1]) if len(seen) == SMALL else f"not within {len(starts)}"


async def _on(
    create: Callable[[str], Awaitable[str | None]],
    drop: Callable[[str], Awaitable[None]],
    partition_limit: int | None,
) -> tuple[list[str], float]:
    url = await create("af_partition")
    assert url is not None, "the database server is not reachable"
    try:
        return await _starts(url, partition_limit)
    finally:
        await drop(url)


async def main() -> None:
    started = datetime.now(UTC)
    servers = (
        ("PostgreSQL", create_postgres_database, drop_postgres_database),
        ("MariaDB", create_mysql_database, drop_mysql_database),
    )
    rows = []
    for name, create, drop in servers:
        fair, fair_rate = await _on(create, drop, CONCURRENCY)
        plain, plain_rate = await _on(create, drop, None)
        rows.append(
            f"| {name} | {_last_small(fair)} | {_last_small(plain)} | "
            f"{plain_rate:,.0f}/s | {fair_rate:,.0f}/s | {fair_rate / plain_rate - 1:+.1%} |"
        )
        print(rows[-1], flush=True)
    lines = [
        f"One worker, a lane of concurrency {CONCURRENCY}, {BIG:,} tasks of one partition",
        f"enqueued before {SMALL} of another, bodies sleeping {BODY_SECONDS * 1000:g} ms. The",
        f"start at which the last of the {SMALL} small-partition tasks began, with",
        f"`partition_limit={CONCURRENCY}` and without it, and the start rate over the first",
        f"{STARTS:,} starts of each.",
        "",
        "| database | last small start, partitioned | last small start, plain "
        "| rate, plain | rate, partitioned | difference |",
        "|---|---|---|---|---|---|",
        *rows,
    ]
    path = _results.write(
        "partition-fairness.md",
        "Fair claims across partitions: one partition's 10,000 against another's 10",
        lines,
        command=_results.command(
            "python -m benchmarks bench_partition_fairness",
            "BENCH_PARTITION_BIG",
            "BENCH_PARTITION_STARTS",
        ),
        databases=_results.database_versions(
            [
                "postgresql+asyncpg://postgres@127.0.0.1:5432/test",
                "mysql+aiomysql://root@127.0.0.1:3306/test",
            ]
        ),
        started=started,
    )
    print("\n".join(lines))
    print(f"results written to {path}")


if __name__ == "__main__":
    asyncio.run(main())
