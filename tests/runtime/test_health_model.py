"""Health report model: wire values, ordering, aggregation, projections, metrics bridge."""

from __future__ import annotations

from datetime import timedelta

import pytest

from aster_forge.runtime import (
    HealthCheckScope,
    HealthComponentDetailValue,
    HealthComponentReport,
    HealthStatus,
    SystemHealthReport,
)
from aster_forge.runtime.errors import InvalidHealthDetailError, InvalidHealthReportError
from aster_forge.runtime.protocols import HealthMetricsRecorder


def test_status_wire_values() -> None:
    assert [s.value for s in HealthStatus] == ["healthy", "degraded", "unhealthy"]
    assert [s.metric_value() for s in HealthStatus] == [0, 1, 2]
    assert [HealthStatus.parse(s.value) for s in HealthStatus] == list(HealthStatus)


@pytest.mark.parametrize("value", ["Healthy", "ok", "", None, 0])
def test_status_parse_rejects_unknown_values(value: object) -> None:
    with pytest.raises(InvalidHealthReportError, match="unknown health status"):
        HealthStatus.parse(value)


def test_status_is_ordered_so_the_worst_wins() -> None:
    assert HealthStatus.HEALTHY < HealthStatus.DEGRADED < HealthStatus.UNHEALTHY
    assert HealthStatus.UNHEALTHY >= HealthStatus.DEGRADED >= HealthStatus.HEALTHY
    assert HealthStatus.DEGRADED <= HealthStatus.DEGRADED
    assert HealthStatus.UNHEALTHY > HealthStatus.HEALTHY
    assert max(HealthStatus.DEGRADED, HealthStatus.UNHEALTHY) is HealthStatus.UNHEALTHY
    assert HealthStatus.worst([]) is HealthStatus.HEALTHY
    assert HealthStatus.worst([HealthStatus.DEGRADED, HealthStatus.HEALTHY]) is (
        HealthStatus.DEGRADED
    )
    assert HealthStatus.HEALTHY.__lt__(1) is NotImplemented


def test_component_constructors() -> None:
    assert HealthComponentReport.healthy("db", "ok").status is HealthStatus.HEALTHY
    assert HealthComponentReport.degraded("db", "slow").status is HealthStatus.DEGRADED
    bad = HealthComponentReport.unhealthy("db", "down")
    assert (bad.name, bad.status, bad.message) == ("db", HealthStatus.UNHEALTHY, "down")
    assert bad.duration is None
    assert bad.duration_seconds() == 0.0
    assert bad.has_issue()


def test_with_duration_and_details_return_new_reports() -> None:
    base = HealthComponentReport.healthy("cache", "ok")
    report = (
        base.with_duration(timedelta(milliseconds=250))
        .with_detail("backend", HealthComponentDetailValue.text("redis"))
        .with_detail("latency", HealthComponentDetailValue.duration_millis(42))
    )
    assert base.duration is None and base.details == ()
    assert report.duration_seconds() == 0.25
    assert report.detail("backend") == HealthComponentDetailValue.text("redis")
    assert report.detail("latency") == HealthComponentDetailValue.duration_millis(42)
    assert report.detail("missing") is None
    assert [d.key for d in report.details] == ["backend", "latency"]


