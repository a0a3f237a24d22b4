"""Prometheus bridge for health reports and dispatch stats (extra ``metrics``).

Importing this package requires ``prometheus_client`` (``pip install
'aster-forge[metrics]'``); the core packages never import it.
"""

from __future__ import annotations

# --- health ---
from ._health import PrometheusHealthMetricsRecorder

# --- dispatch stats ---
from ._dispatch import PrometheusDispatchStatsCollector

# --- event loop lag ---
from ._loop_lag import register_event_loop_lag_metrics

__all__ = [
    "PrometheusDispatchStatsCollector",
    "PrometheusHealthMetricsRecorder",
    "register_event_loop_lag_metrics",
]
