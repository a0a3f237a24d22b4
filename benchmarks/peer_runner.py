# mypy: disable-error-code="import-not-found,untyped-decorator"
"""Peer systems under the same scenarios; runs inside ``benchmarks/.peers-venv`` only.

Usage: ``python benchmarks/peer_runner.py SYSTEM SCENARIO DSN COUNT CONCURRENCY``
with SYSTEM ``pgqueuer`` or ``procrastinate``. SCENARIO is one of:

- ``burn``: drain COUNT pre-enqueued no-op jobs with the documented worker API,
  pgqueuer in its default configuration;
- ``burn-uvloop``: the same on the event loop ``pgq run`` uses (uvloop);
- ``burn-capped``: pgqueuer with ``concurrency_limit=CONCURRENCY``;
- ``bulk``: enqueue COUNT jobs in chunks;
- ``single``: pgqueuer, COUNT enqueues, one per call;
- ``serve``: pgqueuer, enqueue on command (see :func:`pgqueuer_serve`);
- ``concurrent``: pgqueuer, COUNT enqueues from CONCURRENCY concurrent callers on its
  default one-connection driver; ``concurrent-pool``: the same on ``AsyncpgPoolDriver``
  over asyncpg's default pool.
- ``sync``: COUNT enqueues from CONCURRENCY threads through the peer's synchronous API
  (what Django or Flask code calls): pgqueuer's ``SyncQueries`` on a psycopg connection
  per thread, Procrastinate's ``defer`` on a ``SyncPsycopgConnector`` (its pool) shared
  by the threads.

Prints one JSON line: ``{"rate": ..., "checked": ...}``. Each burn verifies that every
job ran exactly once (a counter in the job body) and that the queue ended empty / every
job row succeeded. This file imports nothing from the project (the peers are not
project dependencies).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import threading
import time
from collections import Counter
from typing import Any

CHUNK = 5000


async def _analyze(dsn: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("ANALYZE")
    finally:
        await conn.close()


# -- pgqueuer ---------------------------------------------------------------------------


async def _pgq_fresh(dsn: str) -> Any:
    import asyncpg
    from pgqueuer import AsyncpgDriver, Queries

    conn = await asyncpg.connect(dsn)
    queries = Queries(AsyncpgDriver(conn))
    with contextlib.suppress(Exception):  # not installed yet
        await queries.uninstall()
    await queries.install()
    return conn, queries


async def _pgq_fill(queries: Any, count: int) -> float:
    started = time.perf_counter()
    for start in range(0, count, CHUNK):
        n = min(CHUNK, count - start)
        await queries.enqueue(
            ["noop"] * n, [str(i).encode() for i in range(start, start + n)], [0] * n
        )
    return count / (time.perf_counter() - started)


async def pgqueuer_burn(
    dsn: str, count: int, concurrency: int, *, capped: bool = False
) -> dict[str, Any]:
    """Drain ``count`` jobs with ``QueueManager.run(batch_size=concurrency)``.

    By default the entrypoint has no ``concurrency_limit`` (pgqueuer's default, what its
    users run); ``capped`` adds ``concurrency_limit=concurrency``, a hard cap pgqueuer
    enforces in SQL (slower, but the same guarantee as aster-forge's lane limit).
    """
    import asyncpg
    from pgqueuer import AsyncpgDriver, Job, Queries, QueueManager
    from pgqueuer.types import QueueExecutionMode

    conn, queries = await _pgq_fresh(dsn)
    await _pgq_fill(queries, count)
    await conn.close()
    await _analyze(dsn)
    worker_conn = await asyncpg.connect(dsn)
    qm = QueueManager(Queries(AsyncpgDriver(worker_conn)))
    executed: Counter[bytes] = Counter()

    limit = {"concurrency_limit": concurrency} if capped else {}

    @qm.entrypoint("noop", **limit)
    async def noop(job: Job) -> None:
        executed[job.payload or b""] += 1

    started = time.perf_counter()
    await qm.run(batch_size=concurrency, mode=QueueExecutionMode.drain)
    elapsed = time.perf_counter() - started
    await worker_conn.close()
    check = await asyncpg.connect(dsn)
    try:
        left = await check.fetchval("SELECT count(*) FROM pgqueuer")
    finally:
        await check.close()
    once = len(executed) == count and all(n == 1 for n in executed.values()) and left == 0
    return {"rate": count / elapsed, "checked": once, "left": left}


async def pgqueuer_single(dsn: str, count: int) -> dict[str, Any]:
    """One ``Queries.enqueue`` per call (its default configuration, one connection)."""
    conn, queries = await _pgq_fresh(dsn)
    try:
        await queries.enqueue("noop", b"warm", 0)
        started = time.perf_counter()
        for n in range(count):
            await queries.enqueue("noop", str(n).encode(), 0)
        rate = count / (time.perf_counter() - started)
        rows = await conn.fetchval("SELECT count(*) FROM pgqueuer")
    finally:
        await conn.close()
    return {"rate": rate, "checked": rows == count + 1}


async def pgqueuer_bulk(dsn: str, count: int) -> dict[str, Any]:
    conn, queries = await _pgq_fresh(dsn)
    try:
        rate = await _pgq_fill(queries, count)
    finally:
        await conn.close()
    return {"rate": rate, "checked": True}


async def pgqueuer_concurrent(
    dsn: str, count: int, concurrency: int, *, pool: bool
) -> dict[str, Any]:
    """``count`` enqueues, one per call, from ``concurrency`` concurrent callers."""
    import asyncpg
    from pgqueuer import AsyncpgPoolDriver, Queries

    conn, queries = await _pgq_fresh(dsn)
    pooled = await asyncpg.create_pool(dsn) if pool else None
    if pooled is not None:
        queries = Queries(AsyncpgPoolDriver(pooled))

    async def caller(first: int) -> None:
        for n in range(first, count, concurrency):
            await queries.enqueue("noop", str(n).encode(), 0)

    try:
        await queries.enqueue("noop", b"warm", 0)
        started = time.perf_counter()
        await asyncio.gather(*(caller(first) for first in range(concurrency)))
        rate = count / (time.perf_counter() - started)
        rows = await conn.fetchval("SELECT count(*) FROM pgqueuer")
    finally:
        if pooled is not None:
            await pooled.close()
        await conn.close()
    return {"rate": rate, "checked": rows == count + 1}


def _threads(count: int, concurrency: int, call: Any) -> float:
    """``count`` calls of ``call(n)`` from ``concurrency`` threads; calls per second."""

    def caller(first: int) -> None:
        for n in range(first, count, concurrency):
            call(n)

    threads = [threading.Thread(target=caller, args=(f,)) for f in range(concurrency)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return count / (time.perf_counter() - started)


def pgqueuer_sync(dsn: str, count: int, concurrency: int) -> dict[str, Any]:
    """pgqueuer's synchronous enqueue, one psycopg connection per thread."""
    import psycopg
    from pgqueuer.db import SyncPsycopgDriver
    from pgqueuer.queries import SyncQueries

    local = threading.local()
    connections: list[Any] = []

    def enqueue(n: int) -> None:
        queries = getattr(local, "queries", None)
        if queries is None:
            conn = psycopg.connect(dsn, autocommit=True)
            connections.append(conn)
            queries = local.queries = SyncQueries(SyncPsycopgDriver(conn))
        queries.enqueue("noop", str(n).encode(), 0)

    try:
        enqueue(-1)  # warm: this thread's connection
        rate = _threads(count, concurrency, enqueue)
        with psycopg.connect(dsn) as conn:
            rows = conn.execute("SELECT count(*) FROM pgqueuer").fetchone()
    finally:
        for conn in connections:
            conn.close()
    return {"rate": rate, "checked": rows is not None and rows[0] == count + 1}


def procrastinate_sync(dsn: str, count: int, concurrency: int) -> dict[str, Any]:
    """Procrastinate's synchronous ``defer`` from threads sharing its connector's pool."""
    import procrastinate

    app = procrastinate.App(connector=procrastinate.SyncPsycopgConnector(conninfo=dsn))

    @app.task(name="noop", queue="bench")
    def noop(n: int) -> None:
        del n

    with app.open():
        noop.defer(n=-1)  # warm: the pool's first connection
        rate = _threads(count, concurrency, lambda n: noop.defer(n=n))
        rows = app.connector.execute_query_one("SELECT count(*) AS n FROM procrastinate_jobs")
    return {"rate": rate, "checked": rows["n"] == count + 1}


async def pgqueuer_serve(dsn: str) -> dict[str, Any]:
    """Enqueue on command, for time-sliced interleaving with other systems.

    One connection (pgqueuer's default configuration). Reads lines from stdin:
    ``single N`` (N enqueues, one per call), ``bulk N`` (one enqueue of N jobs, the
    lists built inside the timing as :func:`_pgq_fill` does), ``quit``; answers each
    with one JSON line ``{"elapsed": seconds}``. On ``quit``, checks the row count.
    """
    conn, queries = await _pgq_fresh(dsn)
    loop = asyncio.get_running_loop()
    sent = 0
    try:
        await queries.enqueue("noop", b"warm", 0)
        print(json.dumps({"ready": True}), flush=True)
        while True:
            line = (await loop.run_in_executor(None, sys.stdin.readline)).split()
            if not line or line[0] == "quit":
                break
            n = int(line[1])
            started = time.perf_counter()
            if line[0] == "single":
                for i in range(sent, sent + n):
                    await queries.enqueue("noop", str(i).encode(), 0)
            else:
                await queries.enqueue(
                    ["noop"] * n, [str(i).encode() for i in range(sent, sent + n)], [0] * n
                )
            elapsed = time.perf_counter() - started
            sent += n
            print(json.dumps({"elapsed": elapsed}), flush=True)
        rows = await conn.fetchval("SELECT count(*) FROM pgqueuer")
    finally:
        await conn.close()
    return {"rate": 0.0, "checked": rows == sent + 1}


# -- procrastinate ----------------------------------------------------------------------


def _procrastinate_app(dsn: str, executed: Counter[int]) -> Any:
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn))

    @app.task(name="noop", queue="bench")
    async def noop(n: int) -> None:
        executed[n] += 1

    return app, noop


