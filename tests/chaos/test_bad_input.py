"""Suite 6, bad input: every boundary parser and codec answers a typed error, never a crash.

Fuzzed with hypothesis: payload/result JSON (TaskSpec / ErasedTaskSpec), steps JSON,
health report and detail JSON, RuntimeTaskName wire values, dedupe key parts, temp-dir
scopes and NewTask fields. The short versions run in ``make test``; the ``slow`` ones
(``make chaos``) run twenty times more examples.
"""

from __future__ import annotations

import contextlib
import enum
import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pydantic
import pytest
from hypothesis import given
from hypothesis import strategies as st

from aster_forge import AsterForgeError, TaskExecutionContext
from aster_forge.runtime import (
    HealthComponentDetailValue,
    HealthComponentReport,
    SystemHealthReport,
    create_runtime_temp_dir_guard,
)
from aster_forge.runtime._health import HealthComponentDetail
from aster_forge.runtime.errors import InvalidHealthReportError, RuntimeTempDirScopeError
from aster_forge.tasks import (
    NewTask,
    RuntimeTaskCatalog,
    RuntimeTaskDefinition,
    RuntimeTaskName,
    TaskDedupeKey,
    TaskInvalidValueError,
    TaskPayloadError,
    TaskSpec,
    scheduled_task_dedupe_key,
)
from aster_forge.tasks._steps import parse_task_steps_json, serialize_task_steps_json
from aster_forge.tasks.errors import TaskCodecError, TaskDedupeKeyError, TaskEnqueueValueError

from ._fuzz import deep_texts, fuzz, json_texts, json_values, raw_texts
from .report import ScenarioResult, record

# -- a product payload with nested, constrained fields --------------------------------------


class Address(pydantic.BaseModel):
    city: str
    zip: str = pydantic.Field(pattern=r"^[0-9]{5}$")


class Order(pydantic.BaseModel):
    order_id: int = pydantic.Field(ge=1)
    email: str
    tags: list[str] = []
    ship_to: Address


async def _body(ctx: TaskExecutionContext, state: None, payload: Order) -> dict[str, int]:
    return {"order_id": payload.order_id}


ORDER_SPEC: TaskSpec[None, Order, dict[str, int]] = TaskSpec(
    kind="ship-order", payload_type=Order, result_type=dict[str, int], run=_body
)


def _check_payload(text: str | bytes) -> None:
    try:
        decoded = ORDER_SPEC.decode_payload(text)
    except TaskPayloadError as exc:
        assert exc.task_kind == "ship-order"
        assert exc.fields, "a payload error names at least one field"
        for field in exc.fields:
            assert repr(field) in str(exc), f"field {field!r} not named in {exc}"
        return
    assert isinstance(decoded, Order)
    # A decoded payload re-encodes to text that decodes to the same value.
    assert ORDER_SPEC.decode_payload(ORDER_SPEC.encode_payload(decoded)) == decoded


def _check_result(text: str | bytes) -> None:
    try:
        value = ORDER_SPEC.decode_result(text)
    except TaskCodecError:
        return
    assert isinstance(value, dict)


order_like = st.fixed_dictionaries(
    {},
    optional={
        "order_id": json_values,
        "email": json_values,
        "tags": json_values,
        "ship_to": st.fixed_dictionaries({}, optional={"city": json_values, "zip": json_values})
        | json_values,
    },
).map(json.dumps)


@fuzz()
@given(st.one_of(raw_texts(), order_like))
def test_payload_and_result_decoding_only_raise_typed_errors(text: str | bytes) -> None:
    _check_payload(text)
    _check_result(text)


@fuzz(long=True)
@given(st.one_of(raw_texts(), order_like))
def test_payload_and_result_decoding_long(text: str | bytes) -> None:
    _check_payload(text)
    _check_result(text)


def test_payload_errors_name_the_field_and_never_the_value() -> None:
    secret = "hunter2-secret-value"
    with pytest.raises(TaskPayloadError) as info:
        ORDER_SPEC.decode_payload(
            json.dumps(
                {"order_id": secret, "email": "a@b", "ship_to": {"city": "x", "zip": secret}}
            )
        )
    assert set(info.value.fields) == {"order_id", "ship_to.zip"}
    assert "'order_id'" in str(info.value) and "'ship_to.zip'" in str(info.value)
    assert secret not in str(info.value)


@fuzz()
@given(payload=st.one_of(raw_texts(), order_like))
async def test_erased_spec_never_runs_the_body_on_a_bad_payload(payload: str | bytes) -> None:
    calls: list[Order] = []

    async def body(ctx: TaskExecutionContext, state: None, order: Order) -> int:
        calls.append(order)
        return order.order_id

    erased = TaskSpec(kind="count", payload_type=Order, result_type=int, run=body).erase()
    ctx: Any = object()  # the body never touches it
    try:
        result = await erased.run_json(ctx, None, payload)
    except TaskPayloadError:
        assert calls == []
        return
    assert calls and result == str(calls[0].order_id)


# -- steps JSON -------------------------------------------------------------------------------

