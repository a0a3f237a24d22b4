"""The dashboard mounted under a prefix: every request it makes stays under the prefix."""

from __future__ import annotations

import asyncio

from starlette.applications import Starlette
from starlette.types import ASGIApp

from aster_forge.tasks import NewTask
from aster_forge.testing import InMemoryTaskStore
from aster_forge.web import AdminSources, admin_app

from ._browser import browser_page, serve
from ._support import healthy_registry


def _mounted(store: InMemoryTaskStore) -> ASGIApp:
    registry = healthy_registry()
    app = Starlette()
    app.mount("/ops", admin_app(AdminSources(task_store=store, health=registry)))
    return app


def test_mounted_dashboard_shows_readiness_and_tasks() -> None:
    store = InMemoryTaskStore()  # loop-free: seeded here, served in the server's loop
    asyncio.run(store.enqueue(NewTask(kind="render", lane="media")))
    with serve(lambda: _mounted(store)) as (base, _), browser_page() as page:
        outside: list[str] = []
        page.on(
            "request",
            lambda r: outside.append(r.url) if not r.url.startswith(base + "/ops/") else None,
        )
        for path in ["/ops/#tasks", "/ops#tasks"]:
            page.goto(base + path)
            page.wait_for_selector('#readiness[data-status="healthy"]', timeout=10_000)
            page.wait_for_selector('tr[data-task-status="pending"]', timeout=10_000)
        assert page.text_content("#readiness") == "readiness: healthy"
    # "/ops" itself is redirected to "/ops/" by Starlette; nothing else leaves the prefix.
    assert outside == [base + "/ops"]
