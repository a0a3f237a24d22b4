"""The admin API's answers as pydantic models: the OpenAPI response schemas are generated
from them, and the tests check every serializer's output against its model.

Times are ISO 8601 text (``format: date-time``); a nullable value is ``anyOf`` the type
and ``null`` (OpenAPI 3.1 is JSON Schema 2020-12).
"""

from __future__ import annotations

import copy
import functools
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt
from pydantic.json_schema import GenerateJsonSchema, models_json_schema

__all__ = ["response_schemas"]

Status = Literal["pending", "running", "succeeded", "failed", "cancelled"]
Time = datetime | None
Health = Literal["healthy", "degraded", "unhealthy"]


class _Answer(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Error(_Answer):
    error: str
    message: str


class Info(_Answer):
    title: str
    auth_required: bool
    actions_allowed: bool = Field(
        description="Whether this client may retry, cancel, pause lanes and read payloads "
        "(without a token or auth configured: loopback clients only)."
    )
    features: dict[str, bool]
    now: datetime


class TaskStep(BaseModel):
    # Stored step objects: a step written by an older product may lack a field.
    key: str = ""
    title: str = ""
    status: Literal["pending", "active", "succeeded", "failed", "skipped", "cancelled"] = "pending"
    progress_current: NonNegativeInt = 0
    progress_total: NonNegativeInt = 0
    detail: str | None = None
    started_at: Time = None
    finished_at: Time = None


class Task(_Answer):
    id: int
    kind: str
    lane: str
    status: Status
    attempt: int = Field(description="Attempts that ended without success.")
    runs: int = Field(description="Attempts used, the running or successful one included.")
    max_attempts: int
    actions: list[Literal["retry", "cancel"]] = Field(
        description="What POST /retry and /cancel accept for this task now."
    )
    priority: int
    run_at: Time
    claimed_by: str | None
    lease_expires_at: Time
    lease_expired: bool = Field(
        description="Running on a lease that has expired: its worker is lost and the next "
        "claim of its lane rescues it."
    )
    dedupe_key: str | None
    last_error: str | None
    failure_reason: Literal["product_error", "lease_expired", "cancelled"] | None
    manual_retry_allowed: bool
    cancel_requested: bool
    rescued: bool
    created_at: Time
    updated_at: Time
    started_at: Time
    finished_at: Time
    snooze_count: NonNegativeInt
    steps: list[TaskStep] | None
    steps_invalid: bool
    steps_done: int
    steps_total: int


class TaskDetail(Task):
    last_traceback: str | None = Field(
        description="The bounded traceback of the failure last_error describes (an "
        "unexpected exception), or null."
    )
    payload: Any = Field(description="The decoded payload JSON (null when truncated).")
    payload_invalid: bool
    payload_truncated: bool
    payload_preview: str | None = Field(
        description="The stored text's start, when it is too large to send."
    )
    payload_size: int = Field(description="Stored characters.")
    result: Any = Field(description="The decoded result JSON, or null.")
    result_invalid: bool
    result_truncated: bool
    result_preview: str | None
    result_size: int


class TaskPage(_Answer):
    items: list[Task]
    next_before_id: int | None
    prev_after_id: int | None
    limit: int


class StatusCounts(_Answer):
    pending: NonNegativeInt
    running: NonNegativeInt
    succeeded: NonNegativeInt
    failed: NonNegativeInt
    cancelled: NonNegativeInt


class TaskCounts(_Answer):
    counts: StatusCounts
    total: NonNegativeInt


class BulkResult(_Answer):
    action: Literal["retry", "cancel"]
    dry_run: bool
    matched: NonNegativeInt
    eligible: NonNegativeInt
    changed: list[int]


class OverviewLane(_Answer):
    lane: str
    counts: StatusCounts
    lease_expired: NonNegativeInt = Field(description="Running tasks whose lease has expired.")
    oldest_pending_created_at: Time
    oldest_pending_age_seconds: float | None


class Throughput(_Answer):
    lane: str
    succeeded: list[NonNegativeInt]
    failed: list[NonNegativeInt]
    retried: list[NonNegativeInt]


class Overview(_Answer):
    now: datetime
    minutes: int
    start: datetime
    lanes: list[OverviewLane]
    throughput: list[Throughput] = Field(
        description="Per lane, one count per minute from start (oldest first)."
    )


class CancelResult(_Answer):
    outcome: Literal["cancelled", "cancel_requested", "already_finished"]
    task: TaskDetail | None


class WorkflowNode(_Answer):
    id: int
    kind: str
    lane: str
    status: Status
    waiting: bool = Field(description="Pending, not yet due: a dependency has not finished.")


class WorkflowEdge(_Answer):
    from_: int = Field(alias="from", description="The dependency's task id.")
    to: int = Field(description="The id of the task that waits for it.")
    run_anyway: bool = Field(
        description="The dependent runs even when this dependency fails or is cancelled."
    )


class Workflow(_Answer):
    task_id: int
    nodes: list[WorkflowNode] = Field(description="The connected tasks, by id.")
    edges: list[WorkflowEdge]
    dependencies: list[int] = Field(description="The ids task_id waits for.")
    dependents: list[int] = Field(description="The ids that wait for task_id.")
    truncated: bool = Field(description="More tasks are connected than limit nodes.")
    limit: int


class WorkflowCancelResult(_Answer):
    task_id: int
    cancelled: list[int] = Field(description="Pending tasks this call cancelled.")
    cancel_requested: list[int] = Field(description="Running tasks asked to stop.")
    truncated: bool = Field(description="The workflow had more tasks than one call reads.")


class DispatchStats(_Answer):
    """Dispatch counters of this process for one lane."""

    claimed: NonNegativeInt
    rescued: NonNegativeInt
    succeeded: NonNegativeInt
    retried: NonNegativeInt
    failed_permanently: NonNegativeInt
    lease_lost: NonNegativeInt
    released_on_shutdown: NonNegativeInt
    store_errors: NonNegativeInt
    claim_calls: NonNegativeInt
    claim_errors: NonNegativeInt
    claim_latency_seconds_mean: float
    claim_latency_seconds_max: float
    queue_lag_seconds: float | None
    in_flight: NonNegativeInt


class LaneRateLimit(_Answer):
    count: int = Field(description="The most task starts per window.")
    period_seconds: float = Field(
        description="The window's length; windows are aligned to the Unix epoch."
    )


class PartitionWaiting(_Answer):
    partition: str
    due: int = Field(description="The partition's due pending tasks.")


class Lane(_Answer):
    lane: str
    limit: int | None
    in_flight: int | None
    pending: int | None
    due: int | None
    running: int | None
    cluster_limit: int | None = Field(
        description="The lane's cap on running tasks across every instance, when it has one."
    )
    partition_limit: int | None = Field(
        description=(
            "The lane's cap on running tasks of one partition across every instance, "
            "when it has one (its claims then take partitions in turn)."
        )
    )
    rate_limit: LaneRateLimit | None = Field(
        description="The lane's cap on task starts per window across every instance."
    )
    rate_remaining: int | None = Field(
        description=(
            "Starts left in the current rate window (from the stored lane state), "
            "when the lane has a rate limit."
        )
    )
    partition_rate_limit: LaneRateLimit | None = Field(
        description=(
            "The lane's cap on task starts of one partition per window across every "
            "instance, when it has one."
        )
    )
    partitions_waiting: int | None = Field(
        description="How many partitions have due pending tasks (from the store)."
    )
    top_partitions_waiting: list[PartitionWaiting] | None = Field(
        description="The (up to three) partitions with the most due tasks, most first."
    )
    expired: int | None
    queue_lag_seconds: float | None
    oldest_due_run_at: Time
    stats: DispatchStats | None
    paused: bool
    paused_at: Time


class LanePage(_Answer):
    items: list[Lane]


class LaneState(_Answer):
    lane: str
    paused: bool
    paused_at: Time
    updated_at: Time


class ScheduledTask(_Answer):
    id: int
    namespace: str
    name: str
    interval_seconds: float = Field(description="Zero on a cron row.")
    schedule: str = Field(description="The schedule, for people.")
    cron: str | None
    cron_timezone: str | None
    next_run_at: Time
    due: bool
    claimed: bool
    claimed_by: str | None
    claim_expires_at: Time
    last_claimed_at: Time
    last_run_status: Literal["succeeded", "failed"] | None
    last_run_error: str | None
    last_run_duration_seconds: float | None
    last_run_finished_at: Time
    run_count: int
    created_at: Time
    updated_at: Time


class ScheduledPage(_Answer):
    now: datetime
    items: list[ScheduledTask]


class RuntimeLease(_Answer):
    lease_id: str
    owner_id: str
    expires_at: datetime
    expired: bool
    never_expires: bool
    acquired_at: Time
    updated_at: Time


class LeasePage(_Answer):
    now: datetime
    items: list[RuntimeLease]


class Component(_Answer):
    name: str
    kind: str
    level: int
    depends_on: list[str]
    health_checks: list[str]
    tasks: list[str]
    startup_phases: list[dict[str, Any]]
    shutdown_phases: list[dict[str, Any]]


class Edge(_Answer):
    from_: str = Field(alias="from")
    to: str


class ComponentGraph(_Answer):
    components: list[Component]
    edges: list[Edge]
    shutdown_order: list[str]
    startup_order: list[str]
    valid: bool
    error: dict[str, Any] | None


class ComponentHealth(_Answer):
    name: str
    status: Health
    message: str
    duration_seconds: float | None
    details: list[
        Annotated[dict[str, Any], Field(description="A typed detail: key, and a {type, value}.")]
    ]


class HealthReport(_Answer):
    scope: Literal["readiness", "diagnostics"]
    status: Health
    duration_seconds: float | None
    components: list[ComponentHealth]


class Reports(_Answer):
    startup: dict[str, Any] | None = Field(description="The last startup report.")
    shutdown: dict[str, Any] | None = Field(description="The last shutdown report.")


class _NoTitles(GenerateJsonSchema):
    # Generated titles repeat each property's name; the document reads better without.
    def field_title_should_be_set(self, schema: Any) -> bool:
        return False


ANSWERS: tuple[type[BaseModel], ...] = (
    BulkResult,
    CancelResult,
    ComponentGraph,
    Error,
    HealthReport,
    Info,
    LanePage,
    LaneState,
    LeasePage,
    Overview,
    Reports,
    ScheduledPage,
    TaskCounts,
    TaskDetail,
    TaskPage,
    Workflow,
    WorkflowCancelResult,
)
"""Every model an endpoint answers with (the others are reached from these)."""


def response_schemas() -> dict[str, Any]:
    """Every answer's JSON Schema by model name, referenced as ``#/components/schemas/Name``.

    A fresh copy each call: a caller may change its document.
    """
    return copy.deepcopy(_generated())


@functools.cache
def _generated() -> dict[str, Any]:
    # Generated once: it takes longer than serving the document.
    _, document = models_json_schema(
        [(model, "serialization") for model in ANSWERS],
        ref_template="#/components/schemas/{model}",
        schema_generator=_NoTitles,
    )
    schemas: dict[str, Any] = document["$defs"]
    return schemas
