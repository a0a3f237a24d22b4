"""The OpenAPI 3.1 document of the admin API.

Request parameters and bodies are generated from the pydantic models the handlers
validate with (``_params``), so the limits stated are the limits applied; response
schemas from the models of the answers (``_schemas``), checked against live answers
by the schemathesis run in ``make chaos``.
"""

from __future__ import annotations

from typing import Any

from ..tasks._internal import MAX_TASK_ID
from ._lanes_control import lane_control_paths
from ._params import (
    HealthQuery,
    ScheduledQuery,
    TaskBulkBody,
    TaskCountQuery,
    TaskListQuery,
    TaskRetryQuery,
    body_schema,
    query_parameters,
)
from ._schemas import response_schemas

__all__ = ["openapi_document"]


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _errors(*codes: int) -> dict[str, Any]:
    text = {
        400: "Invalid query parameter.",
        401: "Missing or wrong bearer token (or refused by the product's auth).",
        403: "Refused: a cross-origin mutation, a Host not allowed, or (with no token "
        "or auth configured) a client not connected from loopback.",
        404: "Not found, or the source is not configured.",
        409: "The task's status does not allow the operation.",
        503: "The store is unavailable.",
    }
    return {str(code): _json(_ref("Error"), text[code]) for code in codes}


_TASK_ID_SCHEMA = {"type": "integer", "minimum": 1, "maximum": MAX_TASK_ID}

_TASK_ID = {
    "name": "task_id",
    "in": "path",
    "required": True,
    "schema": _TASK_ID_SCHEMA,
}


def _get(summary: str, schema: dict[str, Any], *codes: int, **extra: Any) -> dict[str, Any]:
    return {
        "get": {
            "summary": summary,
            "responses": {"200": _json(schema, summary), **_errors(401, *codes)},
            **extra,
        }
    }


def openapi_document(title: str, *, auth: bool) -> dict[str, Any]:
    """Return the OpenAPI 3.1 document of the admin API.

    Args:
        title: The API title.
        auth: Whether the bearer token is required (adds the security requirement).
    """
    schemas = response_schemas()
    paths: dict[str, Any] = {
        "/api/info": _get("Service info and configured views", _ref("Info")),
        "/api/tasks": _get(
            "List tasks, newest first",
            _ref("TaskPage"),
            400,
            404,
            503,
            parameters=query_parameters(TaskListQuery, schemas),
        ),
        "/api/tasks/counts": _get(
            "Tasks matching the filters, per status (the status filter is ignored)",
            _ref("TaskCounts"),
            400,
            404,
            503,
            parameters=query_parameters(TaskCountQuery, schemas),
        ),
        "/api/tasks/bulk/{action}": {
            "post": {
                "summary": "Retry or cancel every task matching the filters (at most limit)",
                "parameters": [
                    {
                        "name": "action",
                        "in": "path",
                        "required": True,
                        "schema": {"enum": ["retry", "cancel"]},
                    }
                ],
                "requestBody": body_schema(TaskBulkBody, schemas),
                "responses": {
                    "200": _json(_ref("BulkResult"), "What the action did (or would do)."),
                    **_errors(400, 401, 403, 404, 503),
                },
            }
        },
        "/api/overview": _get(
            "Per lane: counts by status, oldest pending task, throughput per minute",
            _ref("Overview"),
            404,
            503,
        ),
        "/api/tasks/{task_id}": _get(
            "One task with steps, payload and result",
            _ref("TaskDetail"),
            403,
            404,
            503,
            parameters=[_TASK_ID],
        ),
        "/api/tasks/{task_id}/retry": {
            "post": {
                "summary": "Retry a failed or cancelled task (conditional on its status)",
                "parameters": [_TASK_ID, *query_parameters(TaskRetryQuery, schemas)],
                "responses": {
                    "200": _json(_ref("TaskDetail"), "The task, pending again."),
                    **_errors(401, 403, 404, 409, 503),
                },
            }
        },
        "/api/tasks/{task_id}/cancel": {
            "post": {
                "summary": "Cancel a pending task or request cancellation of a running one",
                "parameters": [_TASK_ID],
                "responses": {
                    "200": _json(_ref("CancelResult"), "What the cancel did."),
                    **_errors(401, 403, 404, 503),
                },
            }
        },
        "/api/tasks/{task_id}/workflow": _get(
            "The task's workflow: the tasks connected by dependencies, their states, the edges",
            _ref("Workflow"),
            404,
            503,
            parameters=[_TASK_ID],
        ),
        "/api/tasks/{task_id}/workflow/cancel": {
            "post": {
                "summary": "Cancel every unfinished task of the task's workflow",
                "parameters": [_TASK_ID],
                "responses": {
                    "200": _json(_ref("WorkflowCancelResult"), "What the cancel did."),
                    **_errors(401, 403, 404, 503),
                },
            }
        },
        "/api/lanes": _get(
            "Lanes with limits, in-flight and queue counts",
            _ref("LanePage"),
            404,
            503,
        ),
        "/api/scheduled": _get(
            "The scheduled task catalog",
            _ref("ScheduledPage"),
            400,
            404,
            503,
            parameters=query_parameters(ScheduledQuery, schemas),
        ),
        "/api/leases": _get(
            "Runtime leases (holder, expiry)",
            _ref("LeasePage"),
            404,
            503,
        ),
        "/api/components": _get(
            "Components and their dependency graph", _ref("ComponentGraph"), 404
        ),
        "/api/reports": _get("The last startup and shutdown reports", _ref("Reports"), 404),
        "/api/health": _get(
            "Run the readiness or diagnostics checks (always 200: the report says the status)",
            _ref("HealthReport"),
            400,
            404,
            parameters=query_parameters(HealthQuery, schemas),
        ),
        "/api/openapi.json": _get("This document", {"type": "object"}),
        **lane_control_paths(_errors),
    }
    for item in paths.values():
        for operation in item.values():
            if any(p["in"] == "query" for p in operation.get("parameters", ())):
                # Every query model answers 400 when a parameter fails it.
                operation["responses"].setdefault("400", _errors(400)["400"])
    document: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {
            "title": f"{title} admin API",
            "version": "1",
            "description": "Background tasks, lanes, scheduled catalog, runtime leases "
            "and components of an aster-forge service.",
        },
        "paths": paths,
        "components": {"schemas": schemas},
    }
    if auth:
        document["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
        document["security"] = [{"bearer": []}]
    return document
