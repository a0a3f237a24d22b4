"""The dashboard of a running demo, driven in Debian's chromium (see ``_browser``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.cli._support import DemoProcess

from ._browser import chromium, new_page


def _manual_failure(demo: DemoProcess) -> dict[str, Any] | None:
    for task in demo.get("/api/tasks?status=failed").json()["items"]:
        if task.get("manual_retry_allowed"):
            return dict(task)
    return None


def test_dashboard_shows_progress_and_retries_a_failed_task(tmp_path: Path) -> None:
    demo = DemoProcess(f"sqlite+aiosqlite:///{tmp_path / 'demo.db'}", tmp_path, duration=55)
    try:
        demo.wait_ready()
        with chromium() as browser:
            page = new_page(browser, viewport={"width": 1400, "height": 1000})
            page.goto(demo.base + "/#tasks")
            # Tasks progress to succeeded while the page polls.
            page.wait_for_selector('tr[data-task-status="succeeded"]', timeout=30_000)
            page.wait_for_selector('#tasks [role="progressbar"]', timeout=5_000)
            failed = demo.wait_for(lambda: _manual_failure(demo), 30, "a manual failure")
            task_id = failed["id"]
            row = f'tr[data-task-id="{task_id}"]'
            button = page.locator(f'{row} button[data-action="retry"]')
            button.wait_for(timeout=10_000)
            button.click()
            # It runs again and, the simulated quota being spent, succeeds.
            page.wait_for_selector(f'{row}[data-task-status="succeeded"]', timeout=30_000)
            detail = demo.get(f"/api/tasks/{task_id}").json()
            assert detail["status"] == "succeeded"
            shot = tmp_path / "dashboard.png"
            page.screenshot(path=str(shot), full_page=True)
            assert shot.stat().st_size > 10_000
    finally:
        demo.stop()
