"""Store protocols for operator control: lane pause and retention."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Protocol

from ._control import TaskLaneState
from ._records import TaskStatus

__all__ = ["TaskLaneControlStore", "TaskRetentionStore"]


class TaskLaneControlStore(Protocol):
    """The pause state of lanes, stored so every instance's claims honour it.

    A claim of a paused lane returns nothing (expired leases are still rescued);
    tasks already running finish and write their outcome as usual. A pause takes
    effect for claims that start after it is stored.
    """

    async def pause_lane(self, lane: str) -> TaskLaneState:
        """Pause ``lane`` (idempotent; a paused lane keeps its first ``paused_at``)."""
        ...

    async def resume_lane(self, lane: str) -> TaskLaneState:
        """Resume ``lane`` (idempotent; a lane never paused is simply not paused)."""
        ...

    async def lane_states(self, lanes: Sequence[str] | None = None) -> Sequence[TaskLaneState]:
        """The stored states, sorted by lane.

        Args:
            lanes: Report exactly these lanes (unpaused defaults where nothing is
                stored); default: every lane with a stored state.
        """
        ...


class TaskRetentionStore(Protocol):
    """Deletes finished tasks in bounded batches (the retention job's store)."""

    async def delete_finished_tasks(
        self, status: TaskStatus, older_than: timedelta, *, limit: int
    ) -> int:
        """Delete up to ``limit`` tasks in ``status`` finished at least ``older_than`` ago.

        Only terminal statuses are accepted; the oldest ``finished_at`` go first. One
        short transaction (rows another transaction holds are skipped, not waited for).

        Returns:
            How many rows were deleted (``< limit`` means none are left for now).

        Raises:
            TaskInvalidValueError: A non-terminal status, a negative age or a bad limit.
        """
        ...
