"""The operator's dashboard in Debian's chromium, on a live server with a SQLite task store.

Overview counts are compared with the database, then filtering, paging both ways,
the detail view, a confirmed bulk retry, the token prompt, hostile values, both
colour schemes and the 1280x800 layout.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Coroutine, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar, cast

import httpx
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine
from starlette.types import ASGIApp

from aster_forge import TaskStatus
from aster_forge.db import BackgroundTaskDbStore, create_background_tasks_table
from aster_forge.runtime import RuntimeComponentKind, RuntimeComponentRegistry
from aster_forge.tasks import NewTask
from aster_forge.web import AdminSources, admin_app

from ._browser import chromium, new_page, serve
from ._support import SEEDED_TRACEBACK, TOKEN, claim_one, seed_tasks

T = TypeVar("T")
HOSTILE_KIND = '<img src=x onerror="window.pwned=1">'
HOSTILE_ERROR = "<script>window.pwned=2</script><b id=inj>bold</b>"
HOSTILE_PAYLOAD = {"html": '<img id=inj2 src=x onerror="window.pwned=3">', "n": 1}


class Live:
    """The server under test: its URL, its loop, the store and engine it uses."""

    def __init__(self, base: str, loop: asyncio.AbstractEventLoop, holder: dict[str, Any]):
        self.base = base
        self.loop = loop
        self.store: BackgroundTaskDbStore = holder["store"]
        self.engine = holder["engine"]
        self.ids: dict[str, int] = {}

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` in the server's event loop (where the engine lives)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)

    def db_counts(self) -> dict[tuple[str, str], int]:
        """Rows per (lane, status), read with plain SQL (not the store's own query)."""

        async def read() -> dict[tuple[str, str], int]:
            async with self.engine.connect() as conn:
                rows = await conn.execute(
                    sa.text("SELECT lane, status, COUNT(*) FROM background_tasks GROUP BY 1, 2")
                )
                return {(lane, status): int(n) for lane, status, n in rows}

        return self.run(read())


def _server(tmp_path: Path, *, token: str | None = None) -> Iterator[Live]:
    holder: dict[str, Any] = {}

    def make_app() -> ASGIApp:
        engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'dash.db'}")
        holder["engine"] = engine
        holder["store"] = store = BackgroundTaskDbStore(engine)
        components = RuntimeComponentRegistry()
        components.component("database", RuntimeComponentKind.DATABASE)
        components.component(
            "background_tasks", RuntimeComponentKind.TASKS, depends_on=["database"]
        )
        return admin_app(AdminSources(task_store=store, components=components), admin_token=token)

    with serve(make_app) as (base, loop):
        live = Live(base, loop, holder)
        live.run(create_background_tasks_table(live.engine))
        yield live
        live.run(live.engine.dispose())


async def _seed(live: Live) -> None:
    store = live.store
    live.ids = await seed_tasks(store)
    for n in range(120):
        await store.enqueue(NewTask(kind="bulk_item", lane="batch", payload_json=f'{{"n": {n}}}'))
    hostile = await store.enqueue(
        NewTask(kind=HOSTILE_KIND, lane="media", payload_json=json.dumps(HOSTILE_PAYLOAD))
    )
    live.ids["hostile"] = hostile.record.id
    # Make it fail with a hostile error text (claim the media lane's due rows: pending, hostile).
    for _ in range(2):
        record, lease = await claim_one(store, "media")
        if record.id == hostile.record.id:
            assert await store.mark_task_failed(
                lease, error=HOSTILE_ERROR, steps_json=None, manual_retry=True
            )
        else:
            assert await store.mark_task_retry(
                lease, delay=timedelta(hours=1), error="boom", steps_json=None, count_attempt=True
            )


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    for server in _server(tmp_path_factory.mktemp("dashboard")):
        server.run(_seed(server))
        yield server


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as b:
        yield b


@pytest.fixture(scope="module")
def page(browser: Any) -> Any:
    return new_page(browser)


def _until(page: Any, expression: str, timeout: float = 10.0) -> None:
    """Poll ``expression`` in the page until truthy.

    ``page.wait_for_function`` evaluates its predicate with ``eval`` inside the page,
    which the dashboard's strict policy (no ``unsafe-eval``) rightly refuses.
    """
    for _ in range(int(timeout * 10)):
        if page.evaluate(expression):
            return
        page.wait_for_timeout(100)
    raise AssertionError(f"still false after {timeout} s: {expression}")


def _text(page: Any, selector: str) -> str:
    return str(page.locator(selector).first.text_content() or "").strip()


