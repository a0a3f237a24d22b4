"""Admin endpoints that pause and resume a lane for every instance, and their OpenAPI part.

``POST /api/lanes/{lane}/pause`` and ``POST /api/lanes/{lane}/resume`` answer the
stored :class:`~aster_forge.tasks.TaskLaneState` as ``LaneState`` JSON; the lanes list
(``GET /api/lanes``) carries ``paused`` and ``paused_at`` per lane.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..tasks import BackgroundTaskStore
from ..tasks._internal import MAX_TASK_KIND_LENGTH, TaskLaneState
from ._params import IDENTIFIER_PATTERN

__all__ = ["lane_control_endpoints", "lane_control_paths", "lane_state_json"]

Endpoint = Callable[[Request], Awaitable[Response]]
_NO_STORE = {"Cache-Control": "no-store"}


def lane_state_json(state: TaskLaneState) -> dict[str, Any]:
    """One lane's stored pause state as JSON."""
    return {
        "lane": state.lane,
        "paused": state.paused,
        "paused_at": None if state.paused_at is None else state.paused_at.isoformat(),
        "updated_at": None if state.updated_at is None else state.updated_at.isoformat(),
    }


def lane_control_endpoints(
    store: Callable[[], BackgroundTaskStore | None],
) -> list[tuple[str, Endpoint]]:
    """The ``POST`` endpoints ``/lanes/{lane}/pause`` and ``/lanes/{lane}/resume``.

    Args:
        store: Returns the task store (``None``: answered 404 ``not_configured``).
    """

    def endpoint(paused: bool) -> Endpoint:
        async def control(request: Request) -> Response:
            current = store()
            if current is None:
                return JSONResponse(
                    {"error": "not_configured", "message": "no task store is configured"},
                    status_code=404,
                    headers=_NO_STORE,
                )
            lane = request.path_params["lane"]
            state = await (current.pause_lane(lane) if paused else current.resume_lane(lane))
            return JSONResponse(lane_state_json(state), headers=_NO_STORE)

        return control

    return [("/lanes/{lane}/pause", endpoint(True)), ("/lanes/{lane}/resume", endpoint(False))]


def lane_control_paths(errors: Callable[..., dict[str, Any]]) -> dict[str, Any]:
    """The OpenAPI path items of the lane control endpoints.

    Args:
        errors: Builds the error responses for status codes (the document's helper).
    """
    lane = {
        "name": "lane",
        "in": "path",
        "required": True,
        "schema": {
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_TASK_KIND_LENGTH,
            "pattern": IDENTIFIER_PATTERN,
        },
        "description": "The lane's wire value.",
    }
    ok = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/LaneState"}}}}
    return {
        f"/api/lanes/{{lane}}/{action}": {
            "post": {
                "summary": summary,
                "parameters": [lane],
                "responses": {
                    "200": {"description": "The lane's stored state.", **ok},
                    **errors(400, 401, 403, 404, 503),
                },
            }
        }
        for action, summary in (
            ("pause", "Pause a lane on every instance (running tasks finish)"),
            ("resume", "Resume a paused lane"),
        )
    }
