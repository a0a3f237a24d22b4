"""Enqueue from another process -> body starts, on PostgreSQL, with no listener code.

A worker process runs ``aster-forge worker benchmarks._forge_product:forge`` (idle
poll 10 s); this process enqueues one task at a time and reads the wall time the body
started from its result. Prints p50/p95/max in milliseconds.

    python -m benchmarks.bench_forge_wakeup [POSTGRES_URL] [COUNT]
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from aster_forge import TaskStatus
from aster_forge.db._url import normalize_database_url

from ._forge_product import URL_ENV, build_forge

REPO = Path(__file__).resolve().parents[1]
DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"


async def _wait_done(forge: object, task_id: int) -> float:
    store = forge.backend.task_store  # type: ignore[attr-defined]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        record = await store.get_task(task_id)
        if record is not None and record.status is TaskStatus.SUCCEEDED:
            return float(json.loads(record.result_json))
        await asyncio.sleep(0.002)
    raise RuntimeError(f"task {task_id} did not finish within 30 s")


async def run(url: str, count: int) -> dict[str, float]:
    """Start the worker, measure ``count`` sequential enqueue-to-start latencies."""
    producer = build_forge(url)
    await producer.migrate()
    env = {**os.environ, URL_ENV: url, "PYTHONPATH": str(REPO)}
    worker = subprocess.Popen(  # noqa: ASYNC220 - started once, before the measurement
        [sys.executable, "-m", "aster_forge.cli", "worker", "benchmarks._forge_product:forge"],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    task = producer.tasks[0]
    try:
        # Warm-up: the worker is listening once a task enqueued now starts at all.
        warm = await task.enqueue(0)
        await _wait_done(producer, warm.record.id)
        latencies: list[float] = []
        for number in range(1, count + 1):
            await asyncio.sleep(0.05)  # let the worker go idle (its next poll is 10 s away)
            sent = time.time()
            made = await task.enqueue(number)
            started = await _wait_done(producer, made.record.id)
            latencies.append((started - sent) * 1000)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(30)
        await producer.aclose()
    latencies.sort()
    return {
        "count": count,
        "p50_ms": round(statistics.median(latencies), 2),
        "p95_ms": round(latencies[int(len(latencies) * 0.95) - 1], 2),
        "max_ms": round(latencies[-1], 2),
    }


async def _admin(url: str, statement: str) -> None:
    engine = create_async_engine(normalize_database_url(url), isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            await conn.execute(sa.text(statement))
    finally:
        await engine.dispose()


async def in_own_database(base_url: str, count: int) -> dict[str, float]:
    """Run :func:`run` in a fresh database next to ``base_url``'s, dropped afterwards."""
    name = f"forge_bench_{os.getpid()}"
    await _admin(base_url, f'CREATE DATABASE "{name}"')
    try:
        url = make_url(base_url).set(database=name).render_as_string(hide_password=False)
        return await run(url, count)
    finally:
        await _admin(base_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def main() -> None:
    """Entry point of ``make bench`` and ``python -m benchmarks.bench_forge_wakeup``."""
    url = sys.argv[1] if len(sys.argv) > 1 and "://" in sys.argv[1] else DEFAULT_URL
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 50
    print(json.dumps(asyncio.run(in_own_database(url, count))))


if __name__ == "__main__":
    main()
