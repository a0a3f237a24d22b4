"""/livez, /readyz, /diagnostics: scopes, status codes, JSON shape, verbose text, shutdown."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from prometheus_client import CollectorRegistry

from aster_forge.metrics import PrometheusHealthMetricsRecorder
from aster_forge.runtime import (
    AsterRuntime,
    CancellationToken,
    HealthCheckOptions,
    HealthCheckRegistry,
    HealthCheckScope,
    HealthCheckScopes,
    HealthComponentDetailValue,
    HealthComponentReport,
    RuntimeComponentKind,
    RuntimeComponentRegistry,
    SystemHealthReport,
)
from aster_forge.web import health_routes
from aster_forge.web._health import (
    SHUTDOWN_COMPONENT,
    SHUTDOWN_MESSAGE,
    health_app,
    render_health_text,
)

from ._support import AUTH, TOKEN, client

SECOND = timedelta(seconds=1)


class Calls:
    """Counts how often each check ran."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def hit(self, name: str) -> None:
        self.counts[name] = self.counts.get(name, 0) + 1


def registry_with(
    calls: Calls,
    *,
    cache: str = "healthy",
    database: str = "healthy",
) -> HealthCheckRegistry:
    """process (liveness), database (readiness+diagnostics), cache (diagnostics, optional)."""
    registry = HealthCheckRegistry()

    async def process() -> HealthComponentReport:
        calls.hit("process")
        return HealthComponentReport.healthy("process", "event loop responsive")

    async def database_check() -> HealthComponentReport:
        calls.hit("database")
        if database == "unhealthy":
            return HealthComponentReport.unhealthy("database", "ping failed")
        return HealthComponentReport.healthy("database", "database ping succeeded").with_detail(
            "latency", HealthComponentDetailValue.duration_millis(3)
        )

    async def cache_check() -> HealthComponentReport:
        calls.hit("cache")
        if cache == "degraded":
            return HealthComponentReport.degraded("cache", "redis down,\nusing local fallback")
        return (
            HealthComponentReport.healthy("cache", "cache ok")
            .with_detail("backend", HealthComponentDetailValue.text("redis"))
            .with_detail("queue_depth", HealthComponentDetailValue.unsigned(12))
        )

    registry.register_with_options(
        "process",
        HealthCheckOptions.required(SECOND).with_scopes(HealthCheckScopes.liveness()),
        process,
    )
    registry.register_with_options(
        "database",
        HealthCheckOptions.required(SECOND).with_scopes(
            HealthCheckScopes.readiness_and_diagnostics()
        ),
        database_check,
    )
    registry.register_with_options(
        "cache",
        HealthCheckOptions.optional(SECOND).with_scopes(HealthCheckScopes.diagnostics()),
        cache_check,
    )
    return registry


async def test_each_endpoint_runs_its_scope() -> None:
    calls = Calls()
    async with client(health_app(registry_with(calls))) as http:
        live = await http.get("/livez")
        ready = await http.get("/readyz")
        diag = await http.get("/diagnostics")
    assert [c["name"] for c in live.json()["components"]] == ["process"]
    assert [c["name"] for c in ready.json()["components"]] == ["database"]
    assert [c["name"] for c in diag.json()["components"]] == ["database", "cache"]
    assert calls.counts == {"process": 1, "database": 2, "cache": 1}
    assert {live.status_code, ready.status_code, diag.status_code} == {200}
    assert diag.headers["cache-control"] == "no-store"


async def test_json_is_the_stable_report_shape_with_typed_details() -> None:
    async with client(health_app(registry_with(Calls()))) as http:
        response = await http.get("/diagnostics")
    body = response.json()
    assert response.headers["content-type"].startswith("application/json")
    assert set(body) == {"status", "duration_seconds", "components"}
    assert body["status"] == "healthy"
    cache = body["components"][1]
    assert cache["details"] == [
        {"key": "backend", "value": {"type": "text", "value": "redis"}},
        {"key": "queue_depth", "value": {"type": "unsigned", "value": 12}},
    ]
    assert body["components"][0]["details"] == [
        {"key": "latency", "value": {"type": "duration_millis", "value": 3}}
    ]
    # The body parses back strictly into the same report model.
    report = SystemHealthReport.from_json_dict(body)
    assert report.summary() == "database healthy, cache healthy"
    assert report.components[1].detail("queue_depth") == HealthComponentDetailValue.unsigned(12)


async def test_degraded_is_200_and_unhealthy_is_503() -> None:
    async with client(health_app(registry_with(Calls(), cache="degraded"))) as http:
        degraded = await http.get("/diagnostics")
    assert degraded.status_code == 200
    assert degraded.json()["status"] == "degraded"
    async with client(health_app(registry_with(Calls(), database="unhealthy"))) as http:
        ready = await http.get("/readyz")
        live = await http.get("/livez")
    assert ready.status_code == 503
    assert ready.json()["status"] == "unhealthy"
    assert live.status_code == 200


async def test_verbose_text_view() -> None:
    app = health_app(registry_with(Calls(), cache="degraded", database="unhealthy"))
    async with client(app) as http:
        response = await http.get("/diagnostics?verbose")
        ok = await http.get("/livez", params={"verbose": "1"})
        json_again = await http.get("/livez", params={"verbose": "false"})
    assert response.status_code == 503
    assert response.headers["content-type"].startswith("text/plain")
    assert response.text == (
        "[-]database failed: ping failed\n"
        "[+]cache degraded: redis down, using local fallback\n"
        "healthz check failed\n"
    )
    assert ok.text == "[+]process ok\nhealthz check passed\n"
    assert json_again.json()["status"] == "healthy"


