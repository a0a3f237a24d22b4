"""Concurrent enqueues under database faults on PostgreSQL: killed backends and an outage.

Producers (as a web service's requests) enqueue one task per call, concurrently, through
``ChaosProxy`` onto a store that coalesces them into shared statements. Meanwhile an
admin connection terminates the producers' backends many times a second (statements
die mid-flight, batches included) and the proxy cuts everything for a second. Every
task carries its own sequence number and no dedupe key, so a batch sent twice would
show as a duplicated number. At the end:

- every enqueue that returned a result has its row, with the returned id (none lost);
- no sequence number is stored twice (nothing replayed blindly);
- every failed enqueue raised a typed ``DatabaseOperationError``.

The run fails as vacuous unless batches were sent and faults made enqueues fail.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from aster_forge.db import (
    BackgroundTaskDbStore,
    DatabaseOperationError,
    create_background_tasks_table,
)
from aster_forge.tasks import NewTask

from ._proxy import ChaosProxy
from .report import ScenarioResult, record

pytestmark = [pytest.mark.postgres, pytest.mark.parametrize("backend", ["postgres"], indirect=True)]

APPLICATION = "aster-forge-chaos-enqueue"
TERMINATE = sa.text(
    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
    "WHERE datname = current_database() AND pid <> pg_backend_pid() "
    f"AND application_name = '{APPLICATION}'"
)
STORED = sa.text("SELECT id, payload_json FROM background_tasks WHERE lane = 'enqueue-chaos'")


@dataclass
class _Tally:
    acknowledged: dict[int, int] = field(default_factory=dict)  # seq -> id returned
    failed: int = 0
    untyped: list[str] = field(default_factory=list)
    sent: int = 0


async def _producer(
    store: BackgroundTaskDbStore, tally: _Tally, first: int, step: int, stop: asyncio.Event
) -> None:
    seq = first
    while not stop.is_set():
        tally.sent += 1
        task = NewTask("chaos", "enqueue-chaos", payload_json=json.dumps(seq))
        try:
            result = await store.enqueue(task)
        except DatabaseOperationError:
            tally.failed += 1
            await asyncio.sleep(0.01)  # as a request would fail and the next one come
        except Exception as exc:
            tally.untyped.append(type(exc).__name__)
        else:
            tally.acknowledged[seq] = result.record.id
        seq += step


async def _enqueue_fault_run(
    engine: AsyncEngine, database_url: str, proxy: ChaosProxy, *, seconds: int, long: bool
) -> None:
    await create_background_tasks_table(engine)
    url = make_url(database_url).set(port=proxy.port)
    faulty = create_async_engine(
        url, connect_args={"server_settings": {"application_name": APPLICATION}}
    )
    store = BackgroundTaskDbStore(faulty)
    assert store._coalescer is not None
    producers = 20
    tally = _Tally()
    stop = asyncio.Event()
    runs = [
        asyncio.create_task(
            _producer(store, tally, first, producers, stop), name=f"chaos:producer-{first}"
        )
        for first in range(producers)
    ]
    terminated = 0
    ticks = seconds * 5
    try:
        for tick in range(ticks):
            await asyncio.sleep(0.2)
            async with engine.connect() as conn:
                terminated += len((await conn.execute(TERMINATE)).all())
            if tick == ticks // 2:
                proxy.outage(True)
            if tick == ticks // 2 + 5:
                proxy.outage(False)
    finally:
        stop.set()
        await asyncio.gather(*runs)
        await store.flush_notifications()
        await faulty.dispose()
    async with engine.connect() as conn:
        rows = (await conn.execute(STORED)).all()
    stored: dict[int, list[int]] = {}
    for task_id, payload in rows:
        stored.setdefault(json.loads(payload), []).append(task_id)
    lost = [seq for seq, task_id in tally.acknowledged.items() if stored.get(seq) != [task_id]]
    duplicated = [seq for seq, ids in stored.items() if len(ids) > 1]
    batches = store._coalescer.batches
    ok = not lost and not duplicated and not tally.untyped and batches > 0 and tally.failed > 0
    record(
        ScenarioResult(
            scenario="concurrent enqueues under database faults (postgres)",
            tasks=tally.sent,
            faults=f"{terminated} backends terminated, {proxy.cuts} proxy cuts, "
            f"{proxy.refused} refused connects, 1 s outage",
            lost=len(lost),
            duplicated=len(duplicated),
            stuck=0,
            result="pass" if ok else "FAIL",
            long=long,
            extra=f"{producers} producers; acknowledged {len(tally.acknowledged)}, failed "
            f"{tally.failed} (typed), stored {len(rows)}; batch statements {batches}",
        )
    )
    assert not lost, f"acknowledged enqueues without their row: {lost[:10]}"
    assert not duplicated, f"stored twice (replayed): {duplicated[:10]}"
    assert not tally.untyped, f"untyped errors: {sorted(set(tally.untyped))}"
    # Not vacuous: enqueues were coalesced, and faults hit them.
    assert batches > 0, "no batch statement was sent"
    assert tally.failed > 0, "no fault made an enqueue fail"


async def test_enqueue_faults_short(
    engine: AsyncEngine, database_url: str, proxy: ChaosProxy
) -> None:
    await _enqueue_fault_run(engine, database_url, proxy, seconds=4, long=False)


@pytest.mark.slow
@pytest.mark.timeout(900)
async def test_enqueue_faults_long(
    engine: AsyncEngine, database_url: str, proxy: ChaosProxy
) -> None:
    await _enqueue_fault_run(engine, database_url, proxy, seconds=30, long=True)
