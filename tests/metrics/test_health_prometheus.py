"""Prometheus health recorder: exposition parsed back with prometheus_client's parser."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from datetime import timedelta

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from aster_forge.metrics import PrometheusHealthMetricsRecorder, register_event_loop_lag_metrics
from aster_forge.runtime import (
    EventLoopLagProbe,
    HealthCheckOptions,
    HealthCheckRegistry,
    HealthCheckScope,
    HealthComponentReport,
    SystemHealthReport,
)
from aster_forge.runtime.protocols import HealthMetricsRecorder

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(registry: CollectorRegistry) -> Samples:
    """Render the exposition text and parse it back into {(name, labels): value}."""
    text = generate_latest(registry).decode("utf-8")
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def report(database: HealthComponentReport, cache: HealthComponentReport) -> SystemHealthReport:
    return SystemHealthReport((database, cache), timedelta(milliseconds=40))


def test_recorder_satisfies_the_protocol() -> None:
    recorder = PrometheusHealthMetricsRecorder(CollectorRegistry())
    assert isinstance(recorder, HealthMetricsRecorder)


def test_exposition_has_the_seed_metric_names_labels_and_values() -> None:
    registry = CollectorRegistry()
    recorder = PrometheusHealthMetricsRecorder(registry)
    assert recorder.registry is registry
    report(
        HealthComponentReport.healthy("database", "ok").with_duration(timedelta(milliseconds=12)),
        HealthComponentReport.degraded("cache", "fallback").with_duration(timedelta(seconds=2)),
    ).record_metrics(HealthCheckScope.READINESS, recorder)

    assert scrape(registry) == {
        ("health_report_status", (("scope", "readiness"),)): 1.0,
        ("health_report_duration_seconds", (("scope", "readiness"), ("status", "degraded"))): 0.04,
        ("health_component_status", (("component", "database"), ("scope", "readiness"))): 0.0,
        ("health_component_status", (("component", "cache"), ("scope", "readiness"))): 1.0,
        (
            "health_component_duration_seconds",
            (("component", "database"), ("scope", "readiness"), ("status", "healthy")),
        ): 0.012,
        (
            "health_component_duration_seconds",
            (("component", "cache"), ("scope", "readiness"), ("status", "degraded")),
        ): 2.0,
    }


def test_status_change_replaces_the_duration_series() -> None:
    registry = CollectorRegistry()
    recorder = PrometheusHealthMetricsRecorder(registry)
    ok = HealthComponentReport.healthy("database", "ok").with_duration(timedelta(seconds=1))
    down = HealthComponentReport.unhealthy("database", "down").with_duration(timedelta(seconds=3))
    SystemHealthReport((ok,), timedelta(seconds=1)).record_metrics("diagnostics", recorder)
    SystemHealthReport((down,), timedelta(seconds=3)).record_metrics("diagnostics", recorder)
    samples = scrape(registry)
    assert samples[("health_report_status", (("scope", "diagnostics"),))] == 2.0
    durations = {k: v for k, v in samples.items() if k[0].endswith("_duration_seconds")}
    assert durations == {
        (
            "health_report_duration_seconds",
            (("scope", "diagnostics"), ("status", "unhealthy")),
        ): 3.0,
        (
            "health_component_duration_seconds",
            (("component", "database"), ("scope", "diagnostics"), ("status", "unhealthy")),
        ): 3.0,
    }


def test_scopes_are_separate_series() -> None:
    registry = CollectorRegistry()
    recorder = PrometheusHealthMetricsRecorder(registry)
    SystemHealthReport((HealthComponentReport.healthy("db", "ok"),)).record_metrics(
        HealthCheckScope.LIVENESS, recorder
    )
    SystemHealthReport((HealthComponentReport.unhealthy("db", "down"),)).record_metrics(
        HealthCheckScope.DIAGNOSTICS, recorder
    )
    samples = scrape(registry)
    assert samples[("health_report_status", (("scope", "liveness"),))] == 0.0
    assert samples[("health_report_status", (("scope", "diagnostics"),))] == 2.0


async def test_a_real_registry_run_is_exported() -> None:
    async def slow() -> HealthComponentReport:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def ok() -> HealthComponentReport:
        return HealthComponentReport.healthy("database", "ok")

    checks = HealthCheckRegistry(cancel_grace=timedelta(milliseconds=30))
    checks.register_with_options("database", HealthCheckOptions.required(), ok)
    checks.register_with_options(
        "search", HealthCheckOptions.optional(timedelta(milliseconds=20)), slow
    )
    result = await checks.run_scope(HealthCheckScope.DIAGNOSTICS)
    registry = CollectorRegistry()
    result.record_metrics(HealthCheckScope.DIAGNOSTICS, PrometheusHealthMetricsRecorder(registry))
    samples = scrape(registry)
    assert samples[("health_report_status", (("scope", "diagnostics"),))] == 1.0
    assert (
        samples[("health_component_status", (("component", "search"), ("scope", "diagnostics")))]
        == 1.0
    )
    key = (
        "health_component_duration_seconds",
        (("component", "search"), ("scope", "diagnostics"), ("status", "degraded")),
    )
    assert samples[key] == pytest.approx(0.02)


def test_two_recorders_on_one_registry_are_rejected_by_prometheus_client() -> None:
    registry = CollectorRegistry()
    PrometheusHealthMetricsRecorder(registry)
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        PrometheusHealthMetricsRecorder(registry)


def test_core_packages_never_import_prometheus_client() -> None:
    code = (
        "import sys, aster_forge, aster_forge.runtime; "
        "assert 'prometheus_client' not in sys.modules, 'core imported prometheus_client'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_event_loop_lag_gauges_read_the_probe() -> None:
    registry = CollectorRegistry()
    probe = EventLoopLagProbe()
    register_event_loop_lag_metrics(probe, registry)
    assert registry.get_sample_value("event_loop_lag_seconds") == 0.0
    probe.record(0.75)
    probe.record(0.25)
    assert registry.get_sample_value("event_loop_lag_seconds") == 0.25
    assert registry.get_sample_value("event_loop_lag_max_seconds") == 0.75
