"""Health endpoints: ``/livez``, ``/readyz`` and ``/diagnostics``.

Each endpoint runs the matching :class:`~aster_forge.runtime.HealthCheckScope` and
answers 200 when the report is healthy or degraded, 503 when it is unhealthy. The
default body is the stable JSON of :meth:`SystemHealthReport.to_json_dict` (it
round-trips through :meth:`SystemHealthReport.from_json_dict`); ``?verbose`` gives a
Kubernetes-style text view instead::

    [+]database ok
    [+]cache degraded: redis unreachable, using in-process fallback
    [-]mail failed: health check timed out
    healthz check failed

Readiness turns not-ready (503) as soon as the shutdown token is cancelled, without
running the checks: the report then holds one synthetic ``shutdown`` component.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Protocol, runtime_checkable

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

from ..runtime import (
    AsterRuntime,
    CancellationToken,
    HealthCheckRegistry,
    HealthCheckScope,
    HealthComponentReport,
    HealthStatus,
    SystemHealthReport,
)
from ..runtime.protocols import HealthMetricsRecorder
from ._auth import AdminAuth, AdminDoor

__all__ = [
    "HEALTH_PATHS",
    "SHUTDOWN_COMPONENT",
    "SHUTDOWN_MESSAGE",
    "HealthRunner",
    "HealthSource",
    "health_app",
    "health_report",
    "health_routes",
    "render_health_text",
    "resolve_health_runner",
]

logger = logging.getLogger("aster_forge.web.health")

HEALTH_PATHS: dict[HealthCheckScope, str] = {
    HealthCheckScope.LIVENESS: "/livez",
    HealthCheckScope.READINESS: "/readyz",
    HealthCheckScope.DIAGNOSTICS: "/diagnostics",
}
"""The path each scope is served on."""

SHUTDOWN_COMPONENT = "shutdown"
"""The synthetic component a readiness report holds once shutdown has begun."""

SHUTDOWN_MESSAGE = "shutdown in progress"
"""Its fixed message."""

_RUN_FAILED_COMPONENT = "health"
_RUN_FAILED_MESSAGE = "health run failed"
# Scopes whose reports are bridged to metrics (the seed: after Readiness or Diagnostics).
_RECORDED = frozenset({HealthCheckScope.READINESS, HealthCheckScope.DIAGNOSTICS})
_FALSE_VALUES = frozenset({"0", "false", "no", "off"})
_NO_STORE = {"Cache-Control": "no-store"}


@runtime_checkable
class HealthRunner(Protocol):
    """Anything that runs the health checks of one scope.

    :class:`~aster_forge.runtime.RuntimeComponentRegistry` and
    :class:`~aster_forge.runtime.AsterRuntime` satisfy it directly.
    """

    async def run_health(self, scope: HealthCheckScope) -> SystemHealthReport:
        """Run the checks registered for ``scope`` and return the report."""
        ...


HealthSource = (
    HealthRunner | HealthCheckRegistry | Callable[[HealthCheckScope], Awaitable[SystemHealthReport]]
)
"""What a health endpoint can run: a runner, a bare registry, or an async callable."""


def resolve_health_runner(
    source: HealthSource,
) -> Callable[[HealthCheckScope], Awaitable[SystemHealthReport]]:
    """Return an async ``scope -> report`` callable for any :data:`HealthSource`.

    Raises:
        TypeError: ``source`` is none of the accepted kinds.
    """
    if isinstance(source, HealthCheckRegistry):
        return source.run_scope
    if isinstance(source, HealthRunner):
        return source.run_health
    if callable(source):
        return source
    raise TypeError(
        "health source must be a HealthCheckRegistry, an object with run_health(scope) "
        f"or an async callable, got {type(source).__name__}"
    )


def _one_line(text: str) -> str:
    # One check per line: a message with line breaks must not forge extra lines.
    return " ".join(text.split())


def render_health_text(report: SystemHealthReport) -> str:
    """Render ``report`` as the Kubernetes-style verbose text view.

    One line per component (``[+]name ok``, ``[+]name degraded: message`` or
    ``[-]name failed: message``) and a final ``healthz check passed`` (healthy or
    degraded) or ``healthz check failed`` (unhealthy).
    """
    lines: list[str] = []
    for component in report.components:
        name = _one_line(component.name)
        if component.status is HealthStatus.HEALTHY:
            lines.append(f"[+]{name} ok")
        elif component.status is HealthStatus.DEGRADED:
            lines.append(f"[+]{name} degraded: {_one_line(component.message)}")
        else:
            lines.append(f"[-]{name} failed: {_one_line(component.message)}")
    passed = report.status() is not HealthStatus.UNHEALTHY
    lines.append(f"healthz check {'passed' if passed else 'failed'}")
    return "\n".join(lines) + "\n"


def _verbose(request: Request) -> bool:
    if "verbose" not in request.query_params:
        return False
    return request.query_params["verbose"].strip().lower() not in _FALSE_VALUES


def _respond(request: Request, report: SystemHealthReport) -> Response:
    code = 503 if report.status() is HealthStatus.UNHEALTHY else 200
    if _verbose(request):
        return PlainTextResponse(render_health_text(report), status_code=code, headers=_NO_STORE)
    return JSONResponse(report.to_json_dict(), status_code=code, headers=_NO_STORE)


def _synthetic(name: str, message: str) -> SystemHealthReport:
    return SystemHealthReport(
        (HealthComponentReport.unhealthy(name, message).with_duration(timedelta(0)),),
        duration=timedelta(0),
    )


def _endpoint(
    scope: HealthCheckScope,
    run: Callable[[HealthCheckScope], Awaitable[SystemHealthReport]],
    shutdown_token: CancellationToken | None,
    recorder: HealthMetricsRecorder | None,
) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        return _respond(request, await health_report(scope, run, shutdown_token, recorder))

    return endpoint


async def health_report(
    scope: HealthCheckScope,
    run: Callable[[HealthCheckScope], Awaitable[SystemHealthReport]],
    shutdown_token: CancellationToken | None,
    recorder: HealthMetricsRecorder | None = None,
) -> SystemHealthReport:
    """Run one scope as the endpoints do: shutdown and a broken runner become reports."""
    if (
        scope is HealthCheckScope.READINESS
        and shutdown_token is not None
        and shutdown_token.cancelled
    ):
        return _synthetic(SHUTDOWN_COMPONENT, SHUTDOWN_MESSAGE)
    try:
        report = await run(scope)
    except Exception:
        # The registry maps check failures itself; this is the runner breaking.
        logger.exception("health run for scope %s failed", scope.value)
        return _synthetic(_RUN_FAILED_COMPONENT, _RUN_FAILED_MESSAGE)
    if recorder is not None and scope in _RECORDED:
        report.record_metrics(scope, recorder)
    return report


def health_routes(
    source: HealthSource,
    *,
    shutdown_token: CancellationToken | None = None,
    recorder: HealthMetricsRecorder | None = None,
    scopes: Sequence[HealthCheckScope] = tuple(HealthCheckScope),
    admin_token: str | None = None,
    auth: AdminAuth | None = None,
) -> list[BaseRoute]:
    """Return Starlette routes for the health endpoints, to add to a product's app.

    Args:
        source: What runs the checks (see :data:`HealthSource`). An
            :class:`~aster_forge.runtime.AsterRuntime` also supplies the default
            ``shutdown_token``.
        shutdown_token: Once cancelled, ``/readyz`` answers 503 without running checks.
        recorder: When given, readiness and diagnostics reports are recorded on it
            (e.g. a :class:`~aster_forge.metrics.PrometheusHealthMetricsRecorder`).
        scopes: Which endpoints to serve (default: all three, see :data:`HEALTH_PATHS`).
        admin_token: When set, ``/diagnostics`` requires it as a bearer token (its
            details are operator information); the probes stay open.
        auth: The product's own admin check; when set, ``/diagnostics`` also accepts
            a request it lets in (see :func:`~aster_forge.web.admin_routes`).

    Raises:
        TypeError: ``source`` is not a health source, ``auth`` is not callable.
        ValueError: A malformed ``admin_token``.
    """
    run = resolve_health_runner(source)
    door = AdminDoor(token=admin_token, auth=auth)
    if shutdown_token is None and isinstance(source, AsterRuntime):
        shutdown_token = source.shutdown_token
    routes: list[BaseRoute] = []
    for scope in scopes:
        endpoint = _endpoint(scope, run, shutdown_token, recorder)
        if scope is HealthCheckScope.DIAGNOSTICS:
            endpoint = door.protect(endpoint)
        routes.append(
            Route(HEALTH_PATHS[scope], endpoint, methods=["GET"], name=f"health_{scope.value}")
        )
    return routes


def health_app(
    source: HealthSource,
    *,
    shutdown_token: CancellationToken | None = None,
    recorder: HealthMetricsRecorder | None = None,
    admin_token: str | None = None,
) -> Starlette:
    """Return a Starlette app serving ``/livez``, ``/readyz`` and ``/diagnostics``.

    Mount it in a product app (``Mount("/", app=health_app(runtime))``) or serve it
    alone. Arguments are those of :func:`health_routes`.

    Example:
        >>> from aster_forge.runtime import HealthCheckRegistry
        >>> app = health_app(HealthCheckRegistry())
        >>> sorted(route.path for route in app.routes)
        ['/diagnostics', '/livez', '/readyz']
    """
    return Starlette(
        routes=health_routes(
            source, shutdown_token=shutdown_token, recorder=recorder, admin_token=admin_token
        )
    )
