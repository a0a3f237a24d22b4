"""Admin API lane pause/resume and the paused field, on every backend and the in-memory store."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from aster_forge.db import BackgroundTaskDbStore, create_background_tasks_table
from aster_forge.tasks import BackgroundTaskStore, NewTask, TaskLease
from aster_forge.testing import InMemoryTaskStore, ManualClock
from aster_forge.web import AdminSources, admin_app

from ._support import AUTH, TOKEN, client

_TTL = timedelta(seconds=30)


@pytest.fixture(params=["memory", "db"])
async def store(
    request: pytest.FixtureRequest, engine: AsyncEngine
) -> AsyncIterator[BackgroundTaskStore]:
    if request.param == "memory":
        yield InMemoryTaskStore()
        return
    await create_background_tasks_table(engine)
    yield BackgroundTaskDbStore(engine, clock=ManualClock())


async def test_pause_and_resume_a_lane_through_the_api(store: BackgroundTaskStore) -> None:
    await store.enqueue_many([NewTask("thumb", "media"), NewTask("mail", "email")])
    app = admin_app(AdminSources(task_store=store, lanes=("email",)), admin_token=TOKEN)
    async with client(app) as http:
        paused = await http.post("/api/lanes/media/pause", headers=AUTH)
        assert paused.status_code == 200, paused.text
        body = paused.json()
        assert body["lane"] == "media" and body["paused"] is True and body["paused_at"]
        lanes = {
            item["lane"]: item
            for item in (await http.get("/api/lanes", headers=AUTH)).json()["items"]
        }
        assert lanes["media"]["paused"] is True and lanes["media"]["paused_at"] == body["paused_at"]
        assert lanes["email"]["paused"] is False and lanes["email"]["paused_at"] is None
        assert await store.claim_due_for_lane("media", 5, "w", _TTL) == [], "claims skip it"
        assert len(await store.claim_due_for_lane("email", 5, "w", _TTL)) == 1
        resumed = await http.post("/api/lanes/media/resume", headers=AUTH)
        assert resumed.status_code == 200 and resumed.json()["paused"] is False
        lanes = {
            item["lane"]: item
            for item in (await http.get("/api/lanes", headers=AUTH)).json()["items"]
        }
        assert lanes["media"]["paused"] is False
    assert len(await store.claim_due_for_lane("media", 5, "w", _TTL)) == 1


async def test_lane_control_is_guarded_and_validated(store: BackgroundTaskStore) -> None:
    app = admin_app(AdminSources(task_store=store), admin_token=TOKEN)
    async with client(app) as http:
        assert (await http.post("/api/lanes/media/pause")).status_code == 401
        cross = await http.post(
            "/api/lanes/media/pause", headers={**AUTH, "Origin": "https://evil.example"}
        )
        assert cross.status_code == 403
        bad = await http.post("/api/lanes/%20media/pause", headers=AUTH)
        assert bad.status_code == 400 and bad.json()["error"] == "bad_request"
        long = await http.post(f"/api/lanes/{'x' * 65}/pause", headers=AUTH)
        assert long.status_code == 400
        assert (await http.get("/api/lanes/media/pause", headers=AUTH)).status_code == 405
    assert list(await store.lane_states()) == [], "refused requests store nothing"


async def test_lane_control_without_a_store_is_404() -> None:
    async with client(admin_app(AdminSources(), dashboard=False)) as http:
        response = await http.post("/api/lanes/media/pause")
    assert response.status_code == 404 and response.json()["error"] == "not_configured"


async def test_task_json_shows_the_snooze_count() -> None:
    store = InMemoryTaskStore()
    record = (await store.enqueue(NewTask("k", "l"))).record
    [claimed] = await store.claim_due_for_lane("l", 1, "w", _TTL)
    assert claimed.processing_token is not None and claimed.lease_expires_at is not None
    lease = TaskLease(claimed.id, claimed.processing_token, claimed.lease_expires_at)
    assert await store.mark_task_snoozed(lease, delay=timedelta(0), steps_json=None)
    async with client(admin_app(AdminSources(task_store=store), dashboard=False)) as http:
        one = (await http.get(f"/api/tasks/{record.id}")).json()
        page = (await http.get("/api/tasks")).json()
    assert one["snooze_count"] == 1 and page["items"][0]["snooze_count"] == 1
