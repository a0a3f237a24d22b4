"""Event-loop lag gauges, read from a :class:`~aster_forge.runtime.EventLoopLagProbe`.

- ``event_loop_lag_seconds``: the lag of the probe's latest sample.
- ``event_loop_lag_max_seconds``: the largest lag since the probe started.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge

from ..runtime import EventLoopLagProbe

__all__ = ["register_event_loop_lag_metrics"]


def register_event_loop_lag_metrics(probe: EventLoopLagProbe, registry: CollectorRegistry) -> None:
    """Expose ``probe``'s readings on ``registry`` (read at every scrape, nothing to update).

    Args:
        probe: The running probe.
        registry: Where the two gauges are registered.
    """
    last = Gauge(
        "event_loop_lag_seconds",
        "How late the event loop ran the probe's latest timer (a blocking callback's cost).",
        registry=registry,
    )
    last.set_function(lambda: probe.last_lag_seconds)
    most = Gauge(
        "event_loop_lag_max_seconds",
        "The largest event-loop lag the probe has seen.",
        registry=registry,
    )
    most.set_function(lambda: probe.max_lag_seconds)
