"""The dashboard of a running demo, driven in Debian's chromium through Playwright.

Never downloads a browser: it uses ``/usr/bin/chromium``. Skips locally when chromium
or Playwright is missing; under ``CI=true`` that is a failure instead.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.cli._support import DemoProcess

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def _require_browser() -> Any:
    problem = None
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        problem = "playwright is not installed"
    if problem is None and not (os.path.exists(CHROMIUM) or shutil.which("chromium")):
        problem = f"{CHROMIUM} is missing (apt-get install -y chromium)"
    if problem is not None:
        if IN_CI:
            pytest.fail(f"browser test cannot run under CI=true: {problem}", pytrace=False)
        pytest.skip(problem)
    return sync_playwright


def _manual_failure(demo: DemoProcess) -> dict[str, Any] | None:
    for task in demo.get("/api/tasks?status=failed").json()["items"]:
        if task.get("manual_retry_allowed"):
            return dict(task)
    return None


def test_dashboard_shows_progress_and_retries_a_failed_task(tmp_path: Path) -> None:
    sync_playwright = _require_browser()
    demo = DemoProcess(f"sqlite+aiosqlite:///{tmp_path / 'demo.db'}", tmp_path, duration=55)
    try:
        demo.wait_ready()
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
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
                browser.close()
    finally:
        demo.stop()
