"""Store and bridge protocols of :mod:`aster_forge.runtime`.

Products (or :mod:`aster_forge.db`, :mod:`aster_forge.metrics`) implement these;
:mod:`aster_forge.testing` ships in-memory implementations and conformance suites.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ._health import HealthComponentReport, HealthStatus

# --- health (issue 2): HealthMetricsRecorder ---


@runtime_checkable
class HealthMetricsRecorder(Protocol):
    """A metrics backend that health reports are bridged to.

    :meth:`SystemHealthReport.record_metrics` calls :meth:`record_health_report` once and
    :meth:`record_health_component` for each component. ``aster_forge.metrics`` ships a
    prometheus_client implementation; products may adapt their own backend. Keep labels
    low-cardinality: scope and component names, never messages.
    """

    def record_health_report(
        self, scope: str, status: HealthStatus, duration_seconds: float
    ) -> None:
        """Record the aggregate status and wall time of one run of ``scope``."""
        ...

    def record_health_component(
        self, scope: str, component: HealthComponentReport, duration_seconds: float
    ) -> None:
        """Record one component's status and check duration for ``scope``."""
        ...


# --- lease (issue 5): RuntimeLeaseStore ---
