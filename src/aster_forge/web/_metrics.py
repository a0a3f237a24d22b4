"""``/metrics``: Prometheus text exposition of a caller-owned ``CollectorRegistry``.

The registry holds whatever the product registered: the health gauges of
:class:`~aster_forge.metrics.PrometheusHealthMetricsRecorder`, the dispatch
families of :class:`~aster_forge.metrics.PrometheusDispatchStatsCollector`, and the
product's own metrics. Generation is CPU-only (no I/O), so it runs inline.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

__all__ = ["metrics_app", "metrics_routes"]

logger = logging.getLogger("aster_forge.web.metrics")


def metrics_routes(
    registry: CollectorRegistry,
    *,
    path: str = "/metrics",
    before_scrape: Callable[[], Awaitable[object]] | None = None,
) -> list[BaseRoute]:
    """Return the route serving ``registry`` in the Prometheus text format.

    Args:
        registry: The registry to expose.
        path: Where to serve it.
        before_scrape: Awaited before each scrape (e.g. run the readiness checks so
            the health gauges are fresh); an exception is logged and the scrape
            still answers with the current values.
    """

    async def endpoint(request: Request) -> Response:
        if before_scrape is not None:
            try:
                await before_scrape()
            except Exception:
                logger.exception("metrics before_scrape hook failed")
        return Response(
            generate_latest(registry),
            media_type=CONTENT_TYPE_LATEST,
            headers={"Cache-Control": "no-store"},
        )

    return [Route(path, endpoint, methods=["GET"], name="metrics")]


def metrics_app(
    registry: CollectorRegistry,
    *,
    before_scrape: Callable[[], Awaitable[object]] | None = None,
) -> Starlette:
    """Return a Starlette app serving ``registry`` at ``/metrics`` (see :func:`metrics_routes`)."""
    return Starlette(routes=metrics_routes(registry, before_scrape=before_scrape))
