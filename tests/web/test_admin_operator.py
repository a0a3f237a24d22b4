"""The operator endpoints over HTTP: search filters, paging, counts, bulk actions, overview."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest

from aster_forge import TaskStatus
from aster_forge.tasks import CronSchedule, IntervalSchedule, NewTask
from aster_forge.testing import InMemoryScheduledTaskStore
from aster_forge.web import AdminSources, admin_app
from aster_forge.web._tasks_json import MAX_DETAIL_JSON_CHARS

from ._stores import AdminStore as Store
from ._stores import backend_fixture, database_url_fixture, store_fixture  # noqa: F401
from ._support import client, seed_tasks


async def test_search_filters_and_pages_both_ways(store: Store) -> None:
    ids = await seed_tasks(store)
    async with client(admin_app(AdminSources(task_store=store))) as http:
        by_error = (await http.get("/api/tasks", params={"error": "PUBLISH"})).json()
        by_id = (await http.get("/api/tasks", params={"id": ids["running"]})).json()
        first = (await http.get("/api/tasks", params={"limit": 2})).json()
        second = (
            await http.get("/api/tasks", params={"limit": 2, "before_id": first["next_before_id"]})
        ).json()
        back = (
            await http.get("/api/tasks", params={"limit": 2, "after_id": second["prev_after_id"]})
        ).json()
        counts = (await http.get("/api/tasks/counts", params={"lane": "maintenance"})).json()
    assert {t["id"] for t in by_error["items"]} == {ids["failed"], ids["failed_final"]}
    assert [t["id"] for t in by_id["items"]] == [ids["running"]]
    assert [t["id"] for t in back["items"]] == [t["id"] for t in first["items"]]
    assert first["prev_after_id"] is None and back["prev_after_id"] is None
    assert counts == {
        "counts": {"pending": 0, "running": 0, "succeeded": 1, "failed": 2, "cancelled": 0},
        "total": 3,
    }


async def test_bulk_retry_counts_first_then_acts_and_is_audited(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    ids = await seed_tasks(store)
    selection = {"status": "failed"}
    async with client(admin_app(AdminSources(task_store=store))) as http:
        preview = (
            await http.post("/api/tasks/bulk/retry", json={**selection, "dry_run": True})
        ).json()
        with caplog.at_level(logging.INFO, logger="aster_forge.web.admin"):
            done = (await http.post("/api/tasks/bulk/retry", json=selection)).json()
        unknown = await http.post("/api/tasks/bulk/retry", json={"stauts": "failed"})
        bad_action = await http.post("/api/tasks/bulk/delete", json={})
        cross = await http.post(
            "/api/tasks/bulk/cancel", json={}, headers={"Origin": "http://evil.example"}
        )
    assert (preview["matched"], preview["eligible"], preview["changed"]) == (2, 1, [])
    assert done["changed"] == [ids["failed"]]
    assert f"bulk retry by 127.0.0.1: 2 selected, 1 changed: #{ids['failed']}" in caplog.text
    assert unknown.status_code == 400 and "stauts" in unknown.json()["message"]
    assert bad_action.status_code == 404
    assert cross.status_code == 403
    pending = await store.get_task(ids["pending"])
    assert pending is not None and pending.status is TaskStatus.PENDING


async def test_overview_counts_lanes_and_throughput(store: Store) -> None:
    await seed_tasks(store)
    await store.enqueue(NewTask(kind="render", lane="media"))
    async with client(admin_app(AdminSources(task_store=store))) as http:
        body = (await http.get("/api/overview")).json()
    lanes = {item["lane"]: item for item in body["lanes"]}
    assert lanes["media"]["counts"]["pending"] == 2 and lanes["media"]["counts"]["running"] == 1
    assert lanes["maintenance"]["counts"] == {
        "pending": 0,
        "running": 0,
        "succeeded": 1,
        "failed": 2,
        "cancelled": 0,
    }
    assert lanes["media"]["oldest_pending_age_seconds"] >= 0
    chart = {item["lane"]: item for item in body["throughput"]}
    assert len(chart["maintenance"]["succeeded"]) == body["minutes"] == 60
    assert sum(chart["maintenance"]["succeeded"]) == 1 and sum(chart["maintenance"]["failed"]) == 2


async def test_a_large_payload_is_answered_as_a_truncated_preview(store: Store) -> None:
    big = '{"blob": "' + "x" * (MAX_DETAIL_JSON_CHARS + 100) + '"}'
    small = await store.enqueue(NewTask(kind="k", lane="l", payload_json='{"a": 1}'))
    large = await store.enqueue(NewTask(kind="k", lane="l", payload_json=big))
    async with client(admin_app(AdminSources(task_store=store))) as http:
        shown = (await http.get(f"/api/tasks/{large.record.id}")).json()
        whole = (await http.get(f"/api/tasks/{small.record.id}")).json()
    assert shown["payload"] is None and shown["payload_truncated"] is True
    assert shown["payload_preview"] == big[:MAX_DETAIL_JSON_CHARS]
    assert shown["payload_size"] == len(big)
    assert whole["payload"] == {"a": 1} and whole["payload_truncated"] is False


async def test_the_scheduled_catalog_carries_cron_text() -> None:
    scheduled = InMemoryScheduledTaskStore()
    await scheduled.ensure_scheduled_task("reports", "nightly", CronSchedule("0 3 * * *", "UTC"))
    await scheduled.ensure_scheduled_task(
        "reports", "often", IntervalSchedule(every=timedelta(minutes=5))
    )
    async with client(admin_app(AdminSources(scheduled_store=scheduled))) as http:
        items = {i["name"]: i for i in (await http.get("/api/scheduled")).json()["items"]}
    assert items["nightly"]["cron"] == "0 3 * * *"
    assert items["nightly"]["schedule"] == "0 3 * * * (UTC)"
    assert items["often"]["cron"] is None and items["often"]["schedule"] == "every 5m"