def test_overview_counts_match_the_database(live: Live, page: Any) -> None:
    page.goto(live.base + "/")
    page.wait_for_selector('#lanes tr[data-lane="batch"] .count-pending', timeout=10_000)
    _until(
        page,
        "document.querySelector('#lanes tr[data-lane=\"batch\"] .count-pending')"
        ".textContent === '120'",
    )
    counts = live.db_counts()
    for lane in ("batch", "maintenance", "media"):
        row = f'#lanes tr[data-lane="{lane}"]'
        for status in ("pending", "running", "succeeded", "failed", "cancelled"):
            shown = _text(page, f"{row} .count-{status}")
            assert shown == str(counts.get((lane, status), 0)), (lane, status)
    # The chart has bars for what finished this minute, drawn as SVG by our own code.
    failed_bars = page.locator('svg[data-chart="maintenance"] rect[data-series="failed"]')
    assert failed_bars.count() >= 1
    assert "2 failed" in _text(page, "#charts .chart-row:has(svg[data-chart='maintenance'])")


def test_filters_and_status_tabs(live: Live, page: Any) -> None:
    page.goto(live.base + "/#tasks")
    page.wait_for_selector("#task-table tr[data-task-id]", timeout=10_000)
    page.fill("#filters input[name=error]", "publish FAILED")
    page.click("#filters button[type=submit]")
    expected = {live.ids["failed"], live.ids["failed_final"]}
    _until(
        page,
        f"document.querySelectorAll('#task-table tr[data-task-id]').length === {len(expected)}",
    )
    shown = {
        int(r)
        for r in page.locator("#task-table tr[data-task-id]").evaluate_all(
            "rows => rows.map(r => r.dataset.taskId)"
        )
    }
    assert shown == expected
    assert _text(page, '#status-tabs [data-tab="failed"] .count') == "2"
    assert _text(page, '#status-tabs [data-tab="succeeded"] .count') == "0"
    page.click("#filters-clear")
    page.fill("#filters input[name=lane]", "media")
    page.click("#filters button[type=submit]")
    page.click('#status-tabs [data-tab="pending"]')
    _until(
        page,
        "[...document.querySelectorAll('#task-table tr[data-task-id]')]"
        ".every(r => r.dataset.taskStatus === 'pending')",
    )
    page.click("#filters-clear")
    page.click('#status-tabs [data-tab="all"]')


def _page_ids(page: Any) -> list[int]:
    return [
        int(v)
        for v in page.locator("#task-table tr[data-task-id]").evaluate_all(
            "rows => rows.map(r => r.dataset.taskId)"
        )
    ]


def _wait_first(page: Any, task_id: int) -> None:
    page.wait_for_selector(f"#task-table tbody tr:first-child[data-task-id='{task_id}']")


def test_keyset_paging_both_ways(live: Live, page: Any) -> None:
    page.goto(live.base + "/#tasks")
    page.fill("#filters input[name=lane]", "batch")
    page.click("#filters button[type=submit]")
    batch = sorted(
        (t.id for t in live.run(live.store.list_tasks(lane="batch", limit=200)).items),
        reverse=True,
    )
    _wait_first(page, batch[0])
    assert _page_ids(page) == batch[:50]
    assert page.is_disabled("#page-newer")
    page.click("#page-older")
    _wait_first(page, batch[50])
    assert _page_ids(page) == batch[50:100]
    page.click("#page-older")
    _wait_first(page, batch[100])
    assert _page_ids(page) == batch[100:] and page.is_disabled("#page-older")
    page.click("#page-newer")
    _wait_first(page, batch[50])
    assert _page_ids(page) == batch[50:100]
    page.click("#page-newest")
    _wait_first(page, batch[0])
    page.click("#filters-clear")


def test_detail_view_shows_every_field(live: Live, page: Any) -> None:
    task_id = live.ids["failed"]
    page.goto(live.base + f"/#task/{task_id}")
    page.wait_for_selector("#detail-fields dd", timeout=10_000)
    assert _text(page, "#detail-title") == f"Task #{task_id} · failed_kind"
    assert _text(page, '#detail-fields dd[data-field="Lease owner"]') == "test-worker"
    assert _text(page, '#detail-fields dd[data-field="Runs"]') == "1 of 1"
    assert _text(page, '#detail-fields dd[data-field="Snoozed"]') == "0"
    assert _text(page, '#detail-fields dd[data-field="Failure reason"]') == "product_error"
    for field in ("Created", "Run at", "Started", "Finished", "Updated"):
        assert _text(page, f'#detail-fields dd[data-field="{field}"]') not in {"", "-"}, field
    assert _text(page, "#detail-error") == "publish failed: 500"
    page.click("#detail-traceback-box summary")
    assert _text(page, "#detail-traceback") == SEEDED_TRACEBACK.strip()
    steps = page.locator("#detail-steps li").evaluate_all(
        "items => items.map(li => li.dataset.stepStatus)"
    )
    assert steps == ["succeeded", "succeeded", "active"]
    assert page.locator('#detail-actions button[data-action="retry"]').count() == 1
    final = live.ids["failed_final"]
    page.goto(live.base + f"/#task/{final}")
    _until(page, f"document.getElementById('detail-title').textContent.startsWith('Task #{final}')")
    assert page.locator("#detail-actions button").count() == 0  # the server allows nothing
    pending = live.ids["pending"]
    page.goto(live.base + f"/#task/{pending}")
    _until(page, "document.getElementById('detail-payload').textContent.includes('\"n\": 1')")


