"""Where one enqueue's time goes on PostgreSQL: the row, its ``RETURNING``, the library.

``bench_enqueue`` compares whole systems. This benchmark takes one enqueue apart, on one
database, in one process, each variant timed in alternating rounds (the machine is
shared, so only figures from the same run compare):

- the statements: a raw two-column ``INSERT`` (``bench_enqueue``'s floor), the store's
  one-task statement without its ``RETURNING``, with ``RETURNING id`` only, as the store
  sends it (id and two timestamps as epoch microseconds), and with the timestamps as
  ``timestamptz``; each on one asyncpg connection, with fixed arguments and no NOTIFY
  (most enqueues of a stream carry none);
- the library, layer by layer, on one pooled connection: the statement with fixed
  arguments, then building each task (``registry.new_task``) and its arguments, then the
  store's held connection, then the result object, then the store's one-task insert (the
  NOTIFY limiter too), then ``store.enqueue`` (the registry check and the coalescer).

Printed and recorded per call: client CPU (``time.process_time``) and wall time, medians
over the rounds. Every variant's rows are counted at the end.

Run: ``python -m benchmarks bench_enqueue_parts`` (part of ``make bench``). Results
replace ``benchmarks/results/enqueue-parts.md`` (``BENCH_QUICK=1``: a short run, its file
in a scratch directory, see ``_results.py``).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import asyncpg

from aster_forge.db import BackgroundTaskDbStore
from aster_forge.tasks import NewTask

from . import _aster, _results
from ._common import (
    asyncpg_dsn,
    create_postgres_database,
    drop_postgres_database,
    load_average,
    make_engine,
)

_RAW_TABLE = "parts_raw_queue"
_RAW_INSERT = f"INSERT INTO {_RAW_TABLE} (status, payload) VALUES ('pending', $1)"

Job = Callable[[int], Awaitable[None]]


def _sizes() -> tuple[int, int]:
    """``(calls per slice, rounds)``."""
    if os.environ.get("BENCH_QUICK", "") not in ("", "0"):
        return 100, 4
    return 300, 12


def _task(n: int) -> NewTask:
    task: NewTask = _aster.REGISTRY.new_task(_aster.Kind.NOOP, n)
    return task


async def _timed(jobs: dict[str, Job], calls: int, rounds: int) -> dict[str, tuple[float, float]]:
    """Alternating rounds (the order rotates); per call: (median CPU us, median wall us)."""
    for job in jobs.values():
        await job(calls // 3)  # warm: prepared statements, the pool, the code paths
    names = list(jobs)
    cpu: dict[str, list[float]] = {name: [] for name in names}
    wall: dict[str, list[float]] = {name: [] for name in names}
    for index in range(rounds):
        shift = index % len(names)
        for name in names[shift:] + names[:shift]:
            cpu_start, wall_start = time.process_time(), time.perf_counter()
            await jobs[name](calls)
            cpu[name].append((time.process_time() - cpu_start) / calls * 1e6)
            wall[name].append((time.perf_counter() - wall_start) / calls * 1e6)
    return {name: (statistics.median(cpu[name]), statistics.median(wall[name])) for name in names}


def _statement_jobs(conn: Any, sql: str, args: list[Any]) -> dict[str, Job]:
    """The statement variants, each on ``conn`` with fixed arguments."""
    head = sql.split("RETURNING", 1)[0]
    variants = {
        "task row, no RETURNING": head,
        "task row, RETURNING id": head + "RETURNING id",
        "task row, RETURNING as the store sends it": sql,
        "task row, RETURNING id, run_at, created_at (timestamptz)": (
            head + "RETURNING id, run_at, created_at"
        ),
    }

    async def raw(calls: int) -> None:
        for i in range(calls):
            await conn.execute(_RAW_INSERT, str(i))

    def variant(text: str) -> Job:
        async def job(calls: int) -> None:
            for _ in range(calls):
                await conn.fetch(text, *args)

        return job

    jobs: dict[str, Job] = {"raw INSERT (2 columns, execute)": raw}
    jobs.update({name: variant(text) for name, text in variants.items()})
    return jobs


def _library_jobs(store: BackgroundTaskDbStore, driver: Any) -> dict[str, Job]:
    """The library's layers, from the bare statement to ``store.enqueue``."""
    pg: Any = getattr(store, "_pg_enqueue", None)
    hold: Any = getattr(store, "_driver_hold", None)
    insert: Any = getattr(store, "_insert_one", None)
    if pg is None or hold is None or insert is None:
        raise SystemExit("bench_enqueue_parts: the store has no PostgreSQL driver enqueue")
    sql, args = pg.insert_one(_task(0), notify=False)

    async def fixed(calls: int) -> None:
        for _ in range(calls):
            await driver.fetch(sql, *args)

    async def built(calls: int) -> None:
        for i in range(calls):
            text, values = pg.insert_one(_task(i), notify=False)
            await driver.fetch(text, *values)

    async def held(calls: int, *, result: bool = False) -> None:
        for i in range(calls):
            task = _task(i)
            text, values = pg.insert_one(task, notify=False)
            connection = hold.take()
            if connection is None:
                connection, _ = await hold.acquire("enqueue tasks")
            rows = await connection.driver_connection.fetch(text, *values)
            hold.free()
            if result:
                pg.inserted(task, rows)

    async def with_result(calls: int) -> None:
        await held(calls, result=True)

    async def insert_one(calls: int) -> None:
        for i in range(calls):
            await insert(pg, _task(i))

    async def enqueue(calls: int) -> None:
        for i in range(calls):
            await store.enqueue(_task(i))

    return {
        "the statement, fixed arguments": fixed,
        "+ new_task and its arguments per call": built,
        "+ the held connection": held,
        "+ the result object": with_result,
        "+ the NOTIFY limiter (the store's one-task insert)": insert_one,
        "+ the registry check and the coalescer (store.enqueue)": enqueue,
    }


