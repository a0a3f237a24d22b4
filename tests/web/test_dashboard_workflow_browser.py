"""A workflow step's detail view in Debian's chromium: its neighbours, links, cancel."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from starlette.types import ASGIApp

from aster_forge import TaskStatus
from aster_forge.tasks import NewTask, TaskDependency
from aster_forge.testing import InMemoryTaskStore
from aster_forge.web import AdminSources, admin_app

from ._browser import chromium, new_page, serve
from ._support import claim_one


def test_the_detail_view_lists_a_steps_workflow_and_cancels_it(tmp_path: Path) -> None:
    holder: dict[str, Any] = {}

    def make_app() -> ASGIApp:
        holder["store"] = store = InMemoryTaskStore()
        return admin_app(AdminSources(task_store=store))

    with serve(make_app) as (base, loop):
        store: InMemoryTaskStore = holder["store"]

        async def seed() -> list[int]:
            written = await store.enqueue_workflow(
                [NewTask("fetch", "etl"), NewTask("parse", "etl"), NewTask("load", "etl")],
                [TaskDependency(task=1, on=0), TaskDependency(task=2, on=1, run_anyway=True)],
            )
            await claim_one(store, "etl")
            return [result.task_id for result in written]

        fetch, parse, load = asyncio.run_coroutine_threadsafe(seed(), loop).result(10)
        with chromium() as browser:
            page = new_page(browser)
            page.goto(f"{base}/#task/{parse}")
            before = page.locator(f'#workflow-dependencies li[data-workflow-task="{fetch}"]')
            before.wait_for(timeout=10_000)
            assert "fetch" in before.inner_text() and "running" in before.inner_text()
            after = page.locator(f'#workflow-dependents li[data-workflow-task="{load}"]')
            assert "waiting" in after.inner_text() and "runs anyway" in after.inner_text()
            assert "3 tasks, 3 unfinished" in page.locator("#workflow-summary").inner_text()
            page.locator('button[data-action="cancel-workflow"]').click()
            # Text waits (the page's CSP forbids the evaluated predicates of wait_for_function).
            page.locator("#detail-message", has_text="workflow:").wait_for(timeout=10_000)
            message = page.locator("#detail-message").inner_text()
            assert message == "workflow: 2 cancelled, 1 asked to stop"
            after.locator("a").click()
            page.locator("#detail-title", has_text=f"Task #{load} ").wait_for(timeout=10_000)

        async def statuses() -> list[TaskStatus]:
            records = [await store.get_task(task_id) for task_id in (fetch, parse, load)]
            return [record.status for record in records if record is not None]

        assert asyncio.run_coroutine_threadsafe(statuses(), loop).result(10) == [
            TaskStatus.RUNNING,
            TaskStatus.CANCELLED,
            TaskStatus.CANCELLED,
        ]
