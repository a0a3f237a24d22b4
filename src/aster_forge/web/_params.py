"""The admin API's request models: query parameters and bodies, validated by pydantic.

The handlers parse every request with these models and the OpenAPI document is
generated from the same models, so the document states exactly the limits the
handlers apply (a request the document allows is never refused for its shape).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
)

from ..tasks._internal import (
    MAX_SCHEDULED_TASK_NAME_LENGTH,
    MAX_TASK_DEDUPE_KEY_LENGTH,
    MAX_TASK_ERROR_SEARCH_LENGTH,
    MAX_TASK_ID,
    MAX_TASK_KIND_LENGTH,
    MAX_TASK_PAGE_SIZE,
    TaskQuery,
    TaskStatus,
    validate_scheduled_identifier,
    wire_value,
)

__all__ = [
    "DEFAULT_PAGE_SIZE",
    "BadRequestError",
    "HealthQuery",
    "ScheduledQuery",
    "TaskBulkBody",
    "TaskCountQuery",
    "TaskListQuery",
    "TaskRetryQuery",
    "body_schema",
    "parse_body",
    "parse_query",
]

DEFAULT_PAGE_SIZE = 50

# No control characters, no surrounding whitespace: the stores' identifier rule.
IDENTIFIER_PATTERN = r"^[^\s\x00-\x1f\x7f-\x9f](?:[^\x00-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f])?$"
# Search text: anything but control characters.
_TEXT = r"^[^\x00-\x1f\x7f-\x9f]+$"
M = TypeVar("M", bound=BaseModel)


def _wire(what: str) -> AfterValidator:
    def check(value: str) -> str:
        wire_value(value, what)  # the stores' own rule, in case it is stricter
        return value

    return AfterValidator(check)


def _scheduled(what: str) -> AfterValidator:
    def check(value: str) -> str:
        return validate_scheduled_identifier(what, value)

    return AfterValidator(check)


Kind = Annotated[
    str,
    Field(min_length=1, max_length=MAX_TASK_KIND_LENGTH, pattern=IDENTIFIER_PATTERN),
    _wire("kind"),
]
Lane = Annotated[
    str,
    Field(min_length=1, max_length=MAX_TASK_KIND_LENGTH, pattern=IDENTIFIER_PATTERN),
    _wire("lane"),
]
TaskId = Annotated[int, Field(ge=1, le=MAX_TASK_ID)]


def _iso_text(value: object) -> object:
    # Only ISO 8601 text: pydantic's lax mode would also read "0.5" as a Unix time.
    if isinstance(value, str):
        return datetime.fromisoformat(value)
    return value


Instant = Annotated[AwareDatetime, BeforeValidator(_iso_text)]


class _Query(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", use_enum_values=False)


class _TaskFilters(_Query):
    """The task filters shared by the list, the counts and the bulk actions."""

    status: TaskStatus | None = Field(None, description="Only tasks with this status.")
    kind: Kind | None = Field(None, description="Only this kind (wire value).")
    lane: Lane | None = Field(None, description="Only this lane (wire value).")
    id: TaskId | None = Field(None, description="Only the task with this id.")
    dedupe_key: (
        Annotated[str, Field(min_length=1, max_length=MAX_TASK_DEDUPE_KEY_LENGTH, pattern=_TEXT)]
        | None
    ) = Field(None, description="Only the task with this dedupe key.")
    error: (
        Annotated[str, Field(min_length=1, max_length=MAX_TASK_ERROR_SEARCH_LENGTH, pattern=_TEXT)]
        | None
    ) = Field(None, description="last_error contains this text (case-insensitive).")
    created_from: Instant | None = Field(None, description="Created at or after.")
    created_until: Instant | None = Field(None, description="Created before.")

    def task_query(self) -> TaskQuery:
        """The store query these filters describe."""
        return TaskQuery(
            status=self.status,
            kind=self.kind,
            lane=self.lane,
            task_id=self.id,
            dedupe_key=self.dedupe_key,
            error_contains=self.error,
            created_from=self.created_from,
            created_until=self.created_until,
        )

    def needs_search(self) -> bool:
        """Whether a filter beyond status/kind/lane is set (only a search store has them)."""
        return any(
            value is not None
            for value in (
                self.id,
                self.dedupe_key,
                self.error,
                self.created_from,
                self.created_until,
            )
        )


class TaskListQuery(_TaskFilters):
    """``GET /api/tasks``: filters and a keyset cursor (newest first, both ways)."""

    limit: int = Field(DEFAULT_PAGE_SIZE, ge=1, le=MAX_TASK_PAGE_SIZE, description="Page size.")
    before_id: TaskId | None = Field(
        None, description="Keyset cursor: the previous page's next_before_id (older rows)."
    )
    after_id: TaskId | None = Field(
        None,
        description="Keyset cursor: a page's prev_after_id (newer rows). With before_id: "
        "only rows between the two.",
    )


class TaskCountQuery(_TaskFilters):
    """``GET /api/tasks/counts``: the filters (status ignored: every status is counted)."""


class TaskBulkBody(_TaskFilters):
    """``POST /api/tasks/bulk/{action}``: the selection, how many at most, dry run."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    limit: int = Field(
        MAX_TASK_PAGE_SIZE, ge=1, le=MAX_TASK_PAGE_SIZE, description="Act on at most this many."
    )
    dry_run: bool = Field(False, description="Only count what the action would change.")


