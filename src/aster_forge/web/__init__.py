"""Starlette app factories: health endpoints, metrics, admin API, dashboard (extra ``web``).

Importing this package requires ``starlette`` and ``prometheus_client``; the core
packages never import it.
"""

from __future__ import annotations

from ._admin import admin_routes
from ._sources import AdminSources
from ._app import admin_app, create_app
from ._health import health_routes
from ._leases import RuntimeLeaseTableReader
from ._metrics import metrics_app, metrics_routes

__all__ = [
    "AdminSources",
    "RuntimeLeaseTableReader",
    "admin_app",
    "admin_routes",
    "create_app",
    "health_routes",
    "metrics_app",
    "metrics_routes",
]