def test_bulk_retry_asks_with_the_count_then_retries(live: Live, page: Any) -> None:
    page.goto(live.base + "/#tasks")
    page.fill("#filters input[name=lane]", "maintenance")
    page.click("#filters button[type=submit]")
    page.click('#status-tabs [data-tab="failed"]')
    _until(
        page,
        "document.querySelectorAll('#task-table tr[data-task-status=\"failed\"]').length === 2",
    )
    page.click("#bulk-retry")
    page.wait_for_selector("#confirm[open]")
    assert _text(page, "#confirm-text") == "Retry 1 of 2 matching tasks?"
    page.click("#confirm-yes")
    _until(page, "document.getElementById('action-message').textContent.includes('1 of 2')")
    record = live.run(live.store.get_task(live.ids["failed"]))
    final = live.run(live.store.get_task(live.ids["failed_final"]))
    assert record is not None and record.status is TaskStatus.PENDING
    assert final is not None and final.status is TaskStatus.FAILED
    page.click("#filters-clear")
    page.click('#status-tabs [data-tab="all"]')


def test_hostile_values_create_no_elements(live: Live, page: Any) -> None:
    checks = "document.querySelectorAll('img, b, #inj, #inj2, script:not([src])').length"
    page.goto(live.base + "/#tasks")
    page.wait_for_selector(f"#task-table tr[data-task-id='{live.ids['hostile']}']")
    assert page.evaluate(checks) == 0
    assert HOSTILE_KIND in _text(page, f"tr[data-task-id='{live.ids['hostile']}'] .kind")
    assert HOSTILE_ERROR in _text(page, f"tr[data-task-id='{live.ids['hostile']}'] .err")
    page.goto(live.base + f"/#task/{live.ids['hostile']}")
    _until(page, "document.getElementById('detail-payload').textContent.includes('inj2')")
    page.goto(live.base + "/#overview")
    page.wait_for_selector("#lanes tr[data-lane]")
    assert page.evaluate(checks) == 0
    assert page.evaluate("window.pwned") is None


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_every_view_fits_1280x800_in_both_schemes(live: Live, browser: Any, scheme: str) -> None:
    p = new_page(browser, color_scheme=scheme)
    backgrounds = set()
    for view in ("overview", "tasks", f"task/{live.ids['hostile']}", "runtime"):
        p.goto(live.base + f"/#{view}")
        p.wait_for_timeout(600)  # one poll: the view has drawn its data
        width = p.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
        assert width[0] <= width[1], (view, width)
        backgrounds.add(p.evaluate("getComputedStyle(document.body).backgroundColor"))
    (background,) = backgrounds
    dark = background == "rgb(21, 22, 26)"
    assert dark is (scheme == "dark")


def test_a_protected_dashboard_asks_for_the_token(tmp_path: Path, browser: Any) -> None:
    for server in _server(tmp_path, token=TOKEN):
        server.run(seed_tasks(server.store))
        p = new_page(browser)
        p.goto(server.base + "/#tasks")
        p.wait_for_selector("#login:not([hidden])", timeout=10_000)
        assert p.is_hidden("#content")
        p.fill("#login-token", "wrong")
        p.click("#login button[type=submit]")
        _until(p, "document.getElementById('login-error').textContent.includes('not accepted')")
        p.fill("#login-token", TOKEN)
        p.click("#login button[type=submit]")
        p.wait_for_selector("#task-table tr[data-task-id]", timeout=10_000)
        assert p.is_hidden("#login")


def test_pause_and_resume_a_lane(live: Live, page: Any) -> None:
    # The control is drawn when the lanes JSON carries "paused" (a store that can pause
    # lanes, served by POST /api/lanes/{lane}/pause|resume).
    lanes = httpx.get(live.base + "/api/lanes", timeout=5).json()["items"]
    assert lanes and all(isinstance(lane["paused"], bool) for lane in lanes)
    page.goto(live.base + "/#overview")
    row = '#lanes tr[data-lane="batch"]'
    page.click(f'{row} button[data-lane-action="pause"]')
    page.wait_for_selector(f'{row}[data-paused="true"]')
    states = {s.lane: s for s in live.run(cast(Any, live.store).lane_states(["batch"]))}
    assert states["batch"].paused
    page.click(f'{row} button[data-lane-action="resume"]')
    page.wait_for_selector(f'{row}[data-paused="false"]')
    states = {s.lane: s for s in live.run(cast(Any, live.store).lane_states(["batch"]))}
    assert not states["batch"].paused
