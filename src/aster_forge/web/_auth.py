"""Optional bearer-token protection for the admin API, dashboard data and diagnostics.

The token is compared in constant time (:func:`hmac.compare_digest` on UTF-8 bytes).
A missing or wrong token answers 401 with ``WWW-Authenticate: Bearer`` before the
endpoint runs, so nothing is read or changed.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, Iterable
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

__all__ = [
    "ADMIN_TOKEN_ENV",
    "LOCAL_HOSTS",
    "BearerTokenGuard",
    "HostAllowList",
    "check_admin_token",
    "same_origin",
]

ADMIN_TOKEN_ENV = "ASTER_FORGE_ADMIN_TOKEN"
"""The environment variable a CLI reads the admin token from (the app never reads it)."""

Endpoint = Callable[[Request], Awaitable[Response]]

LOCAL_HOSTS = ("localhost", "*.localhost", "127.0.0.1", "::1")
"""Host names every default allow-list accepts (loopback only)."""


def check_admin_token(token: object) -> str | None:
    """Validate an admin token argument.

    Returns:
        The token, or ``None`` when ``token`` is ``None`` (no protection).

    Raises:
        TypeError: ``token`` is not a str.
        ValueError: An empty or blank token, or one with surrounding whitespace or
            control characters (it could never be sent in a header).
    """
    if token is None:
        return None
    if not isinstance(token, str):
        raise TypeError(f"admin token must be a str or None, got {type(token).__name__}")
    if not token.strip():
        raise ValueError("admin token must not be empty or blank")
    if token != token.strip() or any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in token):
        raise ValueError("admin token must not have surrounding whitespace or control characters")
    return token


class BearerTokenGuard:
    """Wraps endpoints so they require ``Authorization: Bearer <token>`` when a token is set.

    Args:
        token: The expected token; ``None`` disables the check (endpoints stay open).
    """

    __slots__ = ("_expected",)

    def __init__(self, token: str | None) -> None:
        checked = check_admin_token(token)
        self._expected = None if checked is None else checked.encode("utf-8")

    @property
    def enabled(self) -> bool:
        """Whether a token is required."""
        return self._expected is not None

    def authorized(self, request: Request) -> bool:
        """Return whether ``request`` carries the token (always ``True`` when disabled)."""
        expected = self._expected
        if expected is None:
            return True
        header = request.headers.get("authorization", "")
        scheme, _, supplied = header.partition(" ")
        if scheme.lower() != "bearer":
            # Still compare, so a wrong scheme costs the same as a wrong token.
            supplied = ""
        return hmac.compare_digest(supplied.strip().encode("utf-8"), expected)

    def protect(self, endpoint: Endpoint) -> Endpoint:
        """Return ``endpoint`` guarded by the token check."""

        async def guarded(request: Request) -> Response:
            if not self.authorized(request):
                return JSONResponse(
                    {"error": "unauthorized", "message": "a valid bearer token is required"},
                    status_code=401,
                    headers={"WWW-Authenticate": 'Bearer realm="aster-forge"'},
                )
            return await endpoint(request)

        return guarded


def same_origin(request: Request) -> bool:
    """Return whether a browser request comes from the page's own origin.

    Requests without an ``Origin`` header (curl, the CLI, server-side clients) pass;
    a cross-site page cannot forge a matching one, which keeps an unprotected
    local admin API from being driven by another site's form or script.
    """
    origin = request.headers.get("origin")
    if origin is None:
        return True
    host = request.headers.get("host")
    return host is not None and urlsplit(origin).netloc.lower() == host.lower()


def _host_name(header: str) -> str | None:
    """The host name of a ``Host`` header value (port and IPv6 brackets removed)."""
    try:
        return urlsplit("//" + header).hostname
    except ValueError:
        return None  # a malformed port or bracket


class HostAllowList:
    """Which ``Host`` header values the admin API and dashboard answer (403 otherwise).

    A browser sends the name it resolved, so a page on ``evil.example`` whose name
    was re-pointed at this server (DNS rebinding) sends ``Host: evil.example`` with a
    matching ``Origin``; the same-origin check alone would accept it. Checking the
    name against a list closes that.

    Args:
        hosts: Accepted names: exact (``"ops.example.com"``, ``"10.0.0.5"``), a
            ``"*.example.com"`` suffix pattern, or ``"*"`` for any. ``None`` (the
            default) accepts :data:`LOCAL_HOSTS` and the address the connection
            arrived on (the server's bind address), which is what a local or
            port-forwarded admin page uses.

    Raises:
        TypeError: ``hosts`` is a bare string or holds a non-string.
        ValueError: An empty entry.
    """

    __slots__ = ("_any", "_exact", "_follow_server", "_suffixes")

    def __init__(self, hosts: Iterable[str] | None = None) -> None:
        if isinstance(hosts, str):
            raise TypeError("allowed_hosts must be a sequence of host names, not a str")
        self._follow_server = hosts is None
        names = list(LOCAL_HOSTS if hosts is None else hosts)
        for name in names:
            if not isinstance(name, str):
                raise TypeError(f"allowed host must be a str, got {type(name).__name__}")
            if not name.strip():
                raise ValueError("allowed host must not be empty")
        lowered = [name.strip().lower().strip("[]") for name in names]
        self._any = "*" in lowered
        self._suffixes = tuple(name[1:] for name in lowered if name.startswith("*."))
        self._exact = frozenset(name for name in lowered if not name.startswith("*"))

    def allows(self, request: Request) -> bool:
        """Return whether ``request``'s ``Host`` is on the list.

        A request without ``Host`` (HTTP/1.0 from a script) passes: a browser always
        sends one, so it cannot be a rebinding attack.
        """
        header = request.headers.get("host")
        if header is None or self._any:
            return True
        name = _host_name(header)
        if name is None:
            return False
        if name in self._exact or name.endswith(self._suffixes):
            return True
        server = request.scope.get("server")
        return bool(
            self._follow_server
            and server
            and isinstance(server[0], str)
            and server[0].lower().strip("[]") == name
        )

    def protect(self, endpoint: Endpoint) -> Endpoint:
        """Return ``endpoint`` answering 403 ``host_not_allowed`` for other hosts."""

        async def guarded(request: Request) -> Response:
            if not self.allows(request):
                return JSONResponse(
                    {"error": "host_not_allowed", "message": "this Host is not allowed"},
                    status_code=403,
                    headers={"Cache-Control": "no-store"},
                )
            return await endpoint(request)

        return guarded
