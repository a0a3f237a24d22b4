"""``aster-forge health``: ask a running service for a health scope."""

from __future__ import annotations

import asyncio
import http.client
import json
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit

from aster_forge._json import load_json

from ._errors import EXIT_FAILED, EXIT_UNREACHABLE, CliError
from ._output import console

__all__ = ["SCOPE_PATHS", "fetch_health", "run_health"]

SCOPE_PATHS = {"liveness": "/livez", "readiness": "/readyz", "diagnostics": "/diagnostics"}


def _get(url: str, token: str | None, timeout: float) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return int(response.status), response.read()
    except urllib.error.HTTPError as exc:  # 503 carries the report too
        return int(exc.code), exc.read()


async def fetch_health(
    base_url: str, scope: str, token: str | None, timeout_seconds: float
) -> tuple[int, dict[str, Any]]:
    """GET the scope's endpoint; return the HTTP status and the JSON report.

    Raises:
        CliError: Bad URL, unreachable service, 401, or a body that is not a report.
    """
    invalid = CliError(f"invalid service URL {base_url!r} (expected http://host:port)", 2)
    try:
        parts = urlsplit(base_url)
    except ValueError:  # e.g. an unclosed IPv6 bracket
        raise invalid from None
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise invalid
    url = base_url.rstrip("/") + SCOPE_PATHS[scope]
    try:
        status, body = await asyncio.to_thread(_get, url, token, timeout_seconds)
    except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as exc:
        # HTTPException: an URL with control characters, a malformed or cut response.
        reason = getattr(exc, "reason", exc)
        raise CliError(f"cannot reach {url}: {reason}", EXIT_UNREACHABLE) from None
    if status == 401:
        raise CliError(f"{url} needs a valid admin token (--admin-token)", EXIT_UNREACHABLE)
    try:
        report = load_json(body, what="health response", error=ValueError)
    except ValueError:
        raise CliError(f"{url} answered HTTP {status} without a health report", 2) from None
    if not isinstance(report, dict) or "status" not in report:
        raise CliError(f"{url} answered HTTP {status} without a health report", 2)
    return status, report


async def run_health(
    base_url: str, scope: str, as_json: bool, token: str | None, timeout_seconds: float
) -> int:
    """Print the report; exit 0 when healthy or degraded, 1 when unhealthy."""
    _status, report = await fetch_health(base_url, scope, token, timeout_seconds)
    overall = str(report.get("status"))
    out = console()
    if as_json:
        out.print_json(json.dumps(report))
    else:
        for component in report.get("components", []):
            mark = "+" if component.get("status") != "unhealthy" else "-"
            out.print(
                f"[{mark}]{component.get('name')} {component.get('status')}: "
                f"{component.get('message', '')}",
                markup=False,
            )
        out.print(f"{scope}: {overall}")
    return EXIT_FAILED if overall == "unhealthy" else 0
