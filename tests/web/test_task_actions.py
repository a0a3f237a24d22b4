"""The task JSON's ``actions`` and ``runs`` say truthfully what the API accepts and what ran."""

from __future__ import annotations

from aster_forge.tasks import BackgroundTaskStore
from aster_forge.web import AdminSources, admin_app

from ._stores import backend_fixture, database_url_fixture, store_fixture  # noqa: F401
from ._support import client, seed_tasks


async def test_advertised_actions_are_exactly_what_the_api_accepts(
    store: BackgroundTaskStore,
) -> None:
    ids = await seed_tasks(store)
    async with client(admin_app(AdminSources(task_store=store))) as http:
        advertised = {
            t["id"]: set(t["actions"]) for t in (await http.get("/api/tasks")).json()["items"]
        }
        accepted: dict[int, set[str]] = {task_id: set() for task_id in ids.values()}
        for task_id in ids.values():
            retry = await http.post(f"/api/tasks/{task_id}/retry")
            assert retry.status_code in {200, 409}
            if retry.status_code == 200:
                accepted[task_id].add("retry")
        # Cancel on the rows as they were: a fresh seed, so retries above do not interfere.
    assert advertised[ids["failed"]] == {"retry"}
    assert advertised[ids["failed_final"]] == set()  # permanently failed: no Retry offered
    assert advertised[ids["succeeded"]] == set()
    assert advertised[ids["running"]] == {"cancel"}
    assert advertised[ids["pending"]] == {"cancel"}
    for task_id in ids.values():
        assert ("retry" in advertised[task_id]) == ("retry" in accepted[task_id]), task_id


async def test_advertised_cancel_matches_the_cancel_outcome(store: BackgroundTaskStore) -> None:
    ids = await seed_tasks(store)
    async with client(admin_app(AdminSources(task_store=store))) as http:
        advertised = {
            t["id"]: set(t["actions"]) for t in (await http.get("/api/tasks")).json()["items"]
        }
        for task_id in ids.values():
            body = (await http.post(f"/api/tasks/{task_id}/cancel")).json()
            took_effect = body["outcome"] in {"cancelled", "cancel_requested"}
            assert ("cancel" in advertised[task_id]) == took_effect, task_id
        again = (await http.get(f"/api/tasks/{ids['running']}")).json()
    # Asked to stop already: a second cancel would change nothing, so it is not offered.
    assert again["cancel_requested"] is True and again["actions"] == []


async def test_runs_count_the_attempts_used(store: BackgroundTaskStore) -> None:
    ids = await seed_tasks(store)
    async with client(admin_app(AdminSources(task_store=store))) as http:
        items = {t["id"]: t for t in (await http.get("/api/tasks")).json()["items"]}
    # Succeeded on the first run: attempt (failed attempts) 0, but one run used.
    assert (items[ids["succeeded"]]["attempt"], items[ids["succeeded"]]["runs"]) == (0, 1)
    assert items[ids["failed"]]["runs"] == 1
    assert items[ids["running"]]["runs"] == 1
    assert items[ids["pending"]]["runs"] == 0
