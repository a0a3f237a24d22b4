"""The Forge on SQLite, PostgreSQL and MariaDB: enqueue -> worker -> outcome, sync enqueue,
payload errors, periodic jobs across two instances, and the ASGI lifespan."""

from __future__ import annotations

import asyncio
import threading
import uuid
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from sqlalchemy.util import greenlet_spawn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route

from aster_forge import (
    ClassifiedTaskError,
    EnqueueResult,
    Forge,
    ForgePayloadError,
    ForgeWorkerSettings,
    TaskExecutionContext,
    TaskRetryClass,
    TaskStatus,
)
from aster_forge.db._tasks_notify import BackgroundTaskNotificationListener
from aster_forge.runtime import AsterRuntime, CancellationToken
from aster_forge.tasks import DispatchPollConfig

from ..conftest import drop_all_tables
from ._bodies import Thumbnail, ThumbnailResult

_FAST = ForgeWorkerSettings(
    poll=DispatchPollConfig(
        base_interval=timedelta(milliseconds=20), max_interval=timedelta(milliseconds=100)
    ),
    scheduler_lease_ttl=timedelta(seconds=3),
    scheduler_claim_ttl=timedelta(seconds=2),
)


def _forge(url: str, **options: object) -> Forge:
    return Forge(url, create_tables=True, settings=_FAST, **options)  # type: ignore[arg-type]


async def _finished(forge: Forge, result: EnqueueResult) -> TaskStatus:
    store = forge.backend.task_store
    for _ in range(400):
        record = await store.get_task(result.record.id)
        assert record is not None
        if record.status.is_terminal:
            return record.status
        await asyncio.sleep(0.025)
    raise AssertionError(f"task {result.record.id} did not finish")


async def _count_rows(forge: Forge) -> int:
    engine = forge.backend.engine
    assert engine is not None
    async with engine.connect() as conn:
        return int(
            (
                await conn.execute(
                    sa.select(sa.func.count()).select_from(forge.backend.tasks_table)
                )
            ).scalar_one()
        )


async def test_enqueue_runs_on_the_worker_with_steps_dedupe_and_failures(forge_url: str) -> None:
    forge = _forge(forge_url)
    forge.lane("media", concurrency=4)

    @forge.task(lane="media", max_attempts=5, steps=[("load", "Load"), ("render", "Render")])
    async def thumbnail(ctx: TaskExecutionContext, payload: Thumbnail) -> ThumbnailResult:
        await ctx.step_active("load")
        await ctx.step_succeeded("load")
        await ctx.step_active("render")
        if payload.file_id < 0:
            raise ClassifiedTaskError("source file is gone", TaskRetryClass.PERMANENT)
        await ctx.step_succeeded("render")
        return ThumbnailResult(path=f"{payload.file_id}-{payload.width}.png")

    async with forge.running():
        made = await thumbnail.enqueue(Thumbnail(file_id=1), dedupe_key="req-1", priority=3)
        again = await thumbnail.enqueue(Thumbnail(file_id=1), dedupe_key="req-1")
        broken = await thumbnail.enqueue({"file_id": -1})
        assert made.created and not again.created and again.record.id == made.record.id
        assert made.record.max_attempts == 5 and made.record.lane == "media"
        assert await _finished(forge, made) is TaskStatus.SUCCEEDED
        assert await _finished(forge, broken) is TaskStatus.FAILED
    record = await forge.backend.task_store.get_task(made.record.id)
    assert record is not None and record.result_json == '{"path":"1-64.png"}'
    failed = await forge.backend.task_store.get_task(broken.record.id)
    assert failed is not None and failed.last_error == "source file is gone"
    await forge.aclose()