step_like = st.lists(
    st.fixed_dictionaries(
        {},
        optional={
            "key": st.sampled_from(["a", "b", "", " a"]) | json_values,
            "title": json_values,
            "status": st.sampled_from(
                ["pending", "active", "succeeded", "failed", "skipped", "cancelled"]
            )
            | json_values,
            "progress_current": st.integers(-3, 5) | json_values,
            "progress_total": st.integers(-3, 5) | json_values,
            "detail": json_values,
            "started_at": st.sampled_from(
                ["2030-01-01T00:00:00Z", "2030-01-01T00:00:00", "not a date"]
            )
            | json_values,
        },
    ),
    max_size=4,
).map(json.dumps)


def _check_steps(text: str | bytes) -> None:
    try:
        steps = parse_task_steps_json(text)
    except (TaskCodecError, TaskInvalidValueError):
        return
    # Whatever parses round-trips exactly.
    assert parse_task_steps_json(serialize_task_steps_json(steps)) == steps


@fuzz()
@given(st.one_of(raw_texts(), step_like))
def test_steps_json_only_raises_typed_errors(text: str | bytes) -> None:
    _check_steps(text)


@fuzz(long=True)
@given(st.one_of(raw_texts(), step_like))
def test_steps_json_long(text: str | bytes) -> None:
    _check_steps(text)


# -- health report and detail JSON -------------------------------------------------------------

detail_like = st.fixed_dictionaries(
    {},
    optional={
        "key": json_values,
        "value": st.fixed_dictionaries(
            {},
            optional={
                "type": st.sampled_from(
                    ["text", "integer", "unsigned", "boolean", "duration_millis"]
                )
                | json_values,
                "value": json_values,
            },
        ),
    },
)
component_like = st.fixed_dictionaries(
    {},
    optional={
        "name": json_values,
        "status": st.sampled_from(["healthy", "degraded", "unhealthy"]) | json_values,
        "message": json_values,
        "duration_seconds": json_values,
        "details": st.lists(detail_like, max_size=3) | json_values,
    },
)
report_like = st.fixed_dictionaries(
    {},
    optional={
        "status": st.sampled_from(["healthy", "degraded", "unhealthy"]) | json_values,
        "duration_seconds": json_values,
        "components": st.lists(component_like, max_size=3) | json_values,
    },
).map(json.dumps)


def _check_health(text: str | bytes) -> None:
    try:
        report = SystemHealthReport.from_json(text)
    except InvalidHealthReportError:
        return
    assert SystemHealthReport.from_json(report.to_json()) == report


@fuzz()
@given(st.one_of(raw_texts(), report_like))
def test_health_report_json_only_raises_typed_errors(text: str | bytes) -> None:
    _check_health(text)


@fuzz(long=True)
@given(st.one_of(raw_texts(), report_like))
def test_health_report_json_long(text: str | bytes) -> None:
    _check_health(text)


@fuzz()
@given(json_values | detail_like | component_like)
def test_health_component_and_detail_dicts_only_raise_typed_errors(data: Any) -> None:
    for parse in (
        HealthComponentReport.from_json_dict,
        HealthComponentDetail.from_json_dict,
        HealthComponentDetailValue.from_json_dict,
    ):
        with contextlib.suppress(InvalidHealthReportError):
            parse(data)


def test_health_report_json_deeply_nested_is_a_typed_error() -> None:
    with pytest.raises(InvalidHealthReportError):
        SystemHealthReport.from_json("[" * 100_000)


# -- RuntimeTaskName wire values ----------------------------------------------------------------


class SystemTask(enum.Enum):
    HEALTH = enum.auto()
    CLEANUP = enum.auto()

    def as_str(self) -> str:
        return CATALOG.as_str(self)

    def display_name(self) -> str:
        return CATALOG.display_name(self)

    @classmethod
    def from_wire_value(cls, value: str) -> SystemTask | None:
        return CATALOG.from_wire_value(value)


CATALOG: RuntimeTaskCatalog[SystemTask, None] = RuntimeTaskCatalog(
    SystemTask,
    [
        RuntimeTaskDefinition(SystemTask.HEALTH, "system-health", "System health", None),
        RuntimeTaskDefinition(SystemTask.CLEANUP, "cleanup", "Cleanup", None),
    ],
)


class RunRow(pydantic.BaseModel):
    task: RuntimeTaskName[SystemTask]


@fuzz()
@given(st.text(max_size=80) | st.sampled_from(["system-health", "cleanup"]))
def test_runtime_task_names_round_trip_any_wire_value(wire: str) -> None:
    name = RuntimeTaskName.parse(SystemTask, wire)
    assert name.as_str() == wire
    assert isinstance(name.display_name(), str)
    row = RunRow.model_validate_json(json.dumps({"task": wire}))
    assert row.task == name
    assert RunRow.model_validate_json(row.model_dump_json()).task.as_str() == wire
    assert (name.known() is None) == (wire not in ("system-health", "cleanup"))


