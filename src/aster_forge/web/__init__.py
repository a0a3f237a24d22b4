"""Starlette app factories: health endpoints, metrics, admin API, dashboard (extra ``web``).

Importing this package requires ``starlette`` and ``prometheus_client``; the core
packages never import it.
"""

from __future__ import annotations

from ._admin import admin_routes
from ._sources import AdminSources, LaneLimits
from ._app import admin_app, create_app
from ._auth import ADMIN_TOKEN_ENV, BearerTokenGuard, HostAllowList
from ._dashboard import dashboard_routes
from ._health import (
    HealthRunner,
    HealthSource,
    health_app,
    health_routes,
    render_health_text,
)
from ._leases import RuntimeLeaseSource, RuntimeLeases, RuntimeLeaseTableReader, RuntimeLeaseView
from ._metrics import metrics_app, metrics_routes
from ._openapi import openapi_document

__all__ = [
    "ADMIN_TOKEN_ENV",
    "AdminSources",
    "BearerTokenGuard",
    "HealthRunner",
    "HealthSource",
    "HostAllowList",
    "LaneLimits",
    "RuntimeLeaseSource",
    "RuntimeLeaseTableReader",
    "RuntimeLeaseView",
    "RuntimeLeases",
    "admin_app",
    "admin_routes",
    "create_app",
    "dashboard_routes",
    "health_app",
    "health_routes",
    "metrics_app",
    "metrics_routes",
    "openapi_document",
    "render_health_text",
]
