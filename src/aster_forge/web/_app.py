"""``create_app`` / ``admin_app``: the composed Starlette apps a product serves or mounts."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace

from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.routing import BaseRoute

from ..runtime import CancellationToken, HealthCheckScope
from ..runtime.protocols import HealthMetricsRecorder
from ._admin import admin_routes
from ._auth import AdminAuth, AdminDoor
from ._dashboard import dashboard_routes
from ._health import HealthSource, health_routes, resolve_health_runner
from ._metrics import metrics_routes
from ._sources import AdminSources

__all__ = ["admin_app", "create_app"]

logger = logging.getLogger("aster_forge.web.metrics")


def admin_app(
    sources: AdminSources,
    *,
    admin_token: str | None = None,
    auth: AdminAuth | None = None,
    dashboard: bool = True,
    allowed_hosts: Sequence[str] | None = None,
) -> Starlette:
    """Return the admin API under ``/api`` and (by default) the dashboard page at ``/``.

    The page makes every request relative to where it is served, so the app can be
    mounted under any prefix (``app.mount("/ops", admin_app(...))``).

    Args:
        sources: What the API reads from.
        admin_token: When set, every API endpoint accepts ``Authorization: Bearer
            <token>`` (401 without it or ``auth``, before anything is read or changed).
        auth: The product's own check (``async def auth(request) -> bool``); when set,
            every API endpoint accepts a request it lets in. With neither, changing
            tasks and reading their payloads answer a loopback client only (403).
        dashboard: Serve the dashboard page and its assets.
        allowed_hosts: ``Host`` names the API and page answer (403 otherwise);
            default the loopback names and the address the server is bound to. A
            deployment reached by a DNS name lists it (``["ops.example.com"]``).

    Raises:
        ValueError: A malformed ``admin_token`` or an empty allowed host.
        TypeError: ``allowed_hosts`` is a bare string, ``auth`` is not callable.
    """
    routes: list[BaseRoute] = admin_routes(
        sources, admin_token=admin_token, auth=auth, allowed_hosts=allowed_hosts
    )
    if dashboard:
        routes += dashboard_routes(allowed_hosts=allowed_hosts)
    return Starlette(routes=routes)


def create_app(
    sources: AdminSources | None = None,
    *,
    health: HealthSource | None = None,
    shutdown_token: CancellationToken | None = None,
    metrics_registry: CollectorRegistry | None = None,
    health_recorder: HealthMetricsRecorder | None = None,
    scrape_health_scope: HealthCheckScope | None = None,
    admin_token: str | None = None,
    auth: AdminAuth | None = None,
    dashboard: bool = True,
    allowed_hosts: Sequence[str] | None = None,
    before_scrape: Callable[[], Awaitable[object]] | None = None,
) -> Starlette:
    """Return one app with everything: health, metrics, admin API and dashboard.

    Routes: ``/livez``, ``/readyz``, ``/diagnostics``; ``/metrics`` (when
    ``metrics_registry`` is given); ``/api/...``; ``/`` and ``/static/...``.

    Args:
        sources: What the admin API reads from (default: nothing configured).
        health: What the health endpoints run; default ``sources.runtime``, else
            ``sources.components`` (no health endpoints when neither is set).
        shutdown_token: Makes ``/readyz`` answer 503 once cancelled; default the
            runtime's shutdown token.
        metrics_registry: Served at ``/metrics``.
        health_recorder: Readiness and diagnostics reports are recorded on it
            (normally a :class:`~aster_forge.metrics.PrometheusHealthMetricsRecorder`
            on ``metrics_registry``).
        scrape_health_scope: When set (with ``health_recorder``), every scrape of
            ``/metrics`` first runs this scope and records it, so the health gauges
            are fresh even when nobody calls the health endpoints. A readiness scrape
            during shutdown records nothing.
        admin_token: When set, the admin API and ``/diagnostics`` require it (or
            ``auth``) as a bearer token; ``/livez``, ``/readyz``, ``/metrics`` and the
            page's static assets stay open (the page asks for the token).
        auth: The product's own admin check (see :func:`admin_app`). With neither
            ``admin_token`` nor ``auth``, changing tasks and reading their payloads
            answer a loopback client only.
        dashboard: Serve the dashboard page.
        allowed_hosts: ``Host`` names the admin API and page answer (see
            :func:`admin_app`); the health and metrics endpoints answer any host.
        before_scrape: Awaited before each scrape of ``/metrics`` (after the health
            refresh), e.g. to read the figures a collector on the registry exposes; an
            exception is logged and the scrape still answers.

    Raises:
        ValueError: A malformed ``admin_token`` or an empty allowed host.
        TypeError: ``health`` is not a health source, ``allowed_hosts`` is a str, or
            ``auth`` is not callable.
    """
    AdminDoor(token=admin_token, auth=auth)  # refuse a bad token or auth before building
    sources = sources if sources is not None else AdminSources()
    if health is None:
        health = sources.health_source()
    elif sources.health is None:
        sources = replace(sources, health=health)
    if shutdown_token is None and sources.runtime is not None:
        shutdown_token = sources.runtime.shutdown_token
    routes: list[BaseRoute] = []
    if health is not None:
        routes += health_routes(
            health,
            shutdown_token=shutdown_token,
            recorder=health_recorder,
            admin_token=admin_token,
            auth=auth,
        )
    if metrics_registry is not None:
        hooks = [] if before_scrape is None else [before_scrape]
        if scrape_health_scope is not None and health is not None and health_recorder is not None:
            refresh = _scrape_health(health, scrape_health_scope, health_recorder, shutdown_token)
            hooks.insert(0, refresh)
        routes += metrics_routes(metrics_registry, before_scrape=_in_turn(hooks))
    routes += admin_routes(sources, admin_token=admin_token, auth=auth, allowed_hosts=allowed_hosts)
    if dashboard:
        routes += dashboard_routes(allowed_hosts=allowed_hosts)
    return Starlette(routes=routes)


def _in_turn(
    hooks: Sequence[Callable[[], Awaitable[object]]],
) -> Callable[[], Awaitable[None]] | None:
    """One hook awaiting ``hooks`` in order; a failing one is logged and the rest run."""
    if not hooks:
        return None

    async def run() -> None:
        for hook in hooks:
            try:
                await hook()
            except Exception:
                logger.exception("metrics before_scrape hook failed")

    return run


def _scrape_health(
    health: HealthSource,
    scope: HealthCheckScope,
    recorder: HealthMetricsRecorder,
    shutdown_token: CancellationToken | None,
) -> Callable[[], Awaitable[None]]:
    run = resolve_health_runner(health)

    async def refresh() -> None:
        if (
            scope is HealthCheckScope.READINESS
            and shutdown_token is not None
            and shutdown_token.cancelled
        ):
            return
        report = await run(scope)
        report.record_metrics(scope, recorder)

    return refresh