class TaskRetryQuery(_Query):
    """``POST /api/tasks/{task_id}/retry``."""

    force: bool = Field(False, description="Retry even when manual retry was not allowed.")


class ScheduledQuery(_Query):
    """``GET /api/scheduled``."""

    namespace: (
        Annotated[
            str,
            Field(
                min_length=1, max_length=MAX_SCHEDULED_TASK_NAME_LENGTH, pattern=IDENTIFIER_PATTERN
            ),
            _scheduled("namespace"),
        ]
        | None
    ) = Field(None, description="Only this namespace.")


class HealthQuery(_Query):
    """``GET /api/health``."""

    scope: Literal["readiness", "diagnostics"] = Field(
        "diagnostics", description="Which checks to run."
    )


def parse_body(model: type[M], body: bytes) -> M:
    """Validate a JSON request body (empty: ``{}``) against ``model``.

    Raises:
        BadRequestError: Not JSON, or naming the first field that failed.
    """
    try:
        data = json.loads(body or b"{}")
    except ValueError:
        raise BadRequestError("request body is not JSON") from None
    if isinstance(data, dict):
        # JSON Schema's "integer" includes 5.0; pydantic's strict mode does not.
        data = {
            key: int(value) if isinstance(value, float) and value.is_integer() else value
            for key, value in data.items()
        }
    try:
        # Strict: JSON types as documented (no 0 for false, no "5" for 5).
        return model.model_validate_json(json.dumps(data), strict=True)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(part) for part in first["loc"]) or "body"
        raise BadRequestError(f"request body {where!r}: {first['msg']}") from None


def body_schema(model: type[BaseModel], schemas: dict[str, Any]) -> dict[str, Any]:
    """An OpenAPI ``requestBody`` generated from ``model`` (definitions into ``schemas``)."""
    document = model.model_json_schema(ref_template="#/components/schemas/{model}")
    schemas.update(document.pop("$defs", {}))
    return {"required": False, "content": {"application/json": {"schema": document}}}


class BadRequestError(Exception):
    """Raised when a request fails its model (answered 400 with the first problem)."""


def parse_query(model: type[M], params: Mapping[str, str]) -> M:
    """Validate query parameters (repeated names: the last value) against ``model``.

    Raises:
        BadRequestError: Naming the first parameter that failed, never echoing its value.
    """
    try:
        return model.model_validate(dict(params))
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(part) for part in first["loc"]) or "query"
        raise BadRequestError(f"query parameter {where!r}: {first['msg']}") from None


def query_parameters(model: type[BaseModel], schemas: dict[str, Any]) -> list[dict[str, Any]]:
    """OpenAPI ``parameters`` (``in: query``) generated from ``model``.

    Shared definitions (enums) are added to ``schemas`` and referenced from there.
    """
    document = model.model_json_schema(ref_template="#/components/schemas/{model}")
    schemas.update(document.pop("$defs", {}))
    parameters = []
    for name, schema in document["properties"].items():
        schema = dict(schema)
        description = schema.pop("description", "")
        schema.pop("title", None)
        # Optional fields: a query parameter is absent rather than null.
        variants = schema.pop("anyOf", None)
        if variants is not None:
            concrete = [v for v in variants if v.get("type") != "null"]
            schema.update(concrete[0] if len(concrete) == 1 else {"anyOf": concrete})
        if schema.get("default", ...) is None:
            schema.pop("default")
        parameters.append(
            {
                "name": name,
                "in": "query",
                "required": name in document.get("required", ()),
                "schema": schema,
                "description": description,
            }
        )
    return parameters
