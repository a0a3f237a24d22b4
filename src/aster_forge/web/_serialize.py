"""JSON projections of runtime and catalog objects for the admin API.

Every function returns plain ``dict``/``list``/``str``/number/``None`` values; times
are ISO 8601 strings with their UTC offset, durations are ``*_seconds`` floats.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from ..runtime import RuntimeComponentRegistry, ShutdownReport, StartupReport
from ..runtime._internal import RuntimeComponentDescriptor
from ..runtime.errors import RuntimeComponentGraphError
from ..tasks._internal import ScheduledTaskRecord

__all__ = [
    "component_graph_json",
    "iso",
    "scheduled_task_json",
    "seconds",
    "shutdown_report_json",
    "startup_report_json",
    "wire",
]


def iso(value: datetime | None) -> str | None:
    """Return ``value.isoformat()`` or ``None``."""
    return None if value is None else value.isoformat()


def seconds(value: timedelta | None) -> float | None:
    """Return ``value.total_seconds()`` or ``None``."""
    return None if value is None else value.total_seconds()


def wire(value: object) -> Any:
    """Return an enum member's wire value; other values unchanged."""
    return value.value if isinstance(value, enum.Enum) else value


def descriptor_json(descriptor: RuntimeComponentDescriptor) -> dict[str, Any]:
    """Return one component descriptor as JSON."""
    return {
        "name": descriptor.name,
        "kind": descriptor.kind.value,
        "depends_on": list(descriptor.depends_on),
        "health_checks": list(descriptor.health_checks),
        "startup_phases": [
            {"phase": p.phase, "policy": p.policy.value} for p in descriptor.startup_phases
        ],
        "shutdown_phases": [
            {"phase": p.phase, "timeout_seconds": seconds(p.timeout)}
            for p in descriptor.shutdown_phases
        ],
        "tasks": list(descriptor.tasks),
    }


def _levels(descriptors: Sequence[RuntimeComponentDescriptor]) -> dict[str, int]:
    # Longest dependency chain below each component (Kahn's algorithm, no recursion so
    # long chains are fine); components on a cycle keep level 0.
    names = {d.name for d in descriptors}
    deps = {d.name: {x for x in d.depends_on if x in names and x != d.name} for d in descriptors}
    dependants: dict[str, list[str]] = {name: [] for name in names}
    for name, items in deps.items():
        for dep in items:
            dependants[dep].append(name)
    waiting = {name: len(items) for name, items in deps.items()}
    levels = dict.fromkeys(names, 0)
    ready = [name for name, count in waiting.items() if count == 0]
    while ready:
        name = ready.pop()
        for follower in dependants[name]:
            levels[follower] = max(levels[follower], levels[name] + 1)
            waiting[follower] -= 1
            if waiting[follower] == 0:
                ready.append(follower)
    return levels


def component_graph_json(registry: RuntimeComponentRegistry) -> dict[str, Any]:
    """Return the components, their dependency edges, orders and validation result.

    ``edges`` point from a component to a dependency (``database -> background_tasks``
    means the database shuts down after the background tasks). ``level`` is the
    length of the longest dependency chain below a component, for layered drawing.
    """
    descriptors = registry.descriptors()
    levels = _levels(descriptors)
    error: dict[str, Any] | None = None
    try:
        registry.validate()
    except RuntimeComponentGraphError as exc:
        error = {
            "message": str(exc),
            "missing": [{"component": c, "dependency": d} for c, d in exc.missing],
            "cycle": list(exc.cycle),
        }
    components = []
    for descriptor in descriptors:
        item = descriptor_json(descriptor)
        item["level"] = levels.get(descriptor.name, 0)
        components.append(item)
    return {
        "components": components,
        "edges": [{"from": d.name, "to": dep} for d in descriptors for dep in d.depends_on],
        "shutdown_order": list(registry.shutdown_order()) if error is None else [],
        "startup_order": list(registry.startup_order()) if error is None else [],
        "valid": error is None,
        "error": error,
    }


def startup_report_json(report: StartupReport | None) -> dict[str, Any] | None:
    """Return a startup report as JSON (``None`` when startup has not ended)."""
    return None if report is None else report.to_json_dict()


def shutdown_report_json(report: ShutdownReport | None) -> dict[str, Any] | None:
    """Return a shutdown report as JSON (``None`` when shutdown has not ended)."""
    return None if report is None else report.to_json_dict()


def scheduled_task_json(record: ScheduledTaskRecord, now: datetime) -> dict[str, Any]:
    """Return one scheduled catalog row as JSON.

    ``claimed`` is true while a claim is live at ``now``; ``claimed_by`` is the
    current claim owner (kept while the claim is live, cleared on completion).
    ``schedule`` says what the schedule is for people (``"every 5m"``, or the cron
    expression and timezone); ``cron``/``cron_timezone`` are set on cron rows only.
    """
    live = (
        record.claimed_by is not None
        and record.claim_expires_at is not None
        and record.claim_expires_at > now
    )
    return {
        "id": record.task_id,
        "namespace": record.namespace,
        "name": record.name,
        "interval_seconds": record.interval.total_seconds(),
        "schedule": record.schedule_text,
        "cron": record.cron_expression,
        "cron_timezone": record.cron_timezone,
        "next_run_at": iso(record.next_run_at),
        "due": record.next_run_at <= now,
        "claimed": live,
        "claimed_by": record.claimed_by,
        "claim_expires_at": iso(record.claim_expires_at),
        "last_claimed_at": iso(record.last_claimed_at),
        "last_run_status": wire(record.last_run_status),
        "last_run_error": record.last_run_error,
        "last_run_duration_seconds": seconds(record.last_run_duration),
        "last_run_finished_at": iso(record.last_run_finished_at),
        "run_count": record.run_count,
        "created_at": iso(record.created_at),
        "updated_at": iso(record.updated_at),
    }


def scheduled_tasks_json(records: Iterable[ScheduledTaskRecord], now: datetime) -> dict[str, Any]:
    """Return ``{"now": ..., "items": [...]}`` for the scheduled catalog."""
    return {"now": now.isoformat(), "items": [scheduled_task_json(r, now) for r in records]}
