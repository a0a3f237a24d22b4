"""The dashboard of a web process (``forge.asgi_app()``, no workers) in Debian's chromium:
a task whose worker was killed shows its expired lease, and a client the admin door
does not trust (here: a request a proxy forwarded) sees a read-only page."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
import sqlalchemy as sa
from starlette.applications import Starlette
from starlette.routing import Mount

from aster_forge import Forge

from ._browser import chromium, new_page, serve

T = TypeVar("T")


class _Live:
    def __init__(self, base: str, loop: asyncio.AbstractEventLoop, forge: Forge) -> None:
        self.base = base
        self.loop = loop
        self.forge = forge
        self.task_id = 0

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)


async def _lose_a_worker(live: _Live) -> None:
    forge = live.forge
    await forge.migrate()
    (render,) = forge.tasks
    made = await render.enqueue(1)
    await forge.backend.task_store.claim_due_for_lane("media", 1, "killed", timedelta(minutes=5))
    engine = forge.backend.engine
    assert engine is not None
    past = datetime.now(UTC) - timedelta(minutes=2)
    async with engine.begin() as conn:
        await conn.execute(sa.update(forge.backend.tasks_table).values(lease_expires_at=past))
    live.task_id = made.task_id


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Live]:
    made: list[Forge] = []
    path: Path = tmp_path_factory.mktemp("lost") / "web.db"

    def make_app() -> Starlette:
        forge = Forge(f"sqlite:///{path}")
        forge.lane("media", concurrency=1)

        @forge.task(lane="media")
        async def render(payload: int) -> int:
            return payload

        made.append(forge)
        return Starlette(routes=[Mount("/ops", forge.asgi_app())])

    with serve(make_app) as (base, loop):
        server = _Live(base + "/ops", loop, made[0])
        server.run(_lose_a_worker(server))
        yield server
        server.run(server.forge.aclose())


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as b:
        yield b


def _text(page: Any, selector: str) -> str:
    return str(page.locator(selector).first.text_content() or "").strip()


def test_an_expired_lease_shows_on_the_overview_list_and_task(live: _Live, browser: Any) -> None:
    page = new_page(browser)
    page.goto(live.base + "/")
    cell = '#lanes tr[data-lane="media"] .count-expired'
    page.wait_for_selector(f"{cell}.alert", timeout=10_000)
    assert _text(page, cell) == "1"
    assert page.locator("#read-only").is_hidden()
    page.goto(live.base + "/#tasks")
    row = f'#task-table tr[data-task-id="{live.task_id}"]'
    page.wait_for_selector(f'{row} [data-status="lease_expired"]', timeout=10_000)
    assert _text(page, f'{row} [data-status="running"]') == "running"
    assert page.locator(f'{row} button[data-action="cancel"]').count() == 1
    page.goto(live.base + f"/#task/{live.task_id}")
    page.wait_for_selector('#detail-status [data-status="lease_expired"]', timeout=10_000)
    assert "lease expired" in _text(page, 'dd[data-field="Status"]')
    assert _text(page, 'dd[data-field="Lease expires"]').startswith("expired ")


def test_a_forwarded_client_gets_a_read_only_page(live: _Live, browser: Any) -> None:
    # As a reverse proxy on the same machine would send it: the door counts it as remote.
    page = new_page(browser, extra_http_headers={"X-Forwarded-For": "203.0.113.7"})
    page.goto(live.base + "/")
    page.wait_for_selector('#lanes tr[data-lane="media"]', timeout=10_000)
    assert page.locator("[data-lane-action]").count() == 0  # no pause button
    page.goto(live.base + "/#tasks")
    row = f'#task-table tr[data-task-id="{live.task_id}"]'
    page.wait_for_selector(row, timeout=10_000)
    page.wait_for_selector("#read-only:not([hidden])", timeout=10_000)
    assert page.locator("button[data-action]").count() == 0
    assert page.locator("[data-bulk]:visible").count() == 0
    page.goto(live.base + f"/#task/{live.task_id}")
    page.wait_for_selector("#detail-message:has-text('admin_token')", timeout=10_000)
    assert _text(page, "#detail-payload") == ""