def test_with_detail_rejects_duplicates_and_untyped_values() -> None:
    report = HealthComponentReport.healthy("cache", "ok").with_detail(
        "backend", HealthComponentDetailValue.text("redis")
    )
    with pytest.raises(InvalidHealthDetailError, match="already has a detail named 'backend'"):
        report.with_detail("backend", HealthComponentDetailValue.text("memory"))
    with pytest.raises(InvalidHealthDetailError, match="HealthComponentDetailValue"):
        report.with_detail("depth", 3)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"name": "", "status": HealthStatus.HEALTHY, "message": "m"}, "name"),
        ({"name": "a", "status": "healthy", "message": "m"}, "status"),
        ({"name": "a", "status": HealthStatus.HEALTHY, "message": 3}, "message"),
        (
            {
                "name": "a",
                "status": HealthStatus.HEALTHY,
                "message": "m",
                "duration": timedelta(seconds=-1),
            },
            "duration",
        ),
    ],
)
def test_component_report_validates_fields(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(InvalidHealthReportError, match=match):
        HealthComponentReport(**kwargs)  # type: ignore[arg-type]


def _report() -> SystemHealthReport:
    return SystemHealthReport(
        [
            HealthComponentReport.healthy("database", "database ping succeeded"),
            HealthComponentReport.degraded("cache", "using fallback").with_detail(
                "fallback_active", HealthComponentDetailValue.boolean(True)
            ),
            HealthComponentReport.unhealthy("mail", "smtp unreachable"),
        ],
        timedelta(milliseconds=1500),
    )


def test_aggregation_and_projections() -> None:
    report = _report()
    assert isinstance(report.components, tuple)
    assert report.status() is HealthStatus.UNHEALTHY
    assert report.has_issues()
    assert report.duration_seconds() == 1.5
    assert report.summary() == "database healthy, cache degraded, mail unhealthy"
    assert report.details() == (
        "database healthy: database ping succeeded; "
        "cache degraded: using fallback [fallback_active=true]; "
        "mail unhealthy: smtp unreachable"
    )
    assert report.issue_summary() == "cache degraded, mail unhealthy"
    assert report.issue_details() == (
        "cache degraded: using fallback [fallback_active=true]; mail unhealthy: smtp unreachable"
    )
    assert [c.name for c in report.issues()] == ["cache", "mail"]


def test_aggregation_worst_status_variants() -> None:
    healthy = HealthComponentReport.healthy("a", "ok")
    degraded = HealthComponentReport.degraded("b", "meh")
    assert SystemHealthReport([healthy]).status() is HealthStatus.HEALTHY
    assert not SystemHealthReport([healthy]).has_issues()
    assert SystemHealthReport([healthy, degraded]).status() is HealthStatus.DEGRADED
    assert SystemHealthReport([degraded, healthy]).has_issues()


def test_seed_summary_example() -> None:
    report = SystemHealthReport([HealthComponentReport.healthy("database", "ok")])
    assert report.summary() == "database healthy"
    assert report.issue_summary() == "no issues"
    assert report.issue_details() == "no issues"


def test_empty_report() -> None:
    report = SystemHealthReport()
    assert report.status() is HealthStatus.HEALTHY
    assert not report.has_issues()
    assert report.duration_seconds() == 0.0
    assert report.summary() == "no health checks"
    assert report.details() == "no health checks"


def test_system_report_validates_components() -> None:
    with pytest.raises(InvalidHealthReportError, match="HealthComponentReport"):
        SystemHealthReport(["database healthy"])  # type: ignore[list-item]
    with pytest.raises(InvalidHealthReportError, match="duration"):
        SystemHealthReport((), timedelta(seconds=-1))


class RecordingMetrics:
    """A HealthMetricsRecorder that remembers every call."""

    def __init__(self) -> None:
        self.reports: list[tuple[str, HealthStatus, float]] = []
        self.components: list[tuple[str, str, HealthStatus, float]] = []

    def record_health_report(
        self, scope: str, status: HealthStatus, duration_seconds: float
    ) -> None:
        self.reports.append((scope, status, duration_seconds))

    def record_health_component(
        self, scope: str, component: HealthComponentReport, duration_seconds: float
    ) -> None:
        self.components.append((scope, component.name, component.status, duration_seconds))


def test_record_metrics_calls_the_recorder_in_order() -> None:
    recorder = RecordingMetrics()
    assert isinstance(recorder, HealthMetricsRecorder)
    report = SystemHealthReport(
        [
            HealthComponentReport.healthy("database", "ok").with_duration(timedelta(seconds=0.5)),
            HealthComponentReport.degraded("cache", "slow"),
        ],
        timedelta(seconds=2),
    )
    report.record_metrics(HealthCheckScope.READINESS, recorder)
    report.record_metrics("diagnostics", recorder)
    assert recorder.reports == [
        ("readiness", HealthStatus.DEGRADED, 2.0),
        ("diagnostics", HealthStatus.DEGRADED, 2.0),
    ]
    assert recorder.components == [
        ("readiness", "database", HealthStatus.HEALTHY, 0.5),
        ("readiness", "cache", HealthStatus.DEGRADED, 0.0),
        ("diagnostics", "database", HealthStatus.HEALTHY, 0.5),
        ("diagnostics", "cache", HealthStatus.DEGRADED, 0.0),
    ]
