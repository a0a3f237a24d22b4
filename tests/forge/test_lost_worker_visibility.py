"""A worker killed mid-task: the dashboard, the lanes API and /metrics show the expired
lease while it waits, and the rescue and the failure it ends in once a worker claims.

The kill is simulated as the database sees it: a claim whose lease nobody renews
(written into the past, so no clock is waited on).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from starlette.applications import Starlette
from starlette.routing import Mount

from aster_forge import Forge, ForgeTaskFailedError, ForgeWorkerSettings, TaskStatus
from aster_forge.tasks import DispatchPollConfig
from aster_forge.tasks._records import TaskFailureReason

from ..cli._support import free_port

_FAST = ForgeWorkerSettings(
    poll=DispatchPollConfig(
        base_interval=timedelta(milliseconds=20), max_interval=timedelta(milliseconds=100)
    )
)


def _forge(url: str) -> Forge:
    """``render`` has one attempt, ``thumbnail`` three."""
    forge = Forge(url, create_tables=True, settings=_FAST)
    forge.lane("media", concurrency=2)

    @forge.task(lane="media", max_attempts=1)
    async def render(payload: int) -> int:
        return payload

    @forge.task(lane="media", max_attempts=3)
    async def thumbnail(payload: int) -> int:
        return payload

    return forge


@asynccontextmanager
async def _ops(forge: Forge) -> AsyncIterator[httpx.AsyncClient]:
    app = Starlette(routes=[Mount("/ops", forge.asgi_app())])
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        yield client


def _samples(text: str) -> dict[str, float]:
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }


async def _kill_the_worker_holding(forge: Forge) -> dict[str, int]:
    """Both tasks claimed by a worker that then died: their leases are in the past."""
    for task in forge.tasks:
        await task.enqueue(1)
    store = forge.backend.task_store
    claimed = await store.claim_due_for_lane("media", 2, "killed-worker", timedelta(minutes=5))
    table = forge.backend.tasks_table
    engine = forge.backend.engine
    assert engine is not None
    past = datetime.now(UTC) - timedelta(minutes=1)
    async with engine.begin() as conn:
        await conn.execute(sa.update(table).values(lease_expires_at=past))
    return {record.kind: record.id for record in claimed}


async def test_an_expired_lease_shows_everywhere_until_a_worker_rescues_it(
    forge_url: str,
) -> None:
    web, worker = _forge(forge_url), _forge(forge_url)  # two processes' forges
    try:
        await web.migrate()
        ids = await _kill_the_worker_holding(web)
        await _the_web_process_shows_the_expired_leases(web, ids)
        # Another process starts a worker: its first claim rescues both tasks.
        async with worker.running():
            async with asyncio.timeout(20):
                assert await worker.result(ids["thumbnail"]) == 1  # rescued, run again
                with pytest.raises(ForgeTaskFailedError):
                    await worker.result(ids["render"])  # no attempt left: failed by the rescue
            async with _ops(worker) as ops:
                after = _samples((await ops.get("/ops/metrics")).text)
        render = await worker.get_task(ids["render"])
    finally:
        await web.aclose()
        await worker.aclose()
    assert render is not None
    assert (render.status, render.failure_reason) == (
        TaskStatus.FAILED,
        TaskFailureReason.LEASE_EXPIRED,
    )
    assert after['dispatch_tasks_lease_expired_total{lane="media",outcome="failed"}'] == 1.0
    assert after['dispatch_tasks_lease_expired_total{lane="media",outcome="cancelled"}'] == 0.0
    assert after['dispatch_tasks_rescued_total{lane="media"}'] == 1.0
    assert after['task_queue_lease_expired{lane="media"}'] == 0.0


async def _the_web_process_shows_the_expired_leases(web: Forge, ids: dict[str, int]) -> None:
    async with _ops(web) as ops:
        overview = (await ops.get("/ops/api/overview")).json()
        listed = (await ops.get("/ops/api/tasks")).json()["items"]
        detail = (await ops.get(f"/ops/api/tasks/{ids['render']}")).json()
        lanes = (await ops.get("/ops/api/lanes")).json()["items"]
        before = _samples((await ops.get("/ops/metrics")).text)
    (media,) = overview["lanes"]
    assert media["counts"]["running"] == 2 and media["lease_expired"] == 2
    assert {(t["status"], t["lease_expired"]) for t in listed} == {("running", True)}
    assert detail["lease_expired"] is True
    assert [(lane["lane"], lane["expired"]) for lane in lanes] == [("media", 2)]
    assert before['task_queue_lease_expired{lane="media"}'] == 2.0
    assert before['task_queue_depth{lane="media",status="running"}'] == 2.0
    assert before['task_queue_depth{lane="media",status="pending"}'] == 0.0
    # This process claims nothing: it exports no lease endings of its own.
    assert not any(name.startswith("dispatch_tasks_lease_expired") for name in before)


async def test_a_scrape_answers_without_queue_figures_when_the_store_is_down() -> None:
    forge = Forge(f"postgresql://postgres@127.0.0.1:{free_port()}/test")
    forge.lane("media", concurrency=1)
    async with _ops(forge) as ops:
        scraped = await ops.get("/ops/metrics")
    assert scraped.status_code == 200
    samples: dict[str, Any] = _samples(scraped.text)
    assert samples['health_report_status{scope="readiness"}'] == 2.0
    assert not any(name.startswith("task_queue_") for name in samples)
    await forge.aclose()