async def _procrastinate_fresh(app: Any, dsn: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
    finally:
        await conn.close()
    await app.schema_manager.apply_schema_async()


async def _procrastinate_fill(noop: Any, count: int) -> float:
    started = time.perf_counter()
    for start in range(0, count, CHUNK):
        await noop.batch_defer_async(*({"n": i} for i in range(start, min(start + CHUNK, count))))
    return count / (time.perf_counter() - started)


async def procrastinate_burn(dsn: str, count: int, concurrency: int) -> dict[str, Any]:
    import asyncpg

    executed: Counter[int] = Counter()
    app, noop = _procrastinate_app(dsn, executed)
    async with app.open_async():
        await _procrastinate_fresh(app, dsn)
        await _procrastinate_fill(noop, count)
        await _analyze(dsn)
        started = time.perf_counter()
        await app.run_worker_async(queues=["bench"], concurrency=concurrency, wait=False)
        elapsed = time.perf_counter() - started
    check = await asyncpg.connect(dsn)
    try:
        done = await check.fetchval(
            "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'"
        )
    finally:
        await check.close()
    once = len(executed) == count and all(n == 1 for n in executed.values()) and done == count
    return {"rate": count / elapsed, "checked": once, "succeeded_rows": done}


async def procrastinate_bulk(dsn: str, count: int) -> dict[str, Any]:
    executed: Counter[int] = Counter()
    app, noop = _procrastinate_app(dsn, executed)
    async with app.open_async():
        await _procrastinate_fresh(app, dsn)
        rate = await _procrastinate_fill(noop, count)
    return {"rate": rate, "checked": True}


async def _main(argv: list[str]) -> dict[str, Any]:
    system, scenario, dsn, count, concurrency = (
        argv[1],
        argv[2],
        argv[3],
        int(argv[4]),
        int(argv[5]),
    )
    if system == "pgqueuer":
        if scenario in ("burn", "burn-uvloop"):
            return await pgqueuer_burn(dsn, count, concurrency)
        if scenario == "burn-capped":
            return await pgqueuer_burn(dsn, count, concurrency, capped=True)
        if scenario == "single":
            return await pgqueuer_single(dsn, count)
        if scenario in ("concurrent", "concurrent-pool"):
            return await pgqueuer_concurrent(
                dsn, count, concurrency, pool=scenario == "concurrent-pool"
            )
        if scenario == "serve":
            return await pgqueuer_serve(dsn)
        if scenario == "sync":
            conn, _ = await _pgq_fresh(dsn)
            await conn.close()
            return await asyncio.to_thread(pgqueuer_sync, dsn, count, concurrency)
        return await pgqueuer_bulk(dsn, count)
    if scenario == "sync":
        executed: Counter[int] = Counter()
        app, _ = _procrastinate_app(dsn, executed)
        async with app.open_async():
            await _procrastinate_fresh(app, dsn)
        return await asyncio.to_thread(procrastinate_sync, dsn, count, concurrency)
    if scenario == "burn":
        return await procrastinate_burn(dsn, count, concurrency)
    return await procrastinate_bulk(dsn, count)


if __name__ == "__main__":
    import logging

    logging.disable(logging.WARNING)
    if sys.argv[2] == "burn-uvloop":
        # As `pgq run` runs a worker: pgqueuer's CLI picks uvloop (a dependency of
        # pgqueuer on Linux) over asyncio's own loop.
        from pgqueuer.adapters.cli.cli import asyncio_run

        print(json.dumps(asyncio_run(_main(sys.argv))), flush=True)
    else:
        print(json.dumps(asyncio.run(_main(sys.argv))), flush=True)
