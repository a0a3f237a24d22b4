"""prometheus_client implementation of :class:`~aster_forge.runtime.HealthMetricsRecorder`.

Metric names and labels are the seed's, low-cardinality by design:

- ``health_report_status{scope}``: aggregate status (healthy=0, degraded=1, unhealthy=2).
- ``health_report_duration_seconds{scope,status}``: wall time of the last run.
- ``health_component_status{scope,component}``: component status (same encoding).
- ``health_component_duration_seconds{scope,component,status}``: last check duration.

The duration gauges carry the status as a label; when a scope's (or component's)
status changes, the series for the previous status is removed so each scope and
component exposes exactly one current duration series.
"""

from __future__ import annotations

import contextlib

from prometheus_client import CollectorRegistry, Gauge

from ..runtime import HealthComponentReport, HealthStatus

__all__ = ["PrometheusHealthMetricsRecorder"]

_STATUSES = tuple(s.value for s in HealthStatus)


class PrometheusHealthMetricsRecorder:
    """Records health reports as Prometheus gauges on a caller-supplied registry.

    Use with :meth:`~aster_forge.runtime.SystemHealthReport.record_metrics`::

        registry = CollectorRegistry()
        recorder = PrometheusHealthMetricsRecorder(registry)
        report.record_metrics(HealthCheckScope.READINESS, recorder)

    Args:
        registry: Where the four gauges are registered. Registering two recorders on
            one registry raises ``ValueError`` (duplicate timeseries), as
            prometheus_client does for any duplicate metric.
    """

    __slots__ = (
        "_component_duration",
        "_component_status",
        "_registry",
        "_report_duration",
        "_report_status",
    )

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry
        self._report_status = Gauge(
            "health_report_status",
            "Aggregate health status per scope (healthy=0, degraded=1, unhealthy=2).",
            ["scope"],
            registry=registry,
        )
        self._report_duration = Gauge(
            "health_report_duration_seconds",
            "Wall time of the last health run per scope.",
            ["scope", "status"],
            registry=registry,
        )
        self._component_status = Gauge(
            "health_component_status",
            "Component health status per scope (healthy=0, degraded=1, unhealthy=2).",
            ["scope", "component"],
            registry=registry,
        )
        self._component_duration = Gauge(
            "health_component_duration_seconds",
            "Duration of the last health check per scope and component.",
            ["scope", "component", "status"],
            registry=registry,
        )

    @property
    def registry(self) -> CollectorRegistry:
        """The registry the gauges live on."""
        return self._registry

    def record_health_report(
        self, scope: str, status: HealthStatus, duration_seconds: float
    ) -> None:
        """Set the aggregate status and run duration for ``scope``."""
        self._report_status.labels(scope).set(status.metric_value())
        current = status.value
        for other in _STATUSES:
            if other != current:
                _remove(self._report_duration, scope, other)
        self._report_duration.labels(scope, current).set(duration_seconds)

    def record_health_component(
        self, scope: str, component: HealthComponentReport, duration_seconds: float
    ) -> None:
        """Set one component's status and check duration for ``scope``."""
        name = component.name
        self._component_status.labels(scope, name).set(component.status.metric_value())
        current = component.status.value
        for other in _STATUSES:
            if other != current:
                _remove(self._component_duration, scope, name, other)
        self._component_duration.labels(scope, name, current).set(duration_seconds)


def _remove(gauge: Gauge, *labels: str) -> None:
    # prometheus_client raises KeyError when the series was never created.
    with contextlib.suppress(KeyError):
        gauge.remove(*labels)