@fuzz()
@given(json_values.filter(lambda v: not isinstance(v, str)) | raw_texts())
def test_runtime_task_name_field_rejects_non_strings_with_a_validation_error(value: Any) -> None:
    text = value if isinstance(value, str | bytes) else json.dumps({"task": value})
    with contextlib.suppress(pydantic.ValidationError):
        RunRow.model_validate_json(text)


# -- dedupe keys ---------------------------------------------------------------------------------

aware_datetimes = st.datetimes(
    min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.timezones()
) | st.builds(
    lambda dt, minutes: dt.replace(tzinfo=timezone(timedelta(minutes=minutes))),
    st.datetimes(),
    st.integers(-23 * 60, 23 * 60),
)


@fuzz()
@given(st.text(max_size=300))
def test_dedupe_keys_accept_or_raise_a_typed_error(value: str) -> None:
    try:
        key = TaskDedupeKey(value)
    except TaskDedupeKeyError:
        return
    assert key.as_str() == value and 0 < len(value) <= TaskDedupeKey.MAX_LENGTH


@fuzz()
@given(
    st.text(max_size=80) | st.sampled_from(["shop", "a:b", "a%3Ab"]),
    st.text(max_size=140) | st.sampled_from(["x", "b:c", "b%3Ac"]),
    aware_datetimes | st.datetimes() | json_values,
)
def test_scheduled_dedupe_keys_accept_or_raise_a_typed_error(
    namespace: str, name: str, when: Any
) -> None:
    try:
        key = scheduled_task_dedupe_key(namespace, name, when)
    except TaskDedupeKeyError:
        return
    assert key.as_str().startswith("scheduled:") and key.as_str().endswith("Z")
    assert len(key.as_str()) <= TaskDedupeKey.MAX_LENGTH


@fuzz()
@given(
    st.tuples(st.text(min_size=1, max_size=20), st.text(min_size=1, max_size=20)),
    st.tuples(st.text(min_size=1, max_size=20), st.text(min_size=1, max_size=20)),
)
def test_scheduled_dedupe_keys_are_injective(a: tuple[str, str], b: tuple[str, str]) -> None:
    when = datetime(2030, 1, 1, tzinfo=UTC)
    try:
        ka = scheduled_task_dedupe_key(*a, when)
        kb = scheduled_task_dedupe_key(*b, when)
    except TaskDedupeKeyError:
        return
    assert (ka == kb) == (a == b)


# -- temp-dir scopes --------------------------------------------------------------------------


@fuzz()
@given(st.text(max_size=40) | st.sampled_from(["..", ".", "a/b", "a\\b", "/etc", "ok-scope_1"]))
def test_temp_dir_scopes_are_validated_before_touching_the_disk(scope: str) -> None:
    root = Path("/nonexistent-aster-forge-root")
    try:
        guard = create_runtime_temp_dir_guard(root, scope, "fuzz")
    except RuntimeTempDirScopeError:
        return
    # Accepted scopes are non-empty ASCII letters, digits, "-" and "_" only (e.g. "-" is fine).
    assert guard.scope == scope and scope and scope.isascii()
    assert all(ch.isalnum() or ch in "-_" for ch in scope)


# -- NewTask fields ---------------------------------------------------------------------------


@fuzz()
@given(
    kind=json_values | st.text(max_size=80),
    lane=json_values | st.text(max_size=80),
    payload=json_values | raw_texts(),
    steps=st.none() | json_texts() | st.text(max_size=30) | deep_texts(),
    priority=json_values,
    max_attempts=json_values,
    dedupe=st.none() | json_values,
)
def test_new_task_rejects_bad_fields_with_a_typed_error(
    kind: Any, lane: Any, payload: Any, steps: Any, priority: Any, max_attempts: Any, dedupe: Any
) -> None:
    try:
        task = NewTask(
            kind=kind,
            lane=lane,
            payload_json=payload,
            steps_json=steps,
            priority=priority,
            max_attempts=max_attempts,
            dedupe_key=dedupe,
        )
    except TaskEnqueueValueError:
        return
    except TaskDedupeKeyError:
        return
    json.loads(task.payload_json)
    assert isinstance(task.priority, int) and task.max_attempts >= 1


@pytest.mark.parametrize("field", ["payload_json", "steps_json"])
def test_new_task_deeply_nested_json_is_a_typed_error(field: str) -> None:
    nested = "[" * 3000 + "]" * 3000  # valid JSON, deeper than json.loads recurses
    with pytest.raises(TaskEnqueueValueError):
        fields: dict[str, Any] = {field: nested}
        NewTask(kind="k", lane="l", **fields)


def test_every_boundary_error_is_an_aster_forge_value_error() -> None:
    for error in (
        TaskPayloadError,
        TaskCodecError,
        TaskDedupeKeyError,
        TaskEnqueueValueError,
        InvalidHealthReportError,
        RuntimeTempDirScopeError,
    ):
        assert issubclass(error, AsterForgeError) and issubclass(error, ValueError)
    record(
        ScenarioResult(
            scenario="bad input: codec fuzzing",
            tasks=0,
            faults="hypothesis inputs to 9 parsers",
            lost=0,
            duplicated=0,
            stuck=0,
            result="pass",
        )
    )
