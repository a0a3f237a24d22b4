"""The live terminal view of ``aster-forge demo``: lanes, running tasks with step bars, schedules.

Reads the same stores the admin API reads (one snapshot per second); rendering never
touches the database. A failed read keeps the previous snapshot and shows the error.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import datetime

from rich.console import Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from aster_forge import BackgroundTaskRecord, TaskStatus
from aster_forge._demo import DEMO_NAMESPACE, LANE_LIMITS, DemoApp
from aster_forge.runtime import CancellationToken
from aster_forge.runtime._internal import RuntimeLeaseView, utc_now
from aster_forge.tasks._internal import (
    ScheduledTaskRecord,
    TaskLaneCounts,
    TaskStepInfo,
    TaskStepStatus,
    parse_task_steps_json,
)
from aster_forge.web import RuntimeLeaseTableReader

__all__ = ["LiveSnapshot", "render_snapshot", "run_live_view", "take_snapshot"]

logger = logging.getLogger("aster_forge.cli")

_DONE = (TaskStepStatus.SUCCEEDED, TaskStepStatus.SKIPPED)
_STATUS_STYLE = {
    "pending": "yellow",
    "running": "cyan",
    "succeeded": "green",
    "failed": "red",
    "cancelled": "magenta",
}


@dataclass(slots=True)
class LiveSnapshot:
    """What one refresh of the view shows."""

    taken_at: datetime
    lanes: list[TaskLaneCounts] = field(default_factory=list)
    running: list[BackgroundTaskRecord] = field(default_factory=list)
    recent: list[BackgroundTaskRecord] = field(default_factory=list)
    scheduled: list[ScheduledTaskRecord] = field(default_factory=list)
    leases: list[RuntimeLeaseView] = field(default_factory=list)
    error: str | None = None


async def take_snapshot(app: DemoApp, leases: RuntimeLeaseTableReader) -> LiveSnapshot:
    """Read lanes, running and recent tasks, schedules and leases (errors are kept)."""
    snap = LiveSnapshot(taken_at=utc_now())
    try:
        snap.lanes = list(await app.task_store.lane_counts([lane.value for lane in LANE_LIMITS]))
        snap.running = list(
            (await app.task_store.list_tasks(status=TaskStatus.RUNNING, limit=20)).items
        )
        snap.recent = [
            r for r in (await app.task_store.list_tasks(limit=30)).items if r.status.is_terminal
        ][:8]
        snap.scheduled = list(await app.scheduled_store.list_scheduled_tasks(DEMO_NAMESPACE))
        snap.leases = list((await leases.list_runtime_leases()).leases)
    except Exception as exc:
        snap.error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return snap


def _steps(record: BackgroundTaskRecord) -> tuple[TaskStepInfo, ...]:
    if not record.steps_json:
        return ()
    try:
        return parse_task_steps_json(record.steps_json)
    except ValueError:
        return ()


def _step_fraction(steps: tuple[TaskStepInfo, ...]) -> float:
    if not steps:
        return 0.0
    done = float(sum(1 for s in steps if s.status in _DONE))
    active = next((s for s in steps if s.status is TaskStepStatus.ACTIVE), None)
    if active is not None and active.progress_total > 0:
        done += active.progress_current / active.progress_total
    return done / len(steps)


def _lanes_table(app: DemoApp, snap: LiveSnapshot) -> Table:
    table = Table(title="lanes", title_justify="left", expand=True)
    for column in ("LANE", "IN FLIGHT", "LIMIT", "PENDING", "DUE", "RUNNING (ALL)", "DONE"):
        table.add_column(column)
    counts = {c.lane: c for c in snap.lanes}
    lanes = app.dispatcher.stats.lanes()
    for lane, limit in LANE_LIMITS.items():
        c = counts.get(lane.value)
        stats = lanes.get(lane)
        table.add_row(
            lane.value,
            str(app.dispatcher.in_flight(lane)),
            str(limit),
            str(c.pending if c else 0),
            str(c.due if c else 0),
            str(c.running if c else 0),
            "-" if stats is None else f"{stats.succeeded} ok / {stats.failed_permanently} failed",
        )
    return table


def _running_table(snap: LiveSnapshot) -> Table:
    table = Table(title="running tasks", title_justify="left", expand=True)
    for column in ("ID", "KIND", "LANE", "STEP", "PROGRESS", "OWNER"):
        table.add_column(column)
    for record in snap.running:
        steps = _steps(record)
        active = next((s for s in steps if s.status is TaskStepStatus.ACTIVE), None)
        step = "-" if active is None else active.title
        if active is not None and active.progress_total:
            step += f" {active.progress_current}/{active.progress_total}"
        table.add_row(
            str(record.id),
            record.kind,
            record.lane,
            step,
            ProgressBar(total=1.0, completed=_step_fraction(steps), width=24),
            (record.claimed_by or "")[-12:],
        )
    if not snap.running:
        table.add_row("-", "idle", "", "", "", "")
    return table


def _recent_table(snap: LiveSnapshot) -> Table:
    table = Table(title="recently finished", title_justify="left", expand=True)
    for column in ("ID", "KIND", "STATUS", "ATTEMPT", "LAST ERROR"):
        table.add_column(column)
    for record in snap.recent:
        status = record.status.value
        table.add_row(
            str(record.id),
            record.kind,
            Text(status, style=_STATUS_STYLE.get(status, "")),
            str(record.attempt),
            (record.last_error or "")[:50] if record.status is not TaskStatus.SUCCEEDED else "",
        )
    return table


def _scheduled_table(snap: LiveSnapshot) -> Table:
    table = Table(title="scheduled tasks", title_justify="left", expand=True)
    for column in ("NAME", "EVERY", "NEXT IN", "RUNS", "LAST", "CLAIMED BY"):
        table.add_column(column)
    now = snap.taken_at
    for row in snap.scheduled:
        next_in = max(0.0, (row.next_run_at - now).total_seconds())
        table.add_row(
            row.name,
            f"{row.interval.total_seconds():g}s",
            f"{next_in:.0f}s",
            str(row.run_count),
            "-" if row.last_run_status is None else row.last_run_status.value,
            (row.claimed_by or "")[-12:],
        )
    return table


def render_snapshot(app: DemoApp, snap: LiveSnapshot, header: str) -> RenderableType:
    """Compose the whole view from one snapshot."""
    holder = next((lease for lease in snap.leases if not lease.expired), None)
    lease_line = (
        "scheduler lease: none held"
        if holder is None
        else f"scheduler lease: {holder.owner_id}"
        + (" (this instance)" if holder.owner_id == app.instance else "")
    )
    parts: list[RenderableType] = [
        Text(header, style="bold"),
        Text(lease_line),
        _lanes_table(app, snap),
        _running_table(snap),
        _scheduled_table(snap),
        _recent_table(snap),
    ]
    if snap.error:
        parts.append(Text(f"read failed: {snap.error}", style="red"))
    return Panel(Group(*parts), title="aster-forge demo", border_style="blue")


async def run_live_view(app: DemoApp, header: str, token: CancellationToken) -> None:
    """Refresh the view once a second until ``token`` is cancelled."""
    leases = RuntimeLeaseTableReader(app.engine)
    started = time.monotonic()
    snap = await take_snapshot(app, leases)
    with Live(render_snapshot(app, snap, header), refresh_per_second=4, transient=False) as live:
        while not await token.sleep(1.0):
            snap = await take_snapshot(app, leases)
            elapsed = time.monotonic() - started
            live.update(render_snapshot(app, snap, f"{header}  |  up {elapsed:.0f}s"))
