"""``aster-forge lanes pause|resume|list``: the stored pause state every instance obeys."""

from __future__ import annotations

import json

from rich.table import Table

from aster_forge import TaskLaneState
from aster_forge.tasks import TaskInvalidValueError

from ._errors import EXIT_UNREACHABLE, CliError
from ._output import console
from ._tasks import task_store

__all__ = ["list_lanes", "set_lane_paused"]


def _iso(state: TaskLaneState) -> str | None:
    return None if state.paused_at is None else state.paused_at.isoformat()


async def set_lane_paused(url: str, table: str, lane: str, paused: bool) -> int:
    """Pause or resume ``lane`` for every instance on the database."""
    async with task_store(url, table) as store:
        try:
            state = await (store.pause_lane(lane) if paused else store.resume_lane(lane))
        except TaskInvalidValueError as exc:
            raise CliError(f"invalid lane: {exc}", EXIT_UNREACHABLE) from None
    if state.paused:
        console().print(
            f"lane {state.lane} paused since {_iso(state)}: no instance claims its tasks; "
            "running tasks finish"
        )
    else:
        console().print(f"lane {state.lane} resumed")
    return 0


async def list_lanes(url: str, table: str, as_json: bool) -> int:
    """Print every lane with a stored state and its queue counts."""
    async with task_store(url, table) as store:
        states = {s.lane: s for s in await store.lane_states()}
        counts = {c.lane: c for c in await store.lane_counts()}
    names = sorted({*states, *counts})
    rows = [
        {
            "lane": name,
            "paused": name in states and states[name].paused,
            "paused_at": _iso(states[name]) if name in states else None,
            "pending": counts[name].pending if name in counts else 0,
            "running": counts[name].running if name in counts else 0,
        }
        for name in names
    ]
    if as_json:
        console().print_json(json.dumps({"items": rows}))
        return 0
    grid = Table("LANE", "STATE", "PENDING", "RUNNING", "PAUSED AT")
    for row in rows:
        grid.add_row(
            str(row["lane"]),
            "paused" if row["paused"] else "active",
            str(row["pending"]),
            str(row["running"]),
            str(row["paused_at"] or ""),
        )
    console().print(grid)
    if not rows:
        console().print("no lanes")
    return 0
