"""Who may change tasks through a mounted ``forge.asgi_app()``.

Without an admin token or auth, anyone may read the lists, counts and health, but only
a client connected from loopback may retry, cancel, pause a lane or read a payload. The
client address is the transport's (``httpx.ASGITransport(client=...)``), as a server
reports the connection's peer; headers a client sends never grant anything.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import httpx
import pytest
from pydantic import BaseModel
from sqlalchemy.ext.asyncio import create_async_engine
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Mount

from aster_forge import Forge, TaskStatus

from ..conftest import drop_all_tables
from ._support import AUTH, TOKEN

REMOTE = ("203.0.113.7", 40_000)
LOOPBACK = ("127.0.0.1", 40_000)
SECRET = "4111-1111-1111-1111"


class Card(BaseModel):
    number: str


@asynccontextmanager
async def _http(app: Starlette, peer: tuple[str, int]) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app, client=peer)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        yield client


@pytest.fixture
async def shop(database_url: str) -> AsyncIterator[tuple[Forge, int]]:
    """A forge with one pending ``charge`` task (whose payload is a card number)."""
    forge = Forge(database_url, create_tables=True)
    forge.lane("billing", concurrency=1)

    @forge.task(lane="billing")
    async def charge(payload: Card) -> None:
        del payload

    await forge.migrate()
    made = await charge.enqueue(Card(number=SECRET))
    yield forge, made.task_id
    await forge.aclose()
    engine = create_async_engine(database_url)
    try:
        await drop_all_tables(engine)
    finally:
        await engine.dispose()


def _mounted(
    forge: Forge,
    *,
    admin_token: str | None = None,
    auth: Callable[[Request], Awaitable[bool]] | None = None,
) -> Starlette:
    return Starlette(routes=[Mount("/ops", forge.asgi_app(admin_token=admin_token, auth=auth))])


async def _attempts(
    client: httpx.AsyncClient, task_id: int, headers: dict[str, str] | None = None
) -> list[httpx.Response]:
    """Every request that changes a task or reads its data."""
    bulk = {"lane": "billing", "limit": 10}
    return [
        await client.get(f"/ops/api/tasks/{task_id}", headers=headers),
        await client.post(f"/ops/api/tasks/{task_id}/cancel", headers=headers),
        await client.post(f"/ops/api/tasks/{task_id}/retry?force=true", headers=headers),
        await client.post("/ops/api/tasks/bulk/cancel", json=bulk, headers=headers),
        await client.post("/ops/api/lanes/billing/pause", headers=headers),
    ]


async def _untouched(forge: Forge, task_id: int) -> None:
    record = await forge.get_task(task_id)
    assert record is not None and record.status is TaskStatus.PENDING
    assert not record.cancel_requested
    assert not any(state.paused for state in await forge.lane_states())


async def test_without_configuration_a_remote_client_reads_lists_but_changes_nothing(
    shop: tuple[Forge, int],
) -> None:
    forge, task_id = shop
    async with _http(_mounted(forge), REMOTE) as client:
        listed = await client.get("/ops/api/tasks")
        info = await client.get("/ops/api/info")
        lanes = await client.get("/ops/api/lanes")
        refused = await _attempts(client, task_id)
    assert listed.status_code == 200 and [t["id"] for t in listed.json()["items"]] == [task_id]
    assert lanes.status_code == 200
    assert info.json()["auth_required"] is False and info.json()["actions_allowed"] is False
    for response in refused:
        assert response.status_code == 403, (response.request.url, response.text)
        body = response.json()
        assert body["error"] == "admin_access_not_configured"
        assert "admin_token=" in body["message"] and "auth=" in body["message"]
        assert SECRET not in response.text
    assert SECRET not in listed.text
    await _untouched(forge, task_id)


@pytest.mark.parametrize(
    "headers",
    [
        {"X-Forwarded-For": "127.0.0.1"},
        {"X-Real-IP": "127.0.0.1"},
        {"Forwarded": "for=127.0.0.1"},
        {"Host": "localhost"},
        {"Host": "127.0.0.1", "X-Forwarded-For": "::1", "Origin": "http://127.0.0.1"},
    ],
    ids=["x-forwarded-for", "x-real-ip", "forwarded", "host", "all"],
)
async def test_forged_headers_from_a_remote_client_change_nothing(
    shop: tuple[Forge, int], headers: dict[str, str]
) -> None:
    forge, task_id = shop
    async with _http(_mounted(forge), REMOTE) as client:
        refused = await _attempts(client, task_id, headers=headers)
    assert [r.status_code for r in refused] == [403] * len(refused)
    await _untouched(forge, task_id)


async def test_a_loopback_connection_forwarded_by_a_proxy_counts_as_remote(
    shop: tuple[Forge, int],
) -> None:
    # A reverse proxy on this machine connects from loopback for every client it forwards.
    forge, task_id = shop
    async with _http(_mounted(forge), LOOPBACK) as client:
        refused = await _attempts(client, task_id, headers={"X-Forwarded-For": "203.0.113.7"})
    assert [r.status_code for r in refused] == [403] * len(refused)
    await _untouched(forge, task_id)


@pytest.mark.parametrize("address", ["127.0.0.1", "127.8.0.3", "::1", "::ffff:127.0.0.1"])
async def test_a_loopback_client_may_act_without_configuration(
    shop: tuple[Forge, int], address: str
) -> None:
    forge, task_id = shop
    async with _http(_mounted(forge), (address, 40_000)) as client:
        info = await client.get("/ops/api/info")
        detail = await client.get(f"/ops/api/tasks/{task_id}")
        cancel = await client.post(f"/ops/api/tasks/{task_id}/cancel")
    assert info.json()["actions_allowed"] is True
    assert detail.status_code == 200 and detail.json()["payload"] == {"number": SECRET}
    assert cancel.status_code == 200 and cancel.json()["outcome"] == "cancelled"


async def test_with_a_token_every_client_needs_it(shop: tuple[Forge, int]) -> None:
    forge, task_id = shop
    app = _mounted(forge, admin_token=TOKEN)
    async with _http(app, LOOPBACK) as local, _http(app, REMOTE) as remote:
        unauthorized = [
            await local.get("/ops/api/tasks"),
            await local.post(f"/ops/api/tasks/{task_id}/cancel"),
            await remote.get("/ops/diagnostics"),
            await remote.post(
                f"/ops/api/tasks/{task_id}/cancel", headers={"Authorization": "Bearer wrong"}
            ),
        ]
        assert [r.status_code for r in unauthorized] == [401] * 4
        assert unauthorized[0].headers["WWW-Authenticate"].startswith("Bearer")
        await _untouched(forge, task_id)
        info = await remote.get("/ops/api/info", headers=AUTH)
        assert info.json()["actions_allowed"] is True
        detail = await remote.get(f"/ops/api/tasks/{task_id}", headers=AUTH)
        assert detail.status_code == 200 and detail.json()["payload"] == {"number": SECRET}
        cancel = await remote.post(f"/ops/api/tasks/{task_id}/cancel", headers=AUTH)
        assert cancel.status_code == 200 and cancel.json()["outcome"] == "cancelled"
        # The probes and metrics stay open for the orchestrator and the scraper.
        assert (await remote.get("/ops/livez")).status_code == 200
        assert (await remote.get("/ops/metrics")).status_code == 200


async def test_the_products_own_auth_lets_its_sessions_in(shop: tuple[Forge, int]) -> None:
    forge, task_id = shop
    seen: list[str] = []

    async def admins_only(request: Request) -> bool:
        seen.append(request.url.path)
        return request.cookies.get("session") == "admin"

    app = _mounted(forge, auth=admins_only, admin_token=TOKEN)
    async with _http(app, REMOTE) as client:
        anonymous = await client.post(f"/ops/api/tasks/{task_id}/cancel")
        assert anonymous.status_code == 401
        assert "sign-in" in anonymous.json()["message"]
        await _untouched(forge, task_id)
        client.cookies.set("session", "admin")
        paused = await client.post("/ops/api/lanes/billing/pause")
        client.cookies.clear()
        by_token = await client.post("/ops/api/lanes/billing/resume", headers=AUTH)
    assert paused.status_code == 200 and paused.json()["paused"] is True
    assert by_token.status_code == 200 and by_token.json()["paused"] is False
    assert "/ops/api/lanes/billing/pause" in seen


def test_auth_must_be_callable() -> None:
    forge = Forge("memory://")
    with pytest.raises(TypeError, match="auth must be an async callable"):
        forge.asgi_app(auth="admin")  # type: ignore[arg-type]
