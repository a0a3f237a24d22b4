"""Prometheus bridge for health reports and dispatch stats (extra ``metrics``).

Importing this package requires ``prometheus_client`` (``pip install
'aster-forge[metrics]'``); the core packages never import it.
"""

from __future__ import annotations

# --- health ---
from ._health import PrometheusHealthMetricsRecorder

# --- dispatch stats ---
from ._dispatch import DispatchStatsSource, PrometheusDispatchStatsCollector, lane_label

# --- event loop lag ---
from ._loop_lag import register_event_loop_lag_metrics

__all__ = [
    "DispatchStatsSource",
    "PrometheusDispatchStatsCollector",
    "PrometheusHealthMetricsRecorder",
    "lane_label",
    "register_event_loop_lag_metrics",
]
