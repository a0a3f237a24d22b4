"""The dashboard page at ``/``: one static HTML page with plain JavaScript.

The page, script and stylesheet ship inside the package (``aster_forge/web/static``);
no CDN, no build step. The script polls the admin API about once a second. The
assets themselves carry no data, so they are served without the token; every data
request the page makes sends the token (taken once from ``?token=`` and kept in
``sessionStorage``, or asked for in a login form after a 401).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from importlib import resources

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from ._auth import HostAllowList

__all__ = ["DASHBOARD_ASSETS", "dashboard_routes"]

DASHBOARD_ASSETS: dict[str, str] = {
    "index.html": "text/html; charset=utf-8",
    "dashboard.js": "text/javascript; charset=utf-8",
    "dashboard.css": "text/css; charset=utf-8",
}
"""The packaged assets and their media types."""

# Strict policy: the page loads only its own script and stylesheet.
_SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def _read(name: str) -> bytes:
    return resources.files("aster_forge.web").joinpath("static", name).read_bytes()


class _Assets:
    """Reads each asset once (off the event loop) and keeps it."""

    def __init__(self) -> None:
        self._cache: dict[str, bytes] = {}

    async def get(self, name: str) -> bytes:
        cached = self._cache.get(name)
        if cached is None:
            # Two first requests may both read; the bytes are identical, so no lock.
            cached = self._cache[name] = await asyncio.to_thread(_read, name)
        return cached


def dashboard_routes(
    *, prefix: str = "", allowed_hosts: Sequence[str] | None = None
) -> list[BaseRoute]:
    """Return the routes serving the dashboard page and its assets.

    Args:
        prefix: Path of the page below the app (``""`` serves it at ``/``). The page
            calls the admin API at ``api/`` relative to itself, so the app may also
            be mounted under any outer prefix.
        allowed_hosts: ``Host`` names answered (see
            :class:`~aster_forge.web.HostAllowList`); default loopback and the bind
            address.
    """
    assets = _Assets()
    hosts = HostAllowList(allowed_hosts)

    def serve(name: str) -> Route:
        media_type = DASHBOARD_ASSETS[name]

        async def endpoint(request: Request) -> Response:
            body = await assets.get(name)
            return Response(body, media_type=media_type, headers=_SECURITY_HEADERS)

        path = f"{prefix}/" if name == "index.html" else f"{prefix}/static/{name}"
        return Route(path, hosts.protect(endpoint), methods=["GET"], name=f"dashboard_{name}")

    return [serve(name) for name in DASHBOARD_ASSETS]