def test_render_text_of_an_empty_report_passes() -> None:
    assert render_health_text(SystemHealthReport()) == "healthz check passed\n"


async def test_timeouts_map_to_fixed_messages() -> None:
    registry = HealthCheckRegistry()
    release = asyncio.Event()

    async def stuck() -> HealthComponentReport:
        await release.wait()
        return HealthComponentReport.healthy("stuck", "never")

    registry.register_with_options(
        "stuck", HealthCheckOptions.required(timedelta(milliseconds=20)), stuck
    )
    try:
        async with client(health_app(registry)) as http:
            response = await http.get("/readyz?verbose")
    finally:
        release.set()
        await registry.aclose()
    assert response.status_code == 503
    lines = response.text.splitlines()
    assert lines[0].startswith("[-]stuck failed: ")
    assert lines[-1] == "healthz check failed"


async def test_readiness_turns_503_on_shutdown_without_running_checks() -> None:
    calls = Calls()
    token = CancellationToken()
    app = health_app(registry_with(calls), shutdown_token=token)
    async with client(app) as http:
        assert (await http.get("/readyz")).status_code == 200
        token.cancel()
        ready = await http.get("/readyz")
        verbose = await http.get("/readyz?verbose")
        live = await http.get("/livez")
    assert ready.status_code == 503
    assert ready.json()["components"] == [
        {
            "name": SHUTDOWN_COMPONENT,
            "status": "unhealthy",
            "message": SHUTDOWN_MESSAGE,
            "duration_seconds": 0.0,
            "details": [],
        }
    ]
    assert verbose.text == "[-]shutdown failed: shutdown in progress\nhealthz check failed\n"
    assert calls.counts["database"] == 1  # only the request before shutdown ran it
    assert live.status_code == 200


async def test_runtime_source_brings_its_shutdown_token() -> None:
    async def ping() -> HealthComponentReport:
        return HealthComponentReport.healthy("database", "ok")

    def register(registry: RuntimeComponentRegistry) -> None:
        registry.component_health_with_options(
            "database",
            RuntimeComponentKind.DATABASE,
            "database",
            HealthCheckOptions.required(SECOND).with_scopes(HealthCheckScopes.readiness()),
            ping,
        )

    from aster_forge.runtime import runtime_component

    runtime = AsterRuntime(components=[runtime_component(register)], install_signal_handlers=False)
    async with client(health_app(runtime)) as http:
        before = await http.get("/readyz")
        runtime.request_stop()
        after = await http.get("/readyz")
    assert before.status_code == 200
    assert before.json()["components"][0]["name"] == "database"
    assert after.status_code == 503


async def test_a_broken_runner_answers_503_with_a_fixed_text(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def broken(scope: HealthCheckScope) -> SystemHealthReport:
        raise RuntimeError("secret connection string in message")

    async with client(health_app(broken)) as http:
        response = await http.get("/diagnostics")
    assert response.status_code == 503
    assert response.json()["components"][0]["message"] == "health run failed"
    assert "secret" not in response.text
    assert "health run for scope diagnostics failed" in caplog.text


async def test_readiness_and_diagnostics_are_recorded_as_metrics() -> None:
    prom = CollectorRegistry()
    recorder = PrometheusHealthMetricsRecorder(prom)
    app = health_app(registry_with(Calls(), cache="degraded"), recorder=recorder)
    async with client(app) as http:
        await http.get("/livez")
        await http.get("/readyz")
        await http.get("/diagnostics")
    assert prom.get_sample_value("health_report_status", {"scope": "readiness"}) == 0
    assert prom.get_sample_value("health_report_status", {"scope": "diagnostics"}) == 1
    assert prom.get_sample_value("health_report_status", {"scope": "liveness"}) is None
    assert (
        prom.get_sample_value(
            "health_component_status", {"scope": "diagnostics", "component": "cache"}
        )
        == 1
    )


async def test_diagnostics_can_require_the_admin_token_while_probes_stay_open() -> None:
    app = health_app(registry_with(Calls()), admin_token=TOKEN)
    async with client(app) as http:
        missing = await http.get("/diagnostics")
        wrong = await http.get("/diagnostics", headers={"Authorization": "Bearer nope"})
        right = await http.get("/diagnostics", headers=AUTH)
        probes = [await http.get("/livez"), await http.get("/readyz")]
    assert missing.status_code == wrong.status_code == 401
    assert missing.headers["www-authenticate"].startswith("Bearer")
    assert right.status_code == 200
    assert [p.status_code for p in probes] == [200, 200]


async def test_component_registry_source_and_a_subset_of_routes() -> None:
    registry = RuntimeComponentRegistry()
    from starlette.applications import Starlette

    app = Starlette(routes=health_routes(registry, scopes=[HealthCheckScope.LIVENESS]))
    async with client(app) as http:
        live = await http.get("/livez")
        ready = await http.get("/readyz")
    assert live.json() == {
        "status": "healthy",
        "duration_seconds": live.json()["duration_seconds"],
        "components": [],
    }
    assert ready.status_code == 404


def test_bad_source_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="health source"):
        health_app(object())  # type: ignore[arg-type]
