"""The operator-control half of the in-memory task store: cancel, snooze, lanes, retention."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ..runtime._internal import Clock, saturating_expiry
from ..tasks import TaskLease
from ..tasks._internal import (
    BackgroundTaskRecord,
    TaskFailureReason,
    TaskLaneState,
    TaskStatus,
    check_delete_finished_tasks_args,
    check_snooze_delay,
    wire_value,
)

__all__ = ["InMemoryTaskControlMixin"]


class InMemoryTaskControlMixin:
    """Fenced cancel/snooze, lane pause state and retention for :class:`InMemoryTaskStore`."""

    _clock: Clock
    _rows: dict[int, BackgroundTaskRecord]
    _lanes: dict[str, TaskLaneState]

    if TYPE_CHECKING:

        def _owned(self, lease: TaskLease) -> BackgroundTaskRecord | None:
            """The row if ``lease`` still owns it (defined on the store)."""

        def _finish(self, row: BackgroundTaskRecord, **changes: Any) -> None:
            """Write a final change and clear the claim (defined on the store)."""

    def _requeue(
        self, row: BackgroundTaskRecord, delay: timedelta, steps_json: str | None, **changes: Any
    ) -> None:
        """Back to pending after ``delay`` with ``changes``; cancelled if a cancel was requested."""
        now = self._clock.now()
        if row.cancel_requested:
            changes.update(
                status=TaskStatus.CANCELLED,
                failure_reason=TaskFailureReason.CANCELLED,
                finished_at=now,
            )
        else:
            changes.update(
                status=TaskStatus.PENDING, run_at=saturating_expiry(now, delay), finished_at=None
            )
        steps = row.steps_json if steps_json is None else steps_json
        self._finish(row, steps_json=steps, **changes)

    def _lane_paused(self, lane: str) -> bool:
        state = self._lanes.get(lane)
        return state is not None and state.paused

    async def mark_task_cancelled(self, lease: TaskLease, *, steps_json: str | None) -> bool:
        """Fenced: end the task ``cancelled``; attempt and stored error unchanged."""
        row = self._owned(lease)
        if row is None:
            return False
        self._finish(
            row,
            status=TaskStatus.CANCELLED,
            failure_reason=TaskFailureReason.CANCELLED,
            steps_json=row.steps_json if steps_json is None else steps_json,
            finished_at=self._clock.now(),
        )
        return True

    async def mark_task_snoozed(
        self, lease: TaskLease, *, delay: timedelta, steps_json: str | None
    ) -> bool:
        """Fenced: pending again after ``delay``, ``snooze_count + 1``, attempt unchanged."""
        check_snooze_delay(delay)
        row = self._owned(lease)
        if row is None:
            return False
        self._requeue(row, delay, steps_json, snooze_count=row.snooze_count + 1)
        return True

    async def delete_finished_tasks(
        self, status: TaskStatus, older_than: timedelta, *, limit: int
    ) -> int:
        """Delete up to ``limit`` rows of ``status`` finished ``older_than`` ago, oldest first."""
        wanted = check_delete_finished_tasks_args(status, older_than, limit)
        try:
            cutoff = self._clock.now() - older_than
        except OverflowError:
            return 0
        old = sorted(
            (
                row
                for row in self._rows.values()
                if row.status is wanted
                and row.finished_at is not None
                and row.finished_at <= cutoff
            ),
            key=lambda row: (row.finished_at, row.id),
        )[:limit]
        for row in old:
            del self._rows[row.id]
        return len(old)

    def _set_paused(self, lane: str, paused: bool) -> TaskLaneState:
        lane_value = wire_value(lane, "lane")
        now = self._clock.now()
        current = self._lanes.get(lane_value)
        paused_at: datetime | None = None
        if paused:
            paused_at = current.paused_at if current is not None and current.paused else now
        state = replace(
            current or TaskLaneState(lane_value), paused=paused, paused_at=paused_at, updated_at=now
        )
        self._lanes[lane_value] = state
        return state

    async def pause_lane(self, lane: str) -> TaskLaneState:
        """Pause ``lane``: claims skip it, running tasks finish."""
        return self._set_paused(lane, True)

    async def resume_lane(self, lane: str) -> TaskLaneState:
        """Resume ``lane``."""
        return self._set_paused(lane, False)

    async def lane_states(self, lanes: Sequence[str] | None = None) -> list[TaskLaneState]:
        """Stored lane states sorted by lane (exactly ``lanes`` when given)."""
        if lanes is None:
            return [self._lanes[lane] for lane in sorted(self._lanes)]
        wanted = sorted({wire_value(lane, "lane") for lane in lanes})
        return [self._lanes.get(lane, TaskLaneState(lane)) for lane in wanted]