async def test_a_bad_payload_writes_nothing_on_every_backend(forge_url: str) -> None:
    forge = _forge(forge_url)

    @forge.task(name="thumbnail")
    async def thumbnail(payload: Thumbnail) -> None:
        return None

    await forge.migrate()
    with pytest.raises(ForgePayloadError) as caught:
        await thumbnail.enqueue({"file_id": 1, "width": 0})
    assert caught.value.fields == ("width",) and caught.value.task == "thumbnail"
    with pytest.raises(ForgePayloadError):
        await thumbnail.enqueue_many([{"file_id": 1}, {"file_id": "x"}])
    assert await _count_rows(forge) == 0
    await forge.aclose()


async def test_enqueue_sync_from_a_thread_reaches_the_running_worker(forge_url: str) -> None:
    forge = _forge(forge_url)
    ran = asyncio.Event()
    loop = asyncio.get_running_loop()

    @forge.task
    async def mail(payload: int) -> int:
        loop.call_soon_threadsafe(ran.set)
        return payload * 2

    async with forge.running():
        results: list[EnqueueResult] = []
        thread = threading.Thread(target=lambda: results.append(mail.enqueue_sync(21)))
        thread.start()
        await asyncio.to_thread(thread.join)
        await ran.wait()
        (made,) = results
        assert await _finished(forge, made) is TaskStatus.SUCCEEDED
    record = await forge.backend.task_store.get_task(made.record.id)
    assert record is not None and record.result_json == "42"
    await forge.aclose()


@pytest.mark.parametrize(
    "schedule",
    [{"every": timedelta(milliseconds=250)}, {"cron": "* * * * * *"}],
    ids=["every", "cron"],
)
async def test_two_instances_run_each_periodic_firing_once(
    forge_url: str, schedule: dict[str, Any]
) -> None:
    fired: list[tuple[int, datetime]] = []
    enough = asyncio.Event()

    def instance(number: int) -> Forge:
        forge = _forge(forge_url, name="shop")

        @forge.periodic(**schedule)
        async def cleanup(ctx: TaskExecutionContext, scheduled_at: datetime) -> None:
            fired.append((number, scheduled_at))
            if len(fired) >= 3:
                enough.set()

        return forge

    first, second = instance(1), instance(2)
    await first.migrate()
    async with first.running(), second.running():
        await asyncio.wait_for(enough.wait(), timeout=30)
    firings = [at for _, at in fired]
    assert len(firings) == len(set(firings)), f"a firing ran twice: {fired}"
    rows = await first.backend.task_store.list_tasks(limit=100)
    keys = [row.dedupe_key for row in rows.items]
    assert all(key is not None and key.startswith("scheduled:shop:cleanup:") for key in keys)
    assert len(keys) == len(set(keys))
    # Both instances shared one catalog row: every executed firing was claimed there once.
    row = await second.backend.scheduled_store.get_scheduled_task("shop", "cleanup")
    assert row is not None and row.run_count >= len(set(firings))
    await first.aclose()
    await second.aclose()


async def test_the_lifespan_runs_the_workers_inside_a_starlette_app(forge_url: str) -> None:
    forge = _forge(forge_url)

    @forge.task
    async def thumbnail(payload: Thumbnail) -> ThumbnailResult:
        return ThumbnailResult(path=f"{payload.file_id}.png")

    async def request_thumbnail(request: Request) -> JSONResponse:
        made = await thumbnail.enqueue(await request.json())
        return JSONResponse({"task_id": made.record.id}, status_code=202)

    app = Starlette(
        routes=[
            Route("/thumbnails", request_thumbnail, methods=["POST"]),
            Mount("/ops", forge.asgi_app()),
        ],
        lifespan=forge.lifespan,
    )
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://shop") as client:
            response = await client.post("/thumbnails", json={"file_id": 9})
            assert response.status_code == 202
            task_id = response.json()["task_id"]
            ready = await client.get("/ops/readyz")
            assert ready.status_code == 200, ready.text
            for _ in range(400):
                shown = await client.get(f"/ops/api/tasks/{task_id}")
                if shown.json().get("status") == "succeeded":
                    break
                await asyncio.sleep(0.025)
            assert shown.json()["status"] == "succeeded", shown.text
            assert (await client.get("/ops/")).status_code == 200
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://shop"
    ) as client:
        assert (await client.get("/ops/readyz")).status_code == 503  # stopped with the app
    await forge.aclose()


