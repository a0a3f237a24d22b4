"""``forge.asgi_app()``: dashboard, admin API, health and metrics of a forge (extra ``web``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.requests import Request

from ..metrics import PrometheusDispatchStatsCollector, PrometheusHealthMetricsRecorder
from ..runtime import HealthCheckScope
from ..web import AdminSources, create_app
from ._metrics import ForgeQueueCollector

if TYPE_CHECKING:
    from ._app import Forge

__all__ = ["forge_asgi_app"]


def forge_asgi_app(
    forge: Forge,
    *,
    admin_token: str | None,
    auth: Callable[[Request], Awaitable[bool]] | None,
    allowed_hosts: Sequence[str] | None,
    title: str | None,
) -> Starlette:
    """The composed web app of ``forge``, mountable under any prefix.

    Health follows the process's role (:meth:`Forge.run_health`): a web process is
    live, and ready while its database answers; a worker process runs its runtime's
    checks. The dispatcher view and dispatch metrics follow the running worker; the
    queue gauges are read from the store at each scrape (see ``_metrics``).
    """
    backend = forge.backend

    def stats() -> Any:
        dispatcher = forge.current_dispatcher()
        return None if dispatcher is None else dispatcher.stats

    registry = CollectorRegistry()
    recorder = PrometheusHealthMetricsRecorder(registry)
    PrometheusDispatchStatsCollector(stats, registry)
    queue = ForgeQueueCollector(forge, registry)
    sources = AdminSources(
        task_store=backend.task_store,
        scheduled_store=backend.scheduled_store,
        leases=backend.lease_store,
        dispatcher=forge.current_dispatcher,
        lanes=tuple(forge.lanes),
        cluster_limits=forge.lane_cluster_limits,
        partition_limits=forge.lane_partition_limits,
        rate_limits=forge.lane_rate_limits,
        partition_rate_limits=forge.lane_partition_rate_limits,
        title=title if title is not None else forge.name,
    )
    return create_app(
        sources,
        health=forge.run_health,
        metrics_registry=registry,
        health_recorder=recorder,
        scrape_health_scope=HealthCheckScope.READINESS,
        before_scrape=queue.refresh,
        admin_token=admin_token,
        auth=auth,
        allowed_hosts=allowed_hosts,
    )
