"""Latency of runtime lease and scheduled-claim operations per backend (``make bench``).

Measures median and p99 (milliseconds) of ``try_acquire``, ``renew``,
``claim_scheduled_task`` and ``complete_scheduled_task``, one uncontended call at a
time, on SQLite (a temp file), PostgreSQL and MariaDB. PostgreSQL/MariaDB URLs come
from ``ASTER_FORGE_TEST_POSTGRES_URL`` / ``ASTER_FORGE_TEST_MYSQL_URL`` (defaults: the
local servers); a throwaway database is created and dropped for the run.

Run: ``.venv/bin/python -m benchmarks bench_leases`` (``BENCH_ITERATIONS`` sets the
sample count, default 500).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from aster_forge.db import (
    RuntimeLeaseDbStore,
    ScheduledTaskDbStore,
    runtime_leases_table,
    scheduled_tasks_table,
)
from aster_forge.tasks import IntervalSchedule, ScheduledTaskOutcome
from aster_forge.tasks._schedules import ScheduledTaskClaim

DEFAULT_POSTGRES_URL = "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
DEFAULT_MYSQL_URL = "mysql+aiomysql://root@127.0.0.1:3306/test"
HOUR = timedelta(hours=1)


def _percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


async def _timed(samples: list[float], call: Awaitable[object]) -> object:
    # The coroutine object is created before the clock starts; it has not run yet.
    started = time.perf_counter()
    result = await call
    samples.append((time.perf_counter() - started) * 1000.0)
    return result


async def _measure(engine: AsyncEngine, iterations: int) -> dict[str, list[float]]:
    metadata = sa.MetaData()
    runtime_leases_table(metadata)
    scheduled_tasks_table(metadata)
    async with engine.begin() as conn:
        await conn.run_sync(metadata.create_all)
    leases = RuntimeLeaseDbStore(engine)
    catalog = ScheduledTaskDbStore(engine)
    samples: dict[str, list[float]] = {"acquire": [], "renew": [], "claim": [], "complete": []}
    # Warm the pool and the statement caches.
    await leases.try_acquire("warmup", "bench", HOUR)
    await leases.renew("warmup", "bench", HOUR)
    for index in range(iterations):
        await catalog.ensure_scheduled_task("bench", f"job-{index}", IntervalSchedule(every=HOUR))
    for index in range(iterations):
        lease_id = f"bench-{index}"
        assert await _timed(samples["acquire"], leases.try_acquire(lease_id, "o", HOUR))
        assert await _timed(samples["renew"], leases.renew(lease_id, "o", HOUR))
    for index in range(iterations):
        name = f"job-{index}"
        claim = await _timed(
            samples["claim"], catalog.claim_scheduled_task("bench", name, "o", HOUR)
        )
        assert isinstance(claim, ScheduledTaskClaim)
        done = await _timed(
            samples["complete"],
            catalog.complete_scheduled_task(claim, ScheduledTaskOutcome.succeeded()),
        )
        assert done is True
    return samples


async def _server_database(base: str) -> tuple[str, Callable[[], Awaitable[None]]]:
    quote = '"' if base.startswith("postgresql") else "`"
    name = f"af_bench_{uuid.uuid4().hex[:10]}"
    admin = create_async_engine(base, isolation_level="AUTOCOMMIT")
    try:
        async with admin.connect() as conn:
            await conn.execute(sa.text(f"CREATE DATABASE {quote}{name}{quote}"))
    finally:
        await admin.dispose()

    async def drop() -> None:
        cleanup = create_async_engine(base, isolation_level="AUTOCOMMIT")
        try:
            async with cleanup.connect() as conn:
                await conn.execute(sa.text(f"DROP DATABASE IF EXISTS {quote}{name}{quote}"))
        finally:
            await cleanup.dispose()

    url = make_url(base).set(database=name).render_as_string(hide_password=False)
    return url, drop


async def _run_backend(label: str, iterations: int) -> dict[str, list[float]] | str:
    drop: Callable[[], Awaitable[None]] | None = None
    tmp: tempfile.TemporaryDirectory[str] | None = None
    try:
        if label == "sqlite":
            tmp = tempfile.TemporaryDirectory(prefix="af-bench-")
            url = f"sqlite+aiosqlite:///{Path(tmp.name) / 'bench.db'}"
        else:
            env, default = (
                ("ASTER_FORGE_TEST_POSTGRES_URL", DEFAULT_POSTGRES_URL)
                if label == "postgresql"
                else ("ASTER_FORGE_TEST_MYSQL_URL", DEFAULT_MYSQL_URL)
            )
            url, drop = await _server_database(os.environ.get(env, default))
        engine = create_async_engine(url)
        try:
            return await _measure(engine, iterations)
        finally:
            await engine.dispose()
    except Exception as exc:  # report and continue with the other backends
        return f"unavailable ({type(exc).__name__}: {exc})"
    finally:
        if drop is not None:
            await drop()
        if tmp is not None:
            tmp.cleanup()


async def main() -> None:
    """Run the benchmark on every backend and print a median/p99 table (milliseconds)."""
    iterations = int(os.environ.get("BENCH_ITERATIONS", "500"))
    print(f"runtime lease / scheduled claim latency, {iterations} sequential calls, ms")
    print(f"{'backend':<11} {'operation':<9} {'median':>8} {'p99':>8}")
    for label in ("sqlite", "postgresql", "mysql"):
        result = await _run_backend(label, iterations)
        if isinstance(result, str):
            print(f"{label:<11} {result}")
            continue
        for operation, samples in result.items():
            median = statistics.median(samples)
            p99 = _percentile(samples, 0.99)
            print(f"{label:<11} {operation:<9} {median:>8.3f} {p99:>8.3f}")
