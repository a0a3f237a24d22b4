"""/metrics: exposition of health and dispatch metrics, scrape-time health refresh."""

from __future__ import annotations

from datetime import timedelta

import pytest
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from aster_forge.metrics import PrometheusDispatchStatsCollector, PrometheusHealthMetricsRecorder
from aster_forge.runtime import (
    CancellationToken,
    HealthCheckOptions,
    HealthCheckRegistry,
    HealthCheckScope,
    HealthComponentReport,
    HealthStatus,
)
from aster_forge.tasks import DispatchStatsRecorder
from aster_forge.web import create_app, metrics_app

from ._support import TOKEN, client


def parsed(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def registry_reporting(status: list[HealthStatus]) -> tuple[HealthCheckRegistry, list[int]]:
    runs = [0]
    registry = HealthCheckRegistry()

    async def database() -> HealthComponentReport:
        runs[0] += 1
        return HealthComponentReport("database", status[0], "db")

    registry.register_with_options(
        "database", HealthCheckOptions.required(timedelta(seconds=1)), database
    )
    return registry, runs


async def test_health_and_dispatch_metrics_in_one_exposition() -> None:
    prom = CollectorRegistry()
    recorder = PrometheusHealthMetricsRecorder(prom)
    stats = DispatchStatsRecorder(["media"])
    stats.record_started("media")
    PrometheusDispatchStatsCollector(stats, prom, lane_limits={"media": 2})
    health, _ = registry_reporting([HealthStatus.DEGRADED])
    app = create_app(
        health=health,
        metrics_registry=prom,
        health_recorder=recorder,
        admin_token=TOKEN,  # /metrics stays open for the scraper
    )
    async with client(app) as http:
        await http.get("/readyz")
        response = await http.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"] == CONTENT_TYPE_LATEST
    samples = parsed(response.text)
    assert samples[("health_report_status", frozenset({("scope", "readiness")}))] == 1
    component = frozenset({("scope", "readiness"), ("component", "database")})
    assert samples[("health_component_status", component)] == 1
    assert samples[("dispatch_in_flight", frozenset({("lane", "media")}))] == 1
    assert samples[("dispatch_lane_limit", frozenset({("lane", "media")}))] == 2


async def test_scrape_refreshes_the_chosen_health_scope() -> None:
    prom = CollectorRegistry()
    recorder = PrometheusHealthMetricsRecorder(prom)
    status = [HealthStatus.HEALTHY]
    health, runs = registry_reporting(status)
    token = CancellationToken()
    app = create_app(
        health=health,
        shutdown_token=token,
        metrics_registry=prom,
        health_recorder=recorder,
        scrape_health_scope=HealthCheckScope.READINESS,
    )
    key = ("health_report_status", frozenset({("scope", "readiness")}))
    async with client(app) as http:
        first = parsed((await http.get("/metrics")).text)
        status[0] = HealthStatus.UNHEALTHY
        second = parsed((await http.get("/metrics")).text)
        token.cancel()
        status[0] = HealthStatus.HEALTHY
        third = parsed((await http.get("/metrics")).text)
    assert (first[key], second[key]) == (0, 2)
    assert third[key] == 2  # shutting down: readiness is not re-run, values stay
    assert runs[0] == 2


async def test_a_failing_before_scrape_hook_still_serves_metrics(
    caplog: pytest.LogCaptureFixture,
) -> None:
    prom = CollectorRegistry()
    PrometheusDispatchStatsCollector(DispatchStatsRecorder(["media"]), prom)

    async def broken() -> None:
        raise RuntimeError("boom")

    async with client(metrics_app(prom, before_scrape=broken)) as http:
        response = await http.get("/metrics")
    assert response.status_code == 200
    assert "dispatch_in_flight" in response.text
    assert "metrics before_scrape hook failed" in caplog.text
