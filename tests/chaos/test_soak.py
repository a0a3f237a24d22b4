"""Suite 7, soak: many no-op tasks and many batch-writer records through one process.

After a warm-up, resident memory must grow by less than 20 MB, the number of asyncio
tasks must come back to where it started, every pooled connection must be returned,
and no ResourceWarning may be raised. The long versions (``slow``) push 200,000 tasks
and 1,000,000 records; the short ones 3,000 tasks and 100,000 records.
"""

from __future__ import annotations

import asyncio
import gc
import os
import warnings
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import QueuePool

from aster_forge import TaskStatus
from aster_forge.db import BackgroundTaskDbStore, create_background_tasks_table
from aster_forge.runtime import (
    BufferedBatchConfig,
    CancellationToken,
    ManagedBatchWriter,
    OverflowPolicy,
)
from aster_forge.runtime.errors import RecordFullError
from aster_forge.tasks import DispatchPollConfig, TaskWorker

from ..conftest import drop_all_tables
from ._product import LANES, ChaosState, Kind, execution_config, new_task
from .report import ScenarioResult, record

RSS_BUDGET = 20 * 2**20
PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    """Resident set size of this process."""
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * PAGE


def _settle() -> int:
    gc.collect()
    return rss_bytes()


# -- batch writer --------------------------------------------------------------------------


async def _writer_soak(total: int, *, long: bool) -> None:
    warmup = total // 10
    expected_next = 0
    confirmed = 0

    async def sink(batch: list[int]) -> None:
        nonlocal expected_next, confirmed
        for value in batch:
            # In order, no gap, no repeat: nothing lost or replayed.
            assert value == expected_next, (value, expected_next)
            expected_next += 1
        confirmed += len(batch)
        await asyncio.sleep(0)

    writer: ManagedBatchWriter[int, Exception] = ManagedBatchWriter(
        BufferedBatchConfig(capacity=4096, batch_size=256, max_delay=timedelta(milliseconds=5)),
        OverflowPolicy.REJECT,
        None,
        sink,
    )
    tasks_before = len(asyncio.all_tasks())
    await writer.start()
    full_retries = 0
    baseline = 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for value in range(total):
            while True:
                try:
                    await writer.record(value)
                    break
                except RecordFullError:
                    full_retries += 1
                    await asyncio.sleep(0)
            if value == warmup:
                await writer.flush_within(timedelta(seconds=30))
                baseline = _settle()
                tasks_warm = len(asyncio.all_tasks())
        report = await writer.stop_within(timedelta(seconds=60))
        growth = _settle() - baseline
        gc.collect()
    assert report.drained and not report.panicked and report.unconfirmed_batch == 0
    assert confirmed == total and expected_next == total
    assert tasks_warm == tasks_before + 1  # the writer's single worker
    assert len(asyncio.all_tasks()) == tasks_before
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]
    assert growth < RSS_BUDGET, f"RSS grew {growth / 2**20:.1f} MB"
    record(
        ScenarioResult(
            scenario="soak: batch writer",
            tasks=total,
            faults=f"{full_retries:,} full-queue rejections retried",
            lost=total - confirmed,
            duplicated=0,
            stuck=report.unconfirmed_batch,
            result="pass",
            long=long,
            extra=f"RSS growth after warm-up {growth / 2**20:.1f} MB",
        )
    )


async def test_batch_writer_soak_short() -> None:
    await _writer_soak(100_000, long=False)


@pytest.mark.slow
@pytest.mark.timeout(900)
async def test_batch_writer_soak_one_million_records() -> None:
    await _writer_soak(1_000_000, long=True)


# -- no-op tasks through the dispatch worker ----------------------------------------------------


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        # As a product would run it: WAL so the heartbeats' writes and readers coexist.
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
    finally:
        cursor.close()


def sqlite_engine(path: Path) -> AsyncEngine:
    """A file SQLite engine configured like the demo's (WAL, 30 s busy timeout)."""
    engine = create_async_engine(f"sqlite+aiosqlite:///{path}", connect_args={"timeout": 30})
    event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
    return engine


async def _task_soak(engine: AsyncEngine, backend: str, total: int, *, long: bool) -> None:
    try:
        await create_background_tasks_table(engine)
        store = BackgroundTaskDbStore(engine)
        chunk = 1000
        for start in range(0, total, chunk):
            await store.enqueue_many(
                [new_task(Kind.NOOP, seq) for seq in range(start, min(start + chunk, total))]
            )
        state = ChaosState(track_done=False)
        token = CancellationToken()
        poll = DispatchPollConfig(
            base_interval=timedelta(milliseconds=20), max_interval=timedelta(milliseconds=100)
        )
        dispatcher = TaskWorker(store, lanes=LANES, execution=execution_config(state), poll=poll)
        tasks_before = len(asyncio.all_tasks())
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            worker = asyncio.create_task(dispatcher.run(token), name="chaos:soak")
            warmup = max(total // 10, min(100, total // 2))
            baseline = 0
            task_counts: list[int] = []
            while state.completed < total:
                await asyncio.sleep(0.25)
                task_counts.append(len(asyncio.all_tasks()))
                if not baseline and state.completed >= warmup:
                    baseline = _settle()
                assert not worker.done(), worker
            growth = _settle() - baseline
            token.cancel()
            await worker
            gc.collect()
        counts = await store.lane_counts()
        succeeded = await store.list_tasks(status=TaskStatus.SUCCEEDED, limit=1)
        assert all(c.pending == 0 and c.running == 0 for c in counts)
        assert succeeded.items and succeeded.items[0].id == total
        # Per in-flight task: its execution, body, heartbeat and stop waiter; plus the worker.
        limit = sum(config.max_concurrency for config in LANES)
        assert max(task_counts) <= tasks_before + 4 * limit + 8
        assert len(asyncio.all_tasks()) == tasks_before
        pool = engine.pool
        assert isinstance(pool, QueuePool), pool
        assert pool.checkedout() == 0, pool.status()
        assert not [w for w in caught if issubclass(w.category, ResourceWarning)]
        assert state.completed == total
        assert growth < RSS_BUDGET, f"RSS grew {growth / 2**20:.1f} MB"
        record(
            ScenarioResult(
                scenario=f"soak: no-op tasks ({backend})",
                tasks=total,
                faults="none (steady load)",
                lost=0,
                duplicated=0,
                stuck=sum(c.pending + c.running for c in counts),
                result="pass",
                long=long,
                extra=f"RSS growth after warm-up {growth / 2**20:.1f} MB; "
                f"max asyncio tasks {max(task_counts)}",
            )
        )
    finally:
        await engine.dispose()


async def test_task_soak_short(tmp_path: Path) -> None:
    await _task_soak(sqlite_engine(tmp_path / "soak.db"), "sqlite", 400, long=False)


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.timeout(6 * 3600)
async def test_task_soak_two_hundred_thousand_noop_tasks(postgres_url: str) -> None:
    # One dispatcher claims once per freed slot, so the full 200,000 take a long time;
    # ASTER_FORGE_SOAK_TASKS picks a smaller count.
    total = int(os.environ.get("ASTER_FORGE_SOAK_TASKS", "200000"))
    engine = create_async_engine(postgres_url)
    await _task_soak(engine, "postgres", total, long=True)
    cleanup = create_async_engine(postgres_url)
    try:
        await drop_all_tables(cleanup)
    finally:
        await cleanup.dispose()
