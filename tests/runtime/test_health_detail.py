"""Typed health detail values: validation, display, exact JSON shape, round-trips."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aster_forge.runtime import HealthComponentDetailValue
from aster_forge.runtime._health import HealthComponentDetail, HealthComponentDetailKind
from aster_forge.runtime.errors import InvalidHealthDetailError, InvalidHealthReportError

I64_MIN = -(2**63)
I64_MAX = 2**63 - 1
U64_MAX = 2**64 - 1


def test_kind_wire_values() -> None:
    assert [k.value for k in HealthComponentDetailKind] == [
        "text",
        "integer",
        "unsigned",
        "boolean",
        "duration_millis",
    ]


def test_json_shape_is_exactly_the_seed_example() -> None:
    details = [
        HealthComponentDetail("backend", HealthComponentDetailValue.text("redis")),
        HealthComponentDetail("queue_depth", HealthComponentDetailValue.unsigned(12)),
        HealthComponentDetail("latency", HealthComponentDetailValue.duration_millis(42)),
    ]
    assert [d.to_json_dict() for d in details] == [
        {"key": "backend", "value": {"type": "text", "value": "redis"}},
        {"key": "queue_depth", "value": {"type": "unsigned", "value": 12}},
        {"key": "latency", "value": {"type": "duration_millis", "value": 42}},
    ]


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (HealthComponentDetailValue.text("redis"), "redis"),
        (HealthComponentDetailValue.integer(-3), "-3"),
        (HealthComponentDetailValue.unsigned(12), "12"),
        (HealthComponentDetailValue.boolean(True), "true"),
        (HealthComponentDetailValue.boolean(False), "false"),
        (HealthComponentDetailValue.duration_millis(42), "42ms"),
    ],
)
def test_display_value(value: HealthComponentDetailValue, shown: str) -> None:
    assert value.display_value() == shown


def test_range_edges_are_accepted() -> None:
    assert HealthComponentDetailValue.integer(I64_MIN).value == I64_MIN
    assert HealthComponentDetailValue.integer(I64_MAX).value == I64_MAX
    assert HealthComponentDetailValue.unsigned(0).value == 0
    assert HealthComponentDetailValue.unsigned(U64_MAX).value == U64_MAX
    assert HealthComponentDetailValue.duration_millis(U64_MAX).value == U64_MAX


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda: HealthComponentDetailValue.unsigned(-1), "outside the range"),
        (lambda: HealthComponentDetailValue.duration_millis(-1), "outside the range"),
        (lambda: HealthComponentDetailValue.unsigned(U64_MAX + 1), "outside the range"),
        (lambda: HealthComponentDetailValue.integer(I64_MAX + 1), "outside the range"),
        (lambda: HealthComponentDetailValue.integer(I64_MIN - 1), "outside the range"),
        (lambda: HealthComponentDetailValue.integer(True), "must be an int, got bool"),
        (lambda: HealthComponentDetailValue.unsigned(False), "must be an int, got bool"),
        (lambda: HealthComponentDetailValue.duration_millis(1.5), "must be an int, got float"),  # type: ignore[arg-type]
        (lambda: HealthComponentDetailValue.integer("3"), "must be an int, got str"),  # type: ignore[arg-type]
        (lambda: HealthComponentDetailValue.boolean(1), "must be a bool, got int"),  # type: ignore[arg-type]
        (lambda: HealthComponentDetailValue.text(3), "must be a str, got int"),  # type: ignore[arg-type]
        (lambda: HealthComponentDetailValue.duration(5), "must be a timedelta"),  # type: ignore[arg-type]
        (lambda: HealthComponentDetailValue.duration(timedelta(seconds=-1)), "negative"),
        (lambda: HealthComponentDetailValue("text", "x"), "HealthComponentDetailKind"),  # type: ignore[arg-type]
        (lambda: HealthComponentDetail("", HealthComponentDetailValue.text("x")), "key"),
        (lambda: HealthComponentDetail("k", "x"), "HealthComponentDetailValue"),  # type: ignore[arg-type]
    ],
)
def test_bad_values_raise_a_clear_value_error(build: Any, match: str) -> None:
    with pytest.raises(InvalidHealthDetailError, match=match) as info:
        build()
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, InvalidHealthReportError)


def test_duration_from_timedelta_drops_sub_millisecond_remainder() -> None:
    value = HealthComponentDetailValue.duration(timedelta(microseconds=1_900))
    assert value == HealthComponentDetailValue.duration_millis(1)
    assert value.as_timedelta() == timedelta(milliseconds=1)
    assert HealthComponentDetailValue.text("x").as_timedelta() is None


@pytest.mark.parametrize(
    ("payload", "match"),
    [
        ({"type": "float", "value": 1.5}, "unknown detail value type 'float'"),
        ({"type": "unsigned", "value": -1}, "outside the range"),
        ({"type": "integer", "value": 2**63}, "outside the range"),
        ({"type": "integer", "value": True}, "got bool"),
        ({"type": "boolean", "value": 1}, "must be a bool"),
        ({"type": "duration_millis", "value": 4.2}, "got float"),
        ({"type": "text", "value": None}, "must be a str"),
        ({"type": "text"}, "exactly the keys"),
        ({"type": "text", "value": "x", "unit": "ms"}, "exactly the keys"),
        (["text", "x"], "must be a JSON object"),
    ],
)
def test_bad_json_values_are_rejected(payload: object, match: str) -> None:
    with pytest.raises(InvalidHealthDetailError, match=match):
        HealthComponentDetailValue.from_json_dict(payload)


@pytest.mark.parametrize(
    "payload",
    [
        {"key": "a"},
        {"key": 3, "value": {"type": "text", "value": "x"}},
        {"key": "a", "value": {"type": "text", "value": "x"}, "extra": 1},
        "a=b",
    ],
)
def test_bad_json_details_are_rejected(payload: object) -> None:
    with pytest.raises(InvalidHealthDetailError):
        HealthComponentDetail.from_json_dict(payload)


detail_values = st.one_of(
    st.text().map(HealthComponentDetailValue.text),
    st.integers(I64_MIN, I64_MAX).map(HealthComponentDetailValue.integer),
    st.integers(0, U64_MAX).map(HealthComponentDetailValue.unsigned),
    st.booleans().map(HealthComponentDetailValue.boolean),
    st.integers(0, U64_MAX).map(HealthComponentDetailValue.duration_millis),
)


@given(key=st.text(min_size=1), value=detail_values)
def test_detail_json_round_trip(key: str, value: HealthComponentDetailValue) -> None:
    detail = HealthComponentDetail(key, value)
    text = json.dumps(detail.to_json_dict())
    parsed = HealthComponentDetail.from_json_dict(json.loads(text))
    assert parsed == detail
    assert type(parsed.value.value) is type(value.value)


@given(
    value=st.one_of(
        st.integers(min_value=I64_MAX + 1),
        st.integers(max_value=I64_MIN - 1),
    )
)
def test_integers_outside_i64_never_parse(value: int) -> None:
    with pytest.raises(InvalidHealthDetailError):
        HealthComponentDetailValue.from_json_dict({"type": "integer", "value": value})


@given(value=st.integers(max_value=-1))
def test_negative_unsigned_never_parses(value: int) -> None:
    for tag in ("unsigned", "duration_millis"):
        with pytest.raises(InvalidHealthDetailError):
            HealthComponentDetailValue.from_json_dict({"type": tag, "value": value})


@given(tag=st.text().filter(lambda t: t not in {k.value for k in HealthComponentDetailKind}))
def test_unknown_type_tags_never_parse(tag: str) -> None:
    with pytest.raises(InvalidHealthDetailError, match="unknown detail value type"):
        HealthComponentDetailValue.from_json_dict({"type": tag, "value": 1})
