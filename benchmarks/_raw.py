"""The physical limit: a bare asyncpg ``FOR UPDATE SKIP LOCKED`` loop, no framework.

One connection claims ``batch`` rows per statement (fresh token per claim) and
completes them with one token-checked ``UPDATE``; every row must end ``done`` exactly
once (the token check refuses anything else).
"""

from __future__ import annotations

import time

from ._common import asyncpg_dsn

_CLAIM = """
UPDATE raw_queue SET status = 'running', token = $2
WHERE id IN (
    SELECT id FROM raw_queue WHERE status = 'pending' ORDER BY id
    LIMIT $1 FOR UPDATE SKIP LOCKED
) RETURNING id
"""
_COMPLETE = """
UPDATE raw_queue SET status = 'done', token = NULL
WHERE id = ANY($1::bigint[]) AND token = $2 AND status = 'running'
"""


async def raw_burn_down(url: str, count: int, batch: int) -> float:
    """Drain ``count`` rows, ``batch`` per claim; tasks/s."""
    import asyncpg  # optional dependency, only for the PostgreSQL reference

    conn = await asyncpg.connect(asyncpg_dsn(url))
    try:
        await conn.execute(
            "DROP TABLE IF EXISTS raw_queue; CREATE TABLE raw_queue "
            "(id bigserial PRIMARY KEY, status text NOT NULL, token text);"
            "CREATE INDEX ix_raw_queue_pending ON raw_queue (id) WHERE status = 'pending'"
        )
        await conn.execute(
            "INSERT INTO raw_queue (status) SELECT 'pending' FROM generate_series(1, $1)", count
        )
        await conn.execute("ANALYZE raw_queue")
        claim = await conn.prepare(_CLAIM)
        done = 0
        serial = 0
        started = time.perf_counter()
        while True:
            serial += 1
            token = f"t{serial}"
            ids = [row[0] for row in await claim.fetch(batch, token)]
            if not ids:
                break
            result = await conn.execute(_COMPLETE, ids, token)
            done += int(result.split()[-1])
        elapsed = time.perf_counter() - started
        if done != count:
            raise SystemExit(f"raw loop completed {done} of {count}")
        return count / elapsed
    finally:
        await conn.execute("DROP TABLE IF EXISTS raw_queue")
        await conn.close()


async def raw_bulk_insert(url: str, count: int) -> float:
    """``COPY`` of ``count`` rows into a bare queue table; rows/s."""
    import asyncpg

    conn = await asyncpg.connect(asyncpg_dsn(url))
    try:
        await conn.execute(
            "DROP TABLE IF EXISTS raw_queue; CREATE TABLE raw_queue "
            "(id bigserial PRIMARY KEY, status text NOT NULL, payload text, token text)"
        )
        started = time.perf_counter()
        await conn.copy_records_to_table(
            "raw_queue",
            records=[("pending", str(n)) for n in range(count)],
            columns=["status", "payload"],
        )
        return count / (time.perf_counter() - started)
    finally:
        await conn.execute("DROP TABLE IF EXISTS raw_queue")
        await conn.close()
