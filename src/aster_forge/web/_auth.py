"""Who may use the admin API: an admin token, the product's own auth, or loopback only.

With an admin token or an ``auth`` callable configured, every admin endpoint (and
``/diagnostics``) needs one of them: 401 otherwise, before the endpoint runs, so nothing
is read or changed. With neither, the lists, counts and health stay readable, and what
changes tasks or reveals their data (mutations, a task's payload and result) answers
only a client connected from this machine: 403 ``admin_access_not_configured``
otherwise, naming what to configure. The token is compared in constant time
(:func:`hmac.compare_digest` on UTF-8 bytes).
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Awaitable, Callable, Iterable
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

__all__ = [
    "ADMIN_TOKEN_ENV",
    "LOCAL_HOSTS",
    "AdminAuth",
    "AdminDoor",
    "BearerTokenGuard",
    "HostAllowList",
    "check_admin_token",
    "direct_loopback_client",
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


AdminAuth = Callable[[Request], Awaitable[bool]]
"""The product's own admin check: ``async def auth(request) -> bool`` (``True`` lets the
request in; it may read the product's session cookie, a header, a client certificate)."""

# Set by a reverse proxy: a request carrying one came through a proxy, whatever the peer.
_FORWARDING_HEADERS = ("forwarded", "x-forwarded-for", "x-forwarded-host", "x-real-ip")
_NO_STORE = {"Cache-Control": "no-store"}


def direct_loopback_client(request: Request) -> bool:
    """Return whether ``request`` came straight from this machine.

    The connection's peer (the ASGI ``client``) must be a loopback address, and the
    request must carry no forwarding header: a proxy on this machine connects from
    loopback for every client it forwards. Headers never grant trust, they can only
    withdraw it, so a forged ``X-Forwarded-For`` or ``Host`` changes nothing. A server
    that rewrites the peer from trusted proxy headers (uvicorn's ``--proxy-headers``
    for ``--forwarded-allow-ips``) hands over the original client's address, which is
    then judged. A peer that is no IP address (a Unix socket) is not loopback.
    """
    if any(name in request.headers for name in _FORWARDING_HEADERS):
        return False
    client = request.client
    if client is None:
        return False
    try:
        address = ipaddress.ip_address(client.host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


class AdminDoor:
    """The admin API's access rule (see the module docstring).

    Args:
        token: The admin token (sent as ``Authorization: Bearer <token>``), or ``None``.
        auth: The product's own check (:data:`AdminAuth`), or ``None``. With both, either
            one lets a request in (the CLI sends the token, a browser the product's
            session).

    Raises:
        TypeError: ``token`` is not a str, or ``auth`` is not callable.
        ValueError: A malformed ``token`` (see :func:`check_admin_token`).
    """

    __slots__ = ("_auth", "_token")

    def __init__(self, *, token: str | None = None, auth: AdminAuth | None = None) -> None:
        if auth is not None and not callable(auth):
            raise TypeError(f"auth must be an async callable, got {type(auth).__name__}")
        self._token = BearerTokenGuard(token)
        self._auth = auth

    @property
    def configured(self) -> bool:
        """Whether a token or an auth callable is set (every admin endpoint needs one)."""
        return self._token.enabled or self._auth is not None

    async def admits(self, request: Request) -> bool:
        """Whether ``request`` carries the token or passes ``auth`` (``True`` when neither
        is configured)."""
        if not self.configured:
            return True
        if self._token.enabled and self._token.authorized(request):
            return True
        return self._auth is not None and bool(await self._auth(request))

    async def may_act(self, request: Request) -> bool:
        """Whether ``request`` may change tasks and read their payloads: admitted when a
        token or auth is configured, else connected straight from loopback."""
        if self.configured:
            return await self.admits(request)
        return direct_loopback_client(request)

    def _unauthorized(self) -> Response:
        if self._auth is None:
            message = "a valid bearer token is required"
        elif self._token.enabled:
            message = "a valid bearer token or the product's admin sign-in is required"
        else:
            message = "the product's admin sign-in is required"
        headers = dict(_NO_STORE)
        if self._token.enabled:
            headers["WWW-Authenticate"] = 'Bearer realm="aster-forge"'
        return JSONResponse(
            {"error": "unauthorized", "message": message}, status_code=401, headers=headers
        )

    def protect(self, endpoint: Endpoint, *, sensitive: bool = False) -> Endpoint:
        """Return ``endpoint`` behind the rule.

        Args:
            endpoint: The endpoint.
            sensitive: It changes tasks or reveals their data: without a token or auth
                configured, only a direct loopback client may call it.
        """

        async def guarded(request: Request) -> Response:
            if self.configured:
                if not await self.admits(request):
                    return self._unauthorized()
            elif sensitive and not direct_loopback_client(request):
                return JSONResponse(
                    {
                        "error": "admin_access_not_configured",
                        "message": "changing tasks and reading their payloads is allowed "
                        "from this machine only: configure an admin token or auth "
                        "(asgi_app(admin_token=...) or auth=...) to allow it from elsewhere",
                    },
                    status_code=403,
                    headers=_NO_STORE,
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


# Kept: Starlette's TrustedHostMiddleware answers 400 plain text for the whole app and cannot
# follow the bind address; here only admin routes answer 403 JSON (test_admin_tasks.py).
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
