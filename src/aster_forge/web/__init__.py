"""Starlette app factories: health endpoints, metrics, admin API, dashboard (extra ``web``)."""

from __future__ import annotations

__all__: list[str] = []
