"""Health by process role: a web process mounting ``forge.asgi_app()`` without workers is
live and ready on its database; a process that started the workers keeps their checks."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from starlette.applications import Starlette
from starlette.routing import Mount

from aster_forge import Forge
from aster_forge.cli import cli

from ..cli._support import free_port
from ..web._browser import serve


def _web_app(forge: Forge, **lifespan: Any) -> Starlette:
    return Starlette(routes=[Mount("/ops", forge.asgi_app())], **lifespan)


@asynccontextmanager
async def _client(app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        yield client


def _components(response: httpx.Response) -> dict[str, tuple[str, str]]:
    return {c["name"]: (c["status"], c["message"]) for c in response.json()["components"]}


async def test_a_web_process_without_workers_is_live_and_ready(forge_url: str) -> None:
    forge = Forge(forge_url)

    @forge.task
    async def noop() -> None:
        return None

    async with _client(_web_app(forge)) as client:
        live = await client.get("/ops/livez")
        ready = await client.get("/ops/readyz")
        metrics = await client.get("/ops/metrics")
    assert live.status_code == 200, live.text
    assert _components(live) == {
        "role": ("healthy", "web process: the workers run in other processes")
    }
    assert ready.status_code == 200, ready.text
    assert _components(ready) == {
        "role": ("healthy", "web process: the workers run in other processes"),
        "database": ("healthy", "database reachable"),
    }
    # /metrics runs readiness on every scrape: a web process exports healthy (0).
    assert 'health_report_status{scope="readiness"} 0.0' in metrics.text
    assert 'health_component_status{component="database",scope="readiness"} 0.0' in metrics.text
    await forge.aclose()


@pytest.mark.parametrize("where", ["postgres", "sqlite"])
async def test_a_web_process_is_not_ready_while_its_database_is_unreachable(
    where: str, tmp_path: Path
) -> None:
    url = (
        f"postgresql://postgres@127.0.0.1:{free_port()}/test"  # nothing listens there
        if where == "postgres"
        else f"sqlite:///{tmp_path / 'no-such-dir' / 'app.db'}"
    )
    forge = Forge(url)
    async with _client(_web_app(forge)) as client:
        live = await client.get("/ops/livez")
        ready = await client.get("/ops/readyz?verbose")
    assert live.status_code == 200, live.text  # a restart would not bring the database back
    assert ready.status_code == 503
    assert ready.text.splitlines() == [
        "[+]role ok",
        "[-]database failed: database ping failed",
        "healthz check failed",
    ]
    await forge.aclose()
    await _sqlite_threads_ended()


async def _sqlite_threads_ended() -> None:
    """Wait (bounded) for aiosqlite's connection threads while the loop is open.

    A failed aiosqlite connect queues its thread's stop with a future on this loop that
    nobody awaits; should the loop close first (a loaded machine), the thread raises
    setting it, and pytest blames whichever test runs next.
    """
    threads = [t for t in threading.enumerate() if "_connection_worker_thread" in t.name]

    def join() -> None:
        for thread in threads:
            thread.join(5)

    await asyncio.to_thread(join)


async def test_a_database_that_never_answers_fails_readiness_at_the_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A server that accepts connections and never says a word: the ping hangs until
    # the readiness check's timeout cancels it.
    release = asyncio.Event()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await release.wait()
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    monkeypatch.setattr("aster_forge.forge._health.WEB_DATABASE_TIMEOUT", timedelta(seconds=0.2))
    forge = Forge(f"postgresql://postgres@127.0.0.1:{port}/test")
    try:
        async with _client(_web_app(forge)) as client:
            async with asyncio.timeout(10):
                ready = await client.get("/ops/readyz")
    finally:
        release.set()
        server.close()
        await server.wait_closed()
        await forge.aclose()
    assert ready.status_code == 503
    status, message = _components(ready)["database"]
    assert status == "unhealthy" and "timed out" in message


async def test_a_process_that_started_the_workers_keeps_their_checks(forge_url: str) -> None:
    forge = Forge(forge_url)

    @forge.task
    async def noop() -> None:
        return None

    await forge.migrate()
    app = _web_app(forge, lifespan=forge.lifespan)
    async with app.router.lifespan_context(app), _client(app) as client:
        ready = await client.get("/ops/readyz")
        assert ready.status_code == 200, ready.text
        components = _components(ready)
        assert components["background_tasks"] == ("healthy", "dispatching")
        assert "role" not in components
    async with _client(app) as client:
        # Stopped with the app: this process is a worker whose workers are gone.
        live = await client.get("/ops/livez")
    assert live.status_code == 503
    assert _components(live) == {"background_tasks": ("unhealthy", "not running")}
    await forge.aclose()


def test_the_health_command_passes_against_a_web_process(tmp_path: Path) -> None:
    made: list[Forge] = []

    def make_app() -> Starlette:
        forge = Forge(f"sqlite:///{tmp_path / 'web.db'}")
        made.append(forge)
        return _web_app(forge)

    with serve(make_app) as (url, loop):
        results = {
            scope: CliRunner().invoke(cli, ["health", "--url", f"{url}/ops", "--scope", scope])
            for scope in ("liveness", "readiness")
        }
        asyncio.run_coroutine_threadsafe(made[0].aclose(), loop).result(10)
    for scope, result in results.items():
        assert result.exit_code == 0, (scope, result.stdout)
        assert f"{scope}: healthy" in result.stdout