def _table(title: str, figures: dict[str, tuple[float, float]]) -> list[str]:
    lines = ["", f"| {title} | client CPU per call | wall per call |", "|---|---:|---:|"]
    lines += [f"| {name} | {c:.1f} us | {w:.1f} us |" for name, (c, w) in figures.items()]
    return lines


async def main() -> None:
    """Time both ladders on a throwaway PostgreSQL database and record them."""
    url = await create_postgres_database("af_parts")
    if url is None:
        print("bench_enqueue_parts: PostgreSQL is not reachable; skipped")
        return
    calls, rounds = _sizes()
    started = datetime.now(UTC)
    load_start = load_average()
    try:
        database = await _results.database_version(url)
        await _aster.reset_table(url)
        engine = make_engine(url)
        store = BackgroundTaskDbStore(engine, registry=_aster.REGISTRY)
        await store.enqueue(_task(-1))
        conn = await asyncpg.connect(asyncpg_dsn(url))
        await conn.execute(
            f"DROP TABLE IF EXISTS {_RAW_TABLE}; CREATE TABLE {_RAW_TABLE} "
            "(id bigserial PRIMARY KEY, status text NOT NULL, payload text)"
        )
        pooled = await engine.connect()
        try:
            raw_connection = await pooled.get_raw_connection()
            pg: Any = getattr(store, "_pg_enqueue", None)
            if pg is None:
                raise SystemExit("bench_enqueue_parts: the store has no PostgreSQL enqueue")
            sql, args = pg.insert_one(_task(0), notify=False)
            statements = await _timed(_statement_jobs(conn, sql, args), calls, rounds)
            library = await _timed(
                _library_jobs(store, raw_connection.driver_connection), calls, rounds
            )
            raw_rows = await conn.fetchval(f"SELECT count(*) FROM {_RAW_TABLE}")
            task_rows = await conn.fetchval("SELECT count(*) FROM background_tasks")
        finally:
            await pooled.close()
            await conn.close()
            await engine.dispose()
    finally:
        await drop_postgres_database(url)
    per_variant = calls // 3 + calls * rounds  # the warm-up, then every round
    if raw_rows != per_variant:
        raise SystemExit(f"bench_enqueue_parts: {raw_rows} raw rows, {per_variant} expected")
    expected_tasks = 1 + per_variant * 10  # 4 statement variants and 6 layers
    if task_rows != expected_tasks:
        raise SystemExit(f"bench_enqueue_parts: {task_rows} task rows, {expected_tasks} expected")
    lines = [
        f"- {calls} calls per slice, {rounds} alternating rounds, medians per call; load "
        f"average {load_start:.2f} -> {load_average():.2f}",
        *_table("statement (one asyncpg connection, fixed arguments)", statements),
        *_table("layer (one pooled connection)", library),
        "",
    ]
    print("\n".join(lines))
    path = _results.write(
        "enqueue-parts.md",
        "Where one enqueue's time goes (PostgreSQL)",
        lines,
        command=_results.command("python -m benchmarks bench_enqueue_parts", "BENCH_QUICK"),
        databases=[database],
        started=started,
    )
    print(f"results written to {path}")
