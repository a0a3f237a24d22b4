"""The OpenAPI 3.1 document of the admin API.

Request parameters and bodies are generated from the pydantic models the handlers
validate with (``_params``), so the limits stated are the limits applied. Response
schemas are written here and checked against live answers by the schemathesis run
in ``make chaos``. Schemas use JSON Schema 2020-12 (OpenAPI 3.1's dialect):
nullable values are ``{"type": ["string", "null"]}``.
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic import BaseModel

from ..tasks import MAX_TASK_ID
from ._lanes_control import LANE_STATE_SCHEMAS, lane_control_paths
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

__all__ = ["openapi_document"]


def _nullable(type_: str, **extra: Any) -> dict[str, Any]:
    return {"type": [type_, "null"], **extra}


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def _object(properties: dict[str, Any], *, required: bool = True) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = sorted(properties)
    return schema


_TIME = _nullable("string", format="date-time")
_STATUS = ["pending", "running", "succeeded", "failed", "cancelled"]

_SCHEMAS: dict[str, Any] = {
    "Error": _object({"error": {"type": "string"}, "message": {"type": "string"}}),
    "Info": _object(
        {
            "title": {"type": "string"},
            "auth_required": {"type": "boolean"},
            "actions_allowed": {
                "type": "boolean",
                "description": "Whether this client may retry, cancel, pause lanes and "
                "read payloads (without a token or auth configured: loopback clients only).",
            },
            "features": {"type": "object", "additionalProperties": {"type": "boolean"}},
            "now": {"type": "string", "format": "date-time"},
        }
    ),
    "TaskStep": _object(
        {
            "key": {"type": "string"},
            "title": {"type": "string"},
            "status": {
                "enum": ["pending", "active", "succeeded", "failed", "skipped", "cancelled"]
            },
            "progress_current": {"type": "integer", "minimum": 0},
            "progress_total": {"type": "integer", "minimum": 0},
            "detail": _nullable("string"),
            "started_at": _TIME,
            "finished_at": _TIME,
        },
        required=False,
    ),
    "Task": _object(
        {
            "id": {"type": "integer"},
            "kind": {"type": "string"},
            "lane": {"type": "string"},
            "status": {"enum": _STATUS},
            "attempt": {
                "type": "integer",
                "description": "Attempts that ended without success.",
            },
            "runs": {
                "type": "integer",
                "description": "Attempts used, the running or successful one included.",
            },
            "max_attempts": {"type": "integer"},
            "actions": {
                "type": "array",
                "items": {"enum": ["retry", "cancel"]},
                "description": "What POST /retry and /cancel accept for this task now.",
            },
            "priority": {"type": "integer"},
            "run_at": _TIME,
            "claimed_by": _nullable("string"),
            "lease_expires_at": _TIME,
            "lease_expired": {
                "type": "boolean",
                "description": "Running on a lease that has expired: its worker is lost "
                "and the next claim of its lane rescues it.",
            },
            "dedupe_key": _nullable("string"),
            "last_error": _nullable("string"),
            "failure_reason": {"enum": ["product_error", "lease_expired", "cancelled", None]},
            "manual_retry_allowed": {"type": "boolean"},
            "cancel_requested": {"type": "boolean"},
            "rescued": {"type": "boolean"},
            "created_at": _TIME,
            "updated_at": _TIME,
            "started_at": _TIME,
            "finished_at": _TIME,
            "snooze_count": {"type": "integer", "minimum": 0},
            "steps": {"type": ["array", "null"], "items": _ref("TaskStep")},
            "steps_invalid": {"type": "boolean"},
            "steps_done": {"type": "integer"},
            "steps_total": {"type": "integer"},
        }
    ),
    "TaskDetail": {
        "allOf": [
            _ref("Task"),
            _object(
                {
                    "last_traceback": {
                        **_nullable("string"),
                        "description": "The bounded traceback of the failure last_error "
                        "describes (an unexpected exception), or null.",
                    },
                    "payload": {"description": "The decoded payload JSON (null when truncated)."},
                    "payload_invalid": {"type": "boolean"},
                    "payload_truncated": {"type": "boolean"},
                    "payload_preview": {
                        **_nullable("string"),
                        "description": "The stored text's start, when it is too large to send.",
                    },
                    "payload_size": {"type": "integer", "description": "Stored characters."},
                    "result": {"description": "The decoded result JSON, or null."},
                    "result_invalid": {"type": "boolean"},
                    "result_truncated": {"type": "boolean"},
                    "result_preview": _nullable("string"),
                    "result_size": {"type": "integer"},
                }
            ),
        ]
    },
    "TaskPage": _object(
        {
            "items": {"type": "array", "items": _ref("Task")},
            "next_before_id": _nullable("integer"),
            "prev_after_id": _nullable("integer"),
            "limit": {"type": "integer"},
        }
    ),
    "TaskCounts": _object(
        {
            "counts": _object({status: {"type": "integer", "minimum": 0} for status in _STATUS}),
            "total": {"type": "integer", "minimum": 0},
        }
    ),
    "BulkResult": _object(
        {
            "action": {"enum": ["retry", "cancel"]},
            "dry_run": {"type": "boolean"},
            "matched": {"type": "integer", "minimum": 0},
            "eligible": {"type": "integer", "minimum": 0},
            "changed": {"type": "array", "items": {"type": "integer"}},
        }
    ),
    "Overview": _object(
        {
            "now": {"type": "string", "format": "date-time"},
            "minutes": {"type": "integer"},
            "start": {"type": "string", "format": "date-time"},
            "lanes": {
                "type": "array",
                "items": _object(
                    {
                        "lane": {"type": "string"},
                        "counts": _object(
                            {status: {"type": "integer", "minimum": 0} for status in _STATUS}
                        ),
                        "lease_expired": {
                            "type": "integer",
                            "minimum": 0,
                            "description": "Running tasks whose lease has expired.",
                        },
                        "oldest_pending_created_at": _TIME,
                        "oldest_pending_age_seconds": _nullable("number"),
                    }
                ),
            },
            "throughput": {
                "type": "array",
                "description": "Per lane, one count per minute from start (oldest first).",
                "items": _object(
                    {
                        "lane": {"type": "string"},
                        **{
                            name: {"type": "array", "items": {"type": "integer", "minimum": 0}}
                            for name in ("succeeded", "failed", "retried")
                        },
                    }
                ),
            },
        }
    ),
    "CancelResult": _object(
        {
            "outcome": {"enum": ["cancelled", "cancel_requested", "already_finished"]},
            "task": {"oneOf": [_ref("TaskDetail"), {"type": "null"}]},
        }
    ),
    "DispatchStats": {
        "type": "object",
        "additionalProperties": {"type": "number"},
        "description": "Dispatch counters of this process for one lane.",
    },
    "Lane": _object(
        {
            "lane": {"type": "string"},
            "limit": _nullable("integer"),
            "cluster_limit": _nullable("integer"),
            "in_flight": _nullable("integer"),
            "pending": _nullable("integer"),
            "due": _nullable("integer"),
            "running": _nullable("integer"),
            "expired": _nullable("integer"),
            "queue_lag_seconds": _nullable("number"),
            "oldest_due_run_at": _TIME,
            "stats": {"oneOf": [_ref("DispatchStats"), {"type": "null"}]},
            "paused": {"type": "boolean"},
            "paused_at": _TIME,
        }
    ),
    "ScheduledTask": _object(
        {
            "id": {"type": "integer"},
            "namespace": {"type": "string"},
            "name": {"type": "string"},
            "interval_seconds": {"type": "number", "description": "Zero on a cron row."},
            "schedule": {"type": "string", "description": "The schedule, for people."},
            "cron": _nullable("string"),
            "cron_timezone": _nullable("string"),
            "next_run_at": _TIME,
            "due": {"type": "boolean"},
            "claimed": {"type": "boolean"},
            "claimed_by": _nullable("string"),
            "claim_expires_at": _TIME,
            "last_claimed_at": _TIME,
            "last_run_status": {"enum": ["succeeded", "failed", None]},
            "last_run_error": _nullable("string"),
            "last_run_duration_seconds": _nullable("number"),
            "last_run_finished_at": _TIME,
            "run_count": {"type": "integer"},
            "created_at": _TIME,
            "updated_at": _TIME,
        }
    ),
    "RuntimeLease": _object(
        {
            "lease_id": {"type": "string"},
            "owner_id": {"type": "string"},
            "expires_at": {"type": "string", "format": "date-time"},
            "expired": {"type": "boolean"},
            "never_expires": {"type": "boolean"},
            "acquired_at": _TIME,
            "updated_at": _TIME,
        }
    ),
    "Component": _object(
        {
            "name": {"type": "string"},
            "kind": {"type": "string"},
            "level": {"type": "integer"},
            "depends_on": {"type": "array", "items": {"type": "string"}},
            "health_checks": {"type": "array", "items": {"type": "string"}},
            "tasks": {"type": "array", "items": {"type": "string"}},
            "startup_phases": {"type": "array", "items": {"type": "object"}},
            "shutdown_phases": {"type": "array", "items": {"type": "object"}},
        }
    ),
    "ComponentGraph": _object(
        {
            "components": {"type": "array", "items": _ref("Component")},
            "edges": {
                "type": "array",
                "items": _object({"from": {"type": "string"}, "to": {"type": "string"}}),
            },
            "shutdown_order": {"type": "array", "items": {"type": "string"}},
            "startup_order": {"type": "array", "items": {"type": "string"}},
            "valid": {"type": "boolean"},
            "error": {"type": ["object", "null"]},
        }
    ),
    "HealthReport": _object(
        {
            "scope": {"enum": ["readiness", "diagnostics"]},
            "status": {"enum": ["healthy", "degraded", "unhealthy"]},
            "duration_seconds": _nullable("number"),
            "components": {
                "type": "array",
                "items": _object(
                    {
                        "name": {"type": "string"},
                        "status": {"enum": ["healthy", "degraded", "unhealthy"]},
                        "message": {"type": "string"},
                        "duration_seconds": _nullable("number"),
                        "details": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "description": "A typed detail: key, and a {type, value}.",
                            },
                        },
                    }
                ),
            },
        }
    ),
    "Reports": _object(
        {
            "startup": {"type": ["object", "null"], "description": "The last startup report."},
            "shutdown": {"type": ["object", "null"], "description": "The last shutdown report."},
        }
    ),
}


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


def _parameters(model: type[BaseModel], schemas: dict[str, Any]) -> list[dict[str, Any]]:
    return query_parameters(model, schemas)


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
    schemas: dict[str, Any] = copy.deepcopy({**_SCHEMAS, **LANE_STATE_SCHEMAS})
    paths: dict[str, Any] = {
        "/api/info": _get("Service info and configured views", _ref("Info")),
        "/api/tasks": _get(
            "List tasks, newest first",
            _ref("TaskPage"),
            400,
            404,
            503,
            parameters=_parameters(TaskListQuery, schemas),
        ),
        "/api/tasks/counts": _get(
            "Tasks matching the filters, per status (the status filter is ignored)",
            _ref("TaskCounts"),
            400,
            404,
            503,
            parameters=_parameters(TaskCountQuery, schemas),
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
                "parameters": [_TASK_ID, *_parameters(TaskRetryQuery, schemas)],
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
        "/api/lanes": _get(
            "Lanes with limits, in-flight and queue counts",
            _object({"items": {"type": "array", "items": _ref("Lane")}}),
            404,
            503,
        ),
        "/api/scheduled": _get(
            "The scheduled task catalog",
            _object(
                {
                    "now": {"type": "string", "format": "date-time"},
                    "items": {"type": "array", "items": _ref("ScheduledTask")},
                }
            ),
            400,
            404,
            503,
            parameters=_parameters(ScheduledQuery, schemas),
        ),
        "/api/leases": _get(
            "Runtime leases (holder, expiry)",
            _object(
                {
                    "now": {"type": "string", "format": "date-time"},
                    "items": {"type": "array", "items": _ref("RuntimeLease")},
                }
            ),
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
            parameters=_parameters(HealthQuery, schemas),
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
