"""Store protocols for operator control: fenced cancel and snooze, lane pause, retention."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Protocol

from ._control import TaskLaneState
from ._lease import TaskLease
from ._records import TaskStatus

__all__ = ["TaskLaneControlStore", "TaskOutcomeControlStore", "TaskRetentionStore"]


class TaskOutcomeControlStore(Protocol):
    """Fenced writes for an operator cancel and a body's snooze.

    Like :class:`~aster_forge.tasks.ClaimedTaskExecutionStore`, each write matches only
    the row with ``lease.task_id`` still processing under ``lease.processing_token``:
    ``True`` when written, ``False`` (nothing written) when the fence failed.

    The operator's cancel request travels the other way through the heartbeat: a
    renewal returns the lease with ``cancel_requested`` read from the row in the same
    statement (:meth:`~aster_forge.tasks.TaskHeartbeatStore.renew_task_lease`).
    """

    async def mark_task_cancelled(self, lease: TaskLease, *, steps_json: str | None) -> bool:
        """End the task ``CANCELLED`` (reason ``cancelled``) and clear the token.

        ``attempt`` and ``last_error`` are unchanged: a cancel is not a product failure.

        Args:
            lease: The claim that was running the task.
            steps_json: The step list to store, or ``None`` to keep the stored one.

        Returns:
            ``True`` when written, ``False`` when the fence failed.
        """
        ...

    async def mark_task_snoozed(
        self, lease: TaskLease, *, delay: timedelta, steps_json: str | None
    ) -> bool:
        """Put the task back to pending, due after ``delay``, without counting an attempt.

        ``snooze_count`` grows by one. When a cancel was requested meanwhile the task
        ends ``CANCELLED`` instead (as a retry would).

        Args:
            lease: The claim that ran the task.
            delay: How long from now until it is due again (never negative).
            steps_json: The step list to store, or ``None`` to keep the stored one.

        Returns:
            ``True`` when written, ``False`` when the fence failed.
        """
        ...


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
