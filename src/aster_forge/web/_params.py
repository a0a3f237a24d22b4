"""The admin API's request models: query parameters and bodies, validated by pydantic.

The handlers parse every request with these models and the OpenAPI document is
generated from the same models, so the document states exactly the limits the
handlers apply (a request the document allows is never refused for its shape).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from ..tasks import TaskStatus
from ..tasks._records import MAX_TASK_ID, MAX_TASK_KIND_LENGTH, MAX_TASK_PAGE_SIZE, wire_value
from ..tasks._schedule_types import MAX_SCHEDULED_TASK_NAME_LENGTH, validate_scheduled_identifier

__all__ = [
    "DEFAULT_PAGE_SIZE",
    "BadRequestError",
    "HealthQuery",
    "ScheduledQuery",
    "TaskListQuery",
    "TaskRetryQuery",
    "parse_query",
]

DEFAULT_PAGE_SIZE = 50

# No control characters, no surrounding whitespace: the stores' identifier rule.
_IDENTIFIER = r"^[^\s\x00-\x1f\x7f-\x9f](?:[^\x00-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f])?$"
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
    Field(min_length=1, max_length=MAX_TASK_KIND_LENGTH, pattern=_IDENTIFIER),
    _wire("kind"),
]
Lane = Annotated[
    str,
    Field(min_length=1, max_length=MAX_TASK_KIND_LENGTH, pattern=_IDENTIFIER),
    _wire("lane"),
]
TaskId = Annotated[int, Field(ge=1, le=MAX_TASK_ID)]


class _Query(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", use_enum_values=False)


class TaskListQuery(_Query):
    """``GET /api/tasks``: filters and a keyset cursor (newest first)."""

    status: TaskStatus | None = Field(None, description="Only tasks with this status.")
    kind: Kind | None = Field(None, description="Only this kind (wire value).")
    lane: Lane | None = Field(None, description="Only this lane (wire value).")
    limit: int = Field(DEFAULT_PAGE_SIZE, ge=1, le=MAX_TASK_PAGE_SIZE, description="Page size.")
    before_id: TaskId | None = Field(
        None, description="Keyset cursor: the previous page's next_before_id."
    )


class TaskRetryQuery(_Query):
    """``POST /api/tasks/{task_id}/retry``."""

    force: bool = Field(False, description="Retry even when manual retry was not allowed.")


class ScheduledQuery(_Query):
    """``GET /api/scheduled``."""

    namespace: (
        Annotated[
            str,
            Field(min_length=1, max_length=MAX_SCHEDULED_TASK_NAME_LENGTH, pattern=_IDENTIFIER),
            _scheduled("namespace"),
        ]
        | None
    ) = Field(None, description="Only this namespace.")


class HealthQuery(_Query):
    """``GET /api/health``."""

    scope: Literal["readiness", "diagnostics"] = Field(
        "diagnostics", description="Which checks to run."
    )


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
