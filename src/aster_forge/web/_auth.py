"""Optional bearer-token protection for the admin API, dashboard data and diagnostics.

The token is compared in constant time (:func:`hmac.compare_digest` on UTF-8 bytes).
A missing or wrong token answers 401 with ``WWW-Authenticate: Bearer`` before the
endpoint runs, so nothing is read or changed.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

__all__ = ["ADMIN_TOKEN_ENV", "BearerTokenGuard", "check_admin_token", "same_origin"]

ADMIN_TOKEN_ENV = "ASTER_FORGE_ADMIN_TOKEN"
"""The environment variable a CLI reads the admin token from (the app never reads it)."""

Endpoint = Callable[[Request], Awaitable[Response]]


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
