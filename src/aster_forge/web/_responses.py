"""JSON answers and path parameters shared by the admin API's endpoints."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from ..tasks._internal import MAX_TASK_ID

__all__ = ["NO_STORE", "NoSuchTask", "error", "not_configured", "ok", "task_id_param"]

NO_STORE = {"Cache-Control": "no-store"}


def error(status: int, code: str, message: str) -> JSONResponse:
    """``{"error": code, "message": message}`` with ``status``, never cached."""
    return JSONResponse({"error": code, "message": message}, status_code=status, headers=NO_STORE)


def ok(body: Any) -> JSONResponse:
    """``body`` as a 200 JSON answer, never cached."""
    return JSONResponse(body, headers=NO_STORE)


def not_configured(what: str) -> JSONResponse:
    """404 ``not_configured``: the source an endpoint reads is not set."""
    return error(404, "not_configured", f"no {what} is configured for this admin API")


class NoSuchTask(Exception):
    """A path task id that cannot name a task (answered 404 ``task_not_found``)."""


def _id_value(raw: str) -> int | None:
    """``raw`` as a task id (decimal digits, ``1..MAX_TASK_ID``), else ``None``.

    Checked before any store call: a value beyond 64 bits would otherwise reach the
    driver (an ``OverflowError`` on SQLite, a misleading database error elsewhere).
    """
    if not (raw.isascii() and raw.isdigit()) or len(raw) > len(str(MAX_TASK_ID)):
        return None
    value = int(raw)
    return value if 1 <= value <= MAX_TASK_ID else None


def task_id_param(request: Request) -> int:
    """The ``{task_id}`` path parameter, or :class:`NoSuchTask` when no row can have it."""
    raw = request.path_params["task_id"]
    value = _id_value(raw)
    if value is None:
        raise NoSuchTask(f"no background task has the id {raw[:40]!r}")
    return value
