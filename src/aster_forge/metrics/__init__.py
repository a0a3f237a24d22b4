"""Prometheus bridge for health reports and dispatch stats (extra ``metrics``)."""

from __future__ import annotations

__all__: list[str] = []
