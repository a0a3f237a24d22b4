"""Admin API task endpoints on the in-memory store and SQLite: list, show, retry, cancel, auth."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import create_async_engine

from aster_forge import TaskStatus
from aster_forge.db import (
    BackgroundTaskDbStore,
    DatabaseUnavailableError,
    create_background_tasks_table,
)
from aster_forge.tasks import BackgroundTaskStore, NewTask
from aster_forge.testing import InMemoryTaskStore
from aster_forge.web import AdminSources, admin_app, create_app

from ._support import AUTH, SEEDED_TRACEBACK, TOKEN, client, seed_tasks


@pytest.fixture(params=["memory", "sqlite"])
async def store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[BackgroundTaskStore]:
    if request.param == "memory":
        yield InMemoryTaskStore()
        return
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'tasks.db'}")
    try:
        await create_background_tasks_table(engine)
        yield BackgroundTaskDbStore(engine)
    finally:
        await engine.dispose()


async def test_list_filters_and_paginates(store: BackgroundTaskStore) -> None:
    ids = await seed_tasks(store)
    app = admin_app(AdminSources(task_store=store))
    async with client(app) as http:
        everything = (await http.get("/api/tasks")).json()
        failed = (await http.get("/api/tasks", params={"status": "failed"})).json()
        media = (await http.get("/api/tasks", params={"lane": "media"})).json()
        render = (
            await http.get("/api/tasks", params={"kind": "render", "status": "running"})
        ).json()
        first = (await http.get("/api/tasks", params={"limit": 2})).json()
        second = (
            await http.get("/api/tasks", params={"limit": 2, "before_id": first["next_before_id"]})
        ).json()
    assert [t["id"] for t in everything["items"]] == sorted(ids.values(), reverse=True)
    assert everything["next_before_id"] is None
    assert {t["id"] for t in failed["items"]} == {ids["failed"], ids["failed_final"]}
    assert {t["id"] for t in media["items"]} == {ids["running"], ids["pending"]}
    assert [t["id"] for t in render["items"]] == [ids["running"]]
    assert len(first["items"]) == 2 and first["limit"] == 2
    paged = [t["id"] for t in first["items"] + second["items"]]
    assert paged == sorted(ids.values(), reverse=True)[:4]


async def test_task_rows_carry_step_progress(store: BackgroundTaskStore) -> None:
    ids = await seed_tasks(store)
    async with client(admin_app(AdminSources(task_store=store))) as http:
        items = {t["id"]: t for t in (await http.get("/api/tasks")).json()["items"]}
    running = items[ids["running"]]
    assert running["status"] == "running"
    assert [s["status"] for s in running["steps"]] == ["succeeded", "active", "pending"]
    assert (running["steps_done"], running["steps_total"]) == (1, 3)
    assert running["claimed_by"] == "test-worker"
    assert items[ids["succeeded"]]["steps_done"] == 3
    failed = items[ids["failed"]]
    assert failed["last_error"] == "publish failed: 500"
    assert failed["manual_retry_allowed"] is True
    assert items[ids["pending"]]["steps"] is None and items[ids["pending"]]["steps_total"] == 0
    assert "payload" not in running  # list rows stay small
    assert "last_traceback" not in failed


async def test_show_one_task_with_payload_and_result(store: BackgroundTaskStore) -> None:
    ids = await seed_tasks(store)
    async with client(admin_app(AdminSources(task_store=store))) as http:
        done = await http.get(f"/api/tasks/{ids['succeeded']}")
        pending = await http.get(f"/api/tasks/{ids['pending']}")
        failed = await http.get(f"/api/tasks/{ids['failed']}")
        missing = await http.get("/api/tasks/999999")
    assert done.status_code == 200
    assert done.json()["result"] == {"ok": True}
    assert done.json()["last_traceback"] is None
    assert failed.json()["last_error"] == "publish failed: 500"
    assert failed.json()["last_traceback"] == SEEDED_TRACEBACK
    assert pending.json()["payload"] == {"n": 1}
    assert missing.status_code == 404
    assert missing.json()["error"] == "task_not_found"


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"status": "exploded"}, "query parameter 'status'"),
        ({"limit": "0"}, "query parameter 'limit': Input should be greater than or equal to 1"),
        ({"limit": "ten"}, "valid integer"),
        ({"before_id": "x"}, "query parameter 'before_id'"),
        ({"before_id": ""}, "query parameter 'before_id'"),
        ({"status": ""}, "query parameter 'status'"),
        ({"lane": " media"}, "query parameter 'lane'"),
        ({"kind": "k" * 65}, "query parameter 'kind': String should have at most 64"),
    ],
)
async def test_bad_query_parameters_are_400(
    store: BackgroundTaskStore, params: dict[str, str], message: str
) -> None:
    async with client(admin_app(AdminSources(task_store=store))) as http:
        response = await http.get("/api/tasks", params=params)
    assert response.status_code == 400
    assert message in response.json()["message"]


async def test_retry_a_failed_task(store: BackgroundTaskStore) -> None:
    ids = await seed_tasks(store)
    async with client(admin_app(AdminSources(task_store=store))) as http:
        retried = await http.post(f"/api/tasks/{ids['failed']}/retry")
        again = await http.post(f"/api/tasks/{ids['failed']}/retry")
        not_allowed = await http.post(f"/api/tasks/{ids['failed_final']}/retry")
        forced = await http.post(f"/api/tasks/{ids['failed_final']}/retry?force=true")
        running = await http.post(f"/api/tasks/{ids['running']}/retry")
        missing = await http.post("/api/tasks/999999/retry")
    assert retried.status_code == 200
    assert retried.json()["status"] == "pending" and retried.json()["attempt"] == 0
    assert again.status_code == 409  # pending now: the conditional write refuses
    assert not_allowed.status_code == 409
    assert forced.status_code == 200
    assert running.status_code == 409
    assert missing.status_code == 404
    record = await store.get_task(ids["running"])
    assert record is not None and record.status is TaskStatus.RUNNING


async def test_cancel_pending_and_running(store: BackgroundTaskStore) -> None:
    ids = await seed_tasks(store)
    running_before = await store.get_task(ids["running"])
    assert running_before is not None
    async with client(admin_app(AdminSources(task_store=store))) as http:
        pending = await http.post(f"/api/tasks/{ids['pending']}/cancel")
        running = await http.post(f"/api/tasks/{ids['running']}/cancel")
        finished = await http.post(f"/api/tasks/{ids['succeeded']}/cancel")
        missing = await http.post("/api/tasks/999999/cancel")
    assert pending.json()["outcome"] == "cancelled"
    assert pending.json()["task"]["status"] == "cancelled"
    assert running.json()["outcome"] == "cancel_requested"
    assert finished.json()["outcome"] == "already_finished"
    assert missing.status_code == 404
    # Cancelling a running task never touches its owner's fence.
    running_after = await store.get_task(ids["running"])
    assert running_after is not None
    assert running_after.processing_token == running_before.processing_token
    assert running_after.status is TaskStatus.RUNNING and running_after.cancel_requested


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": f"Basic {TOKEN}"},
        {"Authorization": f"Bearer {TOKEN}x"},
        {"Authorization": "Bearer"},
    ],
)
async def test_missing_or_wrong_token_is_401_and_nothing_changes(
    store: BackgroundTaskStore, headers: dict[str, str]
) -> None:
    ids = await seed_tasks(store)
    before = {task_id: await store.get_task(task_id) for task_id in ids.values()}
    app = create_app(AdminSources(task_store=store), admin_token=TOKEN)
    async with client(app) as http:
        responses = [
            await http.post(f"/api/tasks/{ids['failed']}/retry", headers=headers),
            await http.post(f"/api/tasks/{ids['pending']}/cancel", headers=headers),
            await http.post(f"/api/tasks/{ids['running']}/cancel", headers=headers),
            await http.get("/api/tasks", headers=headers),
            await http.get(f"/api/tasks/{ids['failed']}", headers=headers),
            await http.get("/api/info", headers=headers),
        ]
    assert [r.status_code for r in responses] == [401] * len(responses)
    assert all(r.headers["www-authenticate"].startswith("Bearer") for r in responses)
    assert "items" not in responses[3].text
    after = {task_id: await store.get_task(task_id) for task_id in ids.values()}
    assert after == before


async def test_the_right_token_is_accepted(store: BackgroundTaskStore) -> None:
    ids = await seed_tasks(store)
    app = create_app(AdminSources(task_store=store), admin_token=TOKEN)
    async with client(app) as http:
        listed = await http.get("/api/tasks", headers=AUTH)
        retried = await http.post(f"/api/tasks/{ids['failed']}/retry", headers=AUTH)
        info = await http.get("/api/info", headers=AUTH)
    assert listed.status_code == retried.status_code == 200
    assert info.json()["auth_required"] is True


async def test_cross_origin_mutation_is_403_and_nothing_changes(
    store: BackgroundTaskStore,
) -> None:
    ids = await seed_tasks(store)
    async with client(admin_app(AdminSources(task_store=store))) as http:
        evil = await http.post(
            f"/api/tasks/{ids['pending']}/cancel", headers={"Origin": "http://evil.example"}
        )
        same = await http.post(
            f"/api/tasks/{ids['pending']}/cancel", headers={"Origin": "http://testserver"}
        )
    assert evil.status_code == 403
    assert same.status_code == 200


async def test_get_is_not_allowed_on_mutations(store: BackgroundTaskStore) -> None:
    ids = await seed_tasks(store)
    async with client(admin_app(AdminSources(task_store=store))) as http:
        response = await http.get(f"/api/tasks/{ids['failed']}/retry")
    assert response.status_code == 405
    record = await store.get_task(ids["failed"])
    assert record is not None and record.status is TaskStatus.FAILED


async def test_unconfigured_sources_are_404() -> None:
    async with client(admin_app(AdminSources())) as http:
        paths = ["/api/tasks", "/api/tasks/1", "/api/lanes", "/api/scheduled", "/api/leases"]
        paths += ["/api/components", "/api/reports", "/api/health", "/api/overview"]
        paths += ["/api/tasks/counts"]
        responses = [await http.get(path) for path in paths]
        posts = [await http.post("/api/tasks/1/retry"), await http.post("/api/tasks/1/cancel")]
        info = await http.get("/api/info")
    assert {r.status_code for r in responses + posts} == {404}
    assert {r.json()["error"] for r in responses + posts} == {"not_configured"}
    assert info.json()["features"] == dict.fromkeys(
        ["tasks", "lanes", "scheduled", "leases", "components", "reports", "health", "overview"],
        False,
    )


def test_a_malformed_token_is_refused_at_construction() -> None:
    for bad in ["", "   ", " padded", "line\nbreak"]:
        with pytest.raises(ValueError, match="admin token"):
            create_app(admin_token=bad)
    with pytest.raises(TypeError, match="admin token"):
        create_app(admin_token=123)  # type: ignore[arg-type]


class BrokenStore(InMemoryTaskStore):
    """A store whose reads fail like an unreachable database."""

    async def list_tasks(self, **kwargs: object) -> Any:
        raise DatabaseUnavailableError(
            "connection refused: password=hunter2", operation="list tasks"
        )

    async def search_tasks(self, *args: object, **kwargs: object) -> Any:
        raise DatabaseUnavailableError(
            "connection refused: password=hunter2", operation="search tasks"
        )


async def test_store_failures_are_503_without_details(caplog: pytest.LogCaptureFixture) -> None:
    async with client(admin_app(AdminSources(task_store=BrokenStore()))) as http:
        response = await http.get("/api/tasks")
    assert response.status_code == 503
    assert response.json() == {"error": "store_unavailable", "message": "the store is unavailable"}
    assert "admin API store operation failed" in caplog.text


async def test_stored_values_that_are_not_json_do_not_break_the_page() -> None:
    from aster_forge.web._tasks_json import task_json

    store = InMemoryTaskStore()
    record = (await store.enqueue(NewTask(kind="k", lane="l"))).record
    broken = replace(record, steps_json="not json", payload_json="{", result_json='{"a": 1}')
    item = task_json(broken, now=record.created_at, detail=True)
    assert (item["steps"], item["steps_invalid"], item["steps_total"]) == (None, True, 0)
    assert (item["payload"], item["payload_invalid"]) == (None, True)
    assert (item["result"], item["result_invalid"]) == ({"a": 1}, False)
    odd = task_json(replace(record, steps_json='{"not": "a list"}'), now=record.created_at)
    assert odd["steps_invalid"] is True


async def test_a_forged_host_and_origin_pair_is_403(store: BackgroundTaskStore) -> None:
    # DNS rebinding: evil.example re-pointed at this server; the browser sends
    # Host and Origin that agree with each other, so only a host allow-list stops it.
    ids = await seed_tasks(store)
    forged = {"Host": "evil.example:8000", "Origin": "http://evil.example:8000"}
    async with client(admin_app(AdminSources(task_store=store))) as http:
        cancel = await http.post(f"/api/tasks/{ids['pending']}/cancel", headers=forged)
        listed = await http.get("/api/tasks", headers={"Host": "evil.example:8000"})
        page = await http.get("/", headers={"Host": "evil.example"})
        local = await http.get("/api/tasks", headers={"Host": "localhost:8000"})
        bound = await http.get("/api/tasks")  # Host: testserver, the address it is served on
    assert cancel.status_code == listed.status_code == page.status_code == 403
    assert cancel.json()["error"] == "host_not_allowed"
    assert local.status_code == bound.status_code == 200
    record = await store.get_task(ids["pending"])
    assert record is not None and record.status is TaskStatus.PENDING


async def test_allowed_hosts_are_configurable(store: BackgroundTaskStore) -> None:
    app = admin_app(AdminSources(task_store=store), allowed_hosts=["ops.example.com", "*.corp"])
    async with client(app) as http:
        named = await http.get("/api/tasks", headers={"Host": "ops.example.com"})
        suffix = await http.get("/api/tasks", headers={"Host": "a.b.corp:443"})
        other = await http.get("/api/tasks")  # testserver is no longer implied
        loopback = await http.get("/api/tasks", headers={"Host": "127.0.0.1"})
    assert named.status_code == suffix.status_code == 200
    assert other.status_code == loopback.status_code == 403
    with pytest.raises(TypeError, match="allowed_hosts"):
        admin_app(AdminSources(), allowed_hosts="localhost")


async def test_host_matching_refuses_malformed_and_look_alike_hosts(
    store: BackgroundTaskStore,
) -> None:
    default = admin_app(AdminSources(task_store=store))
    async with client(default) as http:
        ipv6 = await http.get("/api/tasks", headers={"Host": "[::1]:8000"})
        sub = await http.get("/api/tasks", headers={"Host": "ops.localhost"})
        malformed = await http.get("/api/tasks", headers={"Host": "[::1"})
        look_alike = await http.get("/api/tasks", headers={"Host": "evillocalhost"})
    assert ipv6.status_code == sub.status_code == 200
    assert malformed.status_code == look_alike.status_code == 403
    assert malformed.json()["error"] == "host_not_allowed"
    suffixed = admin_app(AdminSources(task_store=store), allowed_hosts=["*.corp"])
    async with client(suffixed) as http:
        bare = await http.get("/api/tasks", headers={"Host": "corp"})
        glued = await http.get("/api/tasks", headers={"Host": "evilcorp"})
    assert bare.status_code == glued.status_code == 403
    anything = admin_app(AdminSources(task_store=store), allowed_hosts=["*"])
    async with client(anything) as http:
        evil = await http.get("/api/tasks", headers={"Host": "evil.example"})
    assert evil.status_code == 200


class SeedOnlyStore:
    """A product's own task store with the seed's listing only (no operator queries)."""

    def __init__(self, inner: BackgroundTaskStore) -> None:
        self._inner = inner

    async def list_tasks(self, **filters: Any) -> Any:
        return await self._inner.list_tasks(**filters)

    async def get_task(self, task_id: int) -> Any:
        return await self._inner.get_task(task_id)


async def test_a_store_without_operator_queries_lists_and_refuses_search_filters(
    store: BackgroundTaskStore,
) -> None:
    ids = await seed_tasks(store)
    plain: Any = SeedOnlyStore(store)
    async with client(admin_app(AdminSources(task_store=plain))) as http:
        failed = await http.get("/api/tasks", params={"status": "failed"})
        search = await http.get("/api/tasks", params={"dedupe_key": "k"})
        newer = await http.get("/api/tasks", params={"after_id": 1})
        counts = await http.get("/api/tasks/counts")
    assert failed.status_code == 200
    assert {t["id"] for t in failed.json()["items"]} == {ids["failed"], ids["failed_final"]}
    assert failed.json()["prev_after_id"] is None
    assert search.status_code == newer.status_code == 400
    assert "only status, kind and lane filters" in search.json()["message"]
    assert counts.status_code == 404 and counts.json()["error"] == "not_configured"
