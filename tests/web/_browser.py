"""Helpers for the in-process browser tests: a uvicorn server in a thread, Debian chromium.

Never downloads a browser: Playwright drives ``/usr/bin/chromium``. Skips locally when
chromium or Playwright is missing; under ``CI=true`` that is a failure instead.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import uvicorn
from starlette.types import ASGIApp

from tests.cli._support import free_port

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


def require_browser() -> Any:
    """Return ``sync_playwright``, or skip (fail under CI) when the browser is missing."""
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


@contextmanager
def serve(make_app: Callable[[], ASGIApp]) -> Iterator[tuple[str, asyncio.AbstractEventLoop]]:
    """Serve ``make_app()`` with uvicorn on 127.0.0.1 in a thread; yield its URL and loop.

    The app is built inside the server's event loop thread, so database engines it
    creates belong to that loop. Use the loop with ``run_coroutine_threadsafe`` to
    touch the same stores the server uses.
    """
    port = free_port()
    ready = threading.Event()
    holder: dict[str, Any] = {}

    def run() -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        holder["loop"] = loop
        config = uvicorn.Config(
            make_app(), host="127.0.0.1", port=port, log_level="warning", lifespan="off"
        )
        server = uvicorn.Server(config)
        holder["server"] = server

        async def main() -> None:
            task = asyncio.create_task(server.serve(), name="test-uvicorn")
            while not server.started:
                if task.done():
                    break
                await asyncio.sleep(0.01)
            ready.set()
            await task

        try:
            loop.run_until_complete(main())
        finally:
            ready.set()
            loop.close()

    thread = threading.Thread(target=run, name="test-uvicorn", daemon=True)
    thread.start()
    assert ready.wait(20), "uvicorn did not start"
    try:
        yield f"http://127.0.0.1:{port}", holder["loop"]
    finally:
        holder["server"].should_exit = True
        thread.join(20)


@contextmanager
def chromium() -> Iterator[Any]:
    """Debian's chromium, launched through Playwright (one per thread at a time)."""
    sync_playwright = require_browser()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def new_page(browser: Any, **context: Any) -> Any:
    """A page in a fresh context (1280x800 unless ``viewport`` is given)."""
    context.setdefault("viewport", {"width": 1280, "height": 800})
    return browser.new_context(**context).new_page()


@contextmanager
def browser_page(**context: Any) -> Iterator[Any]:
    """A chromium page in its own browser (see :func:`new_page`)."""
    with chromium() as browser:
        yield new_page(browser, **context)