async def test_forge_component_runs_under_a_products_asterruntime(forge_url: str) -> None:
    forge = _forge(forge_url)
    ran = asyncio.Event()

    @forge.task
    async def job(payload: int) -> int:
        ran.set()
        return payload

    runtime = AsterRuntime(components=[forge.component()], install_signal_handlers=False)
    assert [d.name for d in runtime.descriptors()] == ["background_tasks", "database"]
    await forge.migrate()
    service = asyncio.create_task(runtime.run(), name="product-runtime")
    made = await job.enqueue(7)
    await ran.wait()
    assert await _finished(forge, made) is TaskStatus.SUCCEEDED
    runtime.request_stop()
    await service
    report = runtime.last_shutdown_report
    assert report is not None
    order = [phase.component for phase in report.phases]
    assert order.index("background_tasks") < order.index("database")
    await forge.aclose()


@pytest.mark.postgres
async def test_aclose_sends_a_bursts_trailing_notify_before_the_pool_closes(
    postgres_url: str,
) -> None:
    forge = _forge(postgres_url)
    lane = f"burst_{uuid.uuid4().hex[:8]}"
    forge.lane(lane, concurrency=1)

    @forge.task(lane=lane)
    async def thumbnail(ctx: TaskExecutionContext, payload: Thumbnail) -> None:
        del ctx, payload

    await forge.backend.create_tables()
    heard: list[str] = []
    changed = asyncio.Event()

    def on_notify(payload: str | None) -> None:
        if payload == lane:
            heard.append(payload)
            changed.set()

    listener = BackgroundTaskNotificationListener(postgres_url, on_notify=on_notify)
    token = CancellationToken()
    run = asyncio.create_task(listener.run(token), name="listener")
    try:
        await asyncio.wait_for(listener.wait_connected(), 10)
        # Within one window (5 ms) the first notifies and the others are quiet; on a
        # slow machine the burst may span windows and notify more often, never less.
        for n in range(3):
            await thumbnail.enqueue(Thumbnail(file_id=n))
        await forge.aclose()
        async with asyncio.timeout(10):
            while len(heard) < 2:
                changed.clear()
                await changed.wait()
    finally:
        token.cancel()
        await run
        assert forge.backend.engine is not None
        await drop_all_tables(forge.backend.engine)
        await forge.aclose()
    assert len(heard) >= 2 and set(heard) == {lane}


@pytest.mark.postgres
async def test_a_forge_on_postgres_checks_a_pooled_connection_out_without_a_round_trip(
    postgres_url: str,
) -> None:
    # What a web request's enqueue pays when the loop ran since the last one: the
    # checkout must not add pool_pre_ping's BEGIN, ping and ROLLBACK (three round trips).
    forge = _forge(postgres_url)

    @forge.task()
    async def thumbnail(ctx: TaskExecutionContext, payload: Thumbnail) -> None:
        del ctx, payload

    engine = forge.backend.engine
    assert engine is not None
    try:
        await forge.backend.create_tables()
        await thumbnail.enqueue(Thumbnail(file_id=1))
        # Back in the pool, as after a request that came later than the store's linger.
        forge.backend.database_task_store("the test").release_connection()
        # Listen on every pooled session: the pool hands them out in turn.
        pool: Any = engine.sync_engine.pool
        pooled = [await engine.raw_connection() for _ in range(pool.checkedin())]
        sent: list[str] = []
        for connection in pooled:
            driver: Any = connection.driver_connection
            driver.add_query_logger(lambda record: sent.append(record.query))
            await greenlet_spawn(connection.close)
        await thumbnail.enqueue(Thumbnail(file_id=2))
        await asyncio.sleep(0)  # asyncpg calls its query loggers in the next loop turn
        assert len(sent) == 1 and sent[0].lstrip().startswith("INSERT")
    finally:
        await drop_all_tables(engine)
        await forge.aclose()
