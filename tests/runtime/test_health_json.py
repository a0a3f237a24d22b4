"""Stable JSON form of health reports: golden files and strict round-trips.

The golden files in ``tests/runtime/golden/`` are the wire contract that admin UIs,
task records and HTTP endpoints rely on. A change to them is a breaking change.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aster_forge.runtime import (
    HealthCheckOptions,
    HealthCheckRegistry,
    HealthCheckScopes,
    HealthComponentDetailValue,
    HealthComponentReport,
    HealthStatus,
    SystemHealthReport,
)
from aster_forge.runtime.errors import InvalidHealthDetailError, InvalidHealthReportError

GOLDEN = Path(__file__).parent / "golden"


def _golden(name: str) -> Any:
    return json.loads((GOLDEN / name).read_text(encoding="utf-8"))


def sample_report() -> SystemHealthReport:
    return SystemHealthReport(
        (
            HealthComponentReport.healthy("database", "database ping succeeded")
            .with_duration(timedelta(milliseconds=12, microseconds=500))
            .with_detail("driver", HealthComponentDetailValue.text("aiosqlite"))
            .with_detail("latency", HealthComponentDetailValue.duration_millis(12)),
            HealthComponentReport.degraded("cache", "using in-memory fallback")
            .with_duration(timedelta(milliseconds=3))
            .with_detail("backend", HealthComponentDetailValue.text("redis"))
            .with_detail("fallback_active", HealthComponentDetailValue.boolean(True))
            .with_detail("queue_depth", HealthComponentDetailValue.unsigned(12))
            .with_detail("clock_offset", HealthComponentDetailValue.integer(-7)),
            HealthComponentReport.unhealthy("mail", "health check timed out").with_duration(
                timedelta(seconds=5)
            ),
        ),
        timedelta(seconds=5, milliseconds=2),
    )


def test_system_report_matches_golden_file() -> None:
    assert sample_report().to_json_dict() == _golden("system_health_report.json")


def test_golden_file_parses_back_to_the_same_report() -> None:
    parsed = SystemHealthReport.from_json_dict(_golden("system_health_report.json"))
    assert parsed == sample_report()
    assert parsed.status() is HealthStatus.UNHEALTHY
    assert parsed.components[1].detail("queue_depth") == HealthComponentDetailValue.unsigned(12)


def test_seed_detail_example_matches_golden_file() -> None:
    report = (
        HealthComponentReport.healthy("cache", "ok")
        .with_detail("backend", HealthComponentDetailValue.text("redis"))
        .with_detail("queue_depth", HealthComponentDetailValue.unsigned(12))
        .with_detail("latency", HealthComponentDetailValue.duration_millis(42))
    )
    assert report.to_json_dict()["details"] == _golden("component_details.json")


def test_empty_report_matches_golden_file() -> None:
    assert SystemHealthReport().to_json_dict() == _golden("empty_health_report.json")
    assert SystemHealthReport.from_json_dict(_golden("empty_health_report.json")) == (
        SystemHealthReport()
    )


def test_descriptors_match_golden_file() -> None:
    registry = HealthCheckRegistry(default_timeout=timedelta(seconds=5))

    async def check() -> HealthComponentReport:
        return HealthComponentReport.healthy("x", "ok")

    registry.register_with_options(
        "database",
        HealthCheckOptions.required(timedelta(seconds=2)).with_scopes(
            HealthCheckScopes.readiness_and_diagnostics()
        ),
        check,
    )
    registry.register_with_options(
        "process", HealthCheckOptions.required().with_scopes(HealthCheckScopes.all()), check
    )
    registry.register_with_options(
        "cache",
        HealthCheckOptions.optional(timedelta(milliseconds=500)).with_scopes(
            HealthCheckScopes.diagnostics()
        ),
        check,
    )
    assert [d.to_json_dict() for d in registry.descriptors()] == _golden(
        "health_check_descriptors.json"
    )


def test_text_round_trip_keeps_unicode() -> None:
    report = SystemHealthReport(
        [HealthComponentReport.healthy("数据库", "连接正常 ✓")], timedelta(microseconds=1)
    )
    text = report.to_json(indent=2)
    assert "数据库" in text
    assert SystemHealthReport.from_json(text) == report
    assert SystemHealthReport.from_json(text.encode()) == report


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda d: d.update(status="healthy"), "disagrees with its components"),
        (lambda d: d.update(status="ok"), "unknown health status"),
        (lambda d: d.pop("components"), "missing keys"),
        (lambda d: d.update(extra=1), "unknown keys"),
        (lambda d: d.update(components={}), "must be a JSON array"),
        (lambda d: d.update(duration_seconds=-1), "duration_seconds"),
        (lambda d: d.update(duration_seconds=float("inf")), "duration_seconds"),
        (lambda d: d.update(duration_seconds=1e300), "too large"),
        (lambda d: d.update(duration_seconds="5"), "must be a number"),
        (lambda d: d.update(duration_seconds=True), "must be a number"),
        (lambda d: d["components"][0].update(status="up"), "unknown health status"),
        (lambda d: d["components"][0].pop("message"), "missing keys"),
        (lambda d: d["components"][0].update(name=""), "name"),
        (lambda d: d["components"][0].update(message=None), "message"),
        (lambda d: d["components"][0].update(details={}), "must be a JSON array"),
        (lambda d: d["components"].append("mail healthy"), "must be a JSON object"),
    ],
)
def test_malformed_reports_are_rejected(mutate: Any, match: str) -> None:
    data = _golden("system_health_report.json")
    mutate(data)
    with pytest.raises(InvalidHealthReportError, match=match):
        SystemHealthReport.from_json_dict(data)


def test_bad_detail_inside_a_report_raises_the_detail_error() -> None:
    data = _golden("system_health_report.json")
    data["components"][1]["details"][2]["value"] = {"type": "unsigned", "value": -12}
    with pytest.raises(InvalidHealthDetailError, match="outside the range"):
        SystemHealthReport.from_json_dict(data)
    data["components"][1]["details"][2]["value"] = {"type": "decimal", "value": "1.0"}
    with pytest.raises(InvalidHealthDetailError, match="unknown detail value type 'decimal'"):
        SystemHealthReport.from_json_dict(data)


def test_invalid_json_text_is_a_report_error() -> None:
    with pytest.raises(InvalidHealthReportError, match="not valid JSON"):
        SystemHealthReport.from_json("{not json")


detail_values = st.one_of(
    st.text().map(HealthComponentDetailValue.text),
    st.integers(-(2**63), 2**63 - 1).map(HealthComponentDetailValue.integer),
    st.integers(0, 2**64 - 1).map(HealthComponentDetailValue.unsigned),
    st.booleans().map(HealthComponentDetailValue.boolean),
    st.integers(0, 2**64 - 1).map(HealthComponentDetailValue.duration_millis),
)
durations = st.none() | st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=3650))


@st.composite
def components(draw: st.DrawFn) -> HealthComponentReport:
    report = HealthComponentReport(
        draw(st.text(min_size=1)),
        draw(st.sampled_from(list(HealthStatus))),
        draw(st.text()),
        draw(durations),
    )
    for key, value in draw(st.dictionaries(st.text(min_size=1), detail_values, max_size=5)).items():
        report = report.with_detail(key, value)
    return report


@given(items=st.lists(components(), max_size=6), duration=durations)
def test_report_json_text_round_trip(
    items: list[HealthComponentReport], duration: timedelta | None
) -> None:
    report = SystemHealthReport(items, duration)
    assert SystemHealthReport.from_json(report.to_json()) == report
