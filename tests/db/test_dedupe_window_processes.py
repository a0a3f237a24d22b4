"""Dedupe windows across processes: racing enqueues after a holder's window ended.

Four processes race five enqueues each of every key whose holder runs (its window,
``held_while={PENDING}``, has ended): each round makes exactly one new task per key,
every racer gets that task back, and the database holds the key on that row alone.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from aster_forge.db import BackgroundTaskDbStore, background_tasks_table
from aster_forge.tasks import NewTask

from ._dedupe_window_worker import LANE

ROOT = Path(__file__).resolve().parents[2]
KEYS, CONTENDERS, PROCESSES, ROUNDS = 8, 5, 4, 3


@pytest.fixture(
    params=[
        pytest.param("postgres_url", id="postgres", marks=pytest.mark.postgres),
        pytest.param("mysql_url", id="mysql", marks=pytest.mark.mysql),
    ]
)
def server_url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue(request.param))


async def test_processes_race_for_keys_whose_window_ended(server_url: str) -> None:
    engine = create_async_engine(server_url)
    name = f"dedupe_window_{uuid.uuid4().hex[:8]}"
    table = background_tasks_table(sa.MetaData(), name)
    async with engine.begin() as conn:
        await conn.run_sync(table.metadata.create_all)
    store = BackgroundTaskDbStore(engine, table=table)
    run_id = uuid.uuid4().hex
    keys = [f"{run_id}:{index}" for index in range(KEYS)]
    holders = {
        key: (await store.enqueue(NewTask("k", LANE, dedupe_key=key))).record.id for key in keys
    }
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.db._dedupe_window_worker",
            server_url,
            name,
            run_id,
            str(KEYS),
            str(CONTENDERS),
            cwd=ROOT,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        for _ in range(PROCESSES)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            assert (await asyncio.wait_for(proc.stdout.readline(), 30)).strip() == b"ready"
        for _ in range(ROUNDS):
            # Every holder runs: its window (pending only) has ended.
            claimed = await store.claim_due_for_lane(LANE, 1000, "test", timedelta(minutes=5))
            assert {record.id for record in claimed} == set(holders.values())
            for proc in procs:
                assert proc.stdin is not None
                proc.stdin.write(b"go\n")
                await proc.stdin.drain()
            outputs = []
            for proc in procs:
                assert proc.stdout is not None
                outputs.append(json.loads(await asyncio.wait_for(proc.stdout.readline(), 60)))
            async with engine.connect() as conn:
                rows = (
                    await conn.execute(
                        sa.select(table.c.dedupe_key, table.c.id).where(
                            table.c.dedupe_key.in_(keys)
                        )
                    )
                ).all()
            held = {row.dedupe_key: row.id for row in rows}
            assert len(rows) == KEYS, "a key is held by more than one row"
            for key in keys:
                created = sum(out[key][0] for out in outputs)
                ids = {task_id for out in outputs for task_id in out[key][1]}
                assert created == 1, f"{key}: {created} tasks created"
                assert ids == {held[key]}, f"{key}: racers saw {ids}, the key is on {held[key]}"
                assert held[key] != holders[key], f"{key}: the ended holder kept its key"
            holders = held
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write(b"stop\n")
            await proc.stdin.drain()
            assert await asyncio.wait_for(proc.wait(), 30) == 0
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.kill()
            await proc.wait()
        async with engine.begin() as conn:
            await conn.run_sync(table.metadata.drop_all)
        await engine.dispose()
