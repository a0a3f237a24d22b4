"""Operator and body control of tasks: snoozes, lane pause state, retention, their stores."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

from ._records import TaskStatus
from ._retry import TaskFailureClassification, TaskRetryClass
from .errors import AsterForgeTasksError, TaskInvalidValueError

__all__ = [
    "DEFAULT_MAX_SNOOZES",
    "MAX_PRUNE_BATCH",
    "TaskLaneControlStore",
    "TaskLaneState",
    "TaskPruneReport",
    "TaskRetention",
    "TaskRetentionStore",
    "TaskSnooze",
    "check_delete_finished_tasks_args",
    "check_snooze_delay",
    "snooze_failure",
]

DEFAULT_MAX_SNOOZES = 100
"""How many times a task may snooze before the executor fails it (see ``max_snoozes``)."""

MAX_PRUNE_BATCH = 10_000
"""The largest batch :meth:`~aster_forge.tasks.TaskRetentionStore.delete_finished_tasks` takes."""

_FINISHED = (TaskStatus.SUCCEEDED, TaskStatus.FAILED, TaskStatus.CANCELLED)


class TaskSnooze(AsterForgeTasksError):
    """Raised by a task body to run the task again after ``delay`` without using an attempt.

    The executor writes the task back to pending, due at ``now + delay``, fenced by the
    lease; ``attempt`` is unchanged and the row's ``snooze_count`` grows by one. Once a
    task has snoozed ``max_snoozes`` times the next snooze fails it instead, so an
    endless snooze is visible and bounded.

    Example:
        >>> from datetime import timedelta
        >>> raise TaskSnooze(timedelta(seconds=30))
        Traceback (most recent call last):
        ...
        aster_forge.tasks._control.TaskSnooze: snooze for 30.0s

    Attributes:
        delay: How long from now until the task is due again (never negative).
    """

    def __init__(self, delay: timedelta) -> None:
        check_snooze_delay(delay)
        super().__init__(f"snooze for {delay.total_seconds()}s")
        self.delay = delay


def check_snooze_delay(delay: object) -> None:
    """Reject a snooze delay that is not a non-negative ``timedelta`` (store input check).

    :class:`TaskSnooze` checks it when raised, and every
    :meth:`~aster_forge.tasks.ClaimedTaskExecutionStore.mark_task_snoozed` again, because a
    store may be called directly.

    Raises:
        TaskInvalidValueError: When it is not.
    """
    if not isinstance(delay, timedelta) or delay < timedelta(0):
        raise TaskInvalidValueError("snooze delay must be a non-negative timedelta")


def snooze_failure(snoozed: int, max_snoozes: int) -> TaskFailureClassification | None:
    """The failure a snooze turns into once the task has snoozed ``max_snoozes`` times.

    ``None`` while the snooze is allowed. The failure allows a manual retry.
    """
    if snoozed < max_snoozes:
        return None
    message = f"Task snoozed {snoozed} times; the limit is {max_snoozes}"
    return TaskFailureClassification(TaskRetryClass.MANUAL, message)


@dataclass(frozen=True, slots=True)
class TaskLaneState:
    """The stored pause state of one lane (shared by every instance on the database).

    Attributes:
        lane: The lane's wire value.
        paused: Whether claims skip the lane (in-flight tasks still finish).
        paused_at: When it was last paused, ``None`` if never or since resumed.
        updated_at: When the state last changed, ``None`` for a lane with no stored row.
        rate_window_start: The rate window the lane's rate-limited claims counted
            last (``None``: none yet).
        rate_started: The task starts counted in that window.
    """

    lane: str
    paused: bool = False
    paused_at: datetime | None = None
    updated_at: datetime | None = None
    rate_window_start: datetime | None = None
    rate_started: int = 0


@dataclass(frozen=True, slots=True)
class TaskRetention:
    """How long finished tasks are kept, per status, and how the pruner deletes them.

    ``None`` keeps that status forever. Deletion runs in batches of ``batch_size``
    rows, each its own short transaction, oldest ``finished_at`` first.

    Attributes:
        succeeded: Age after which succeeded tasks are deleted.
        failed: Age after which failed tasks are deleted (kept longer: they are evidence).
        cancelled: Age after which cancelled tasks are deleted.
        batch_size: Rows per delete statement (1..:data:`MAX_PRUNE_BATCH`).
        interval: How often the retention job runs.

    Raises:
        TaskInvalidValueError: On a negative age, a bad batch size or interval.
    """

    succeeded: timedelta | None = timedelta(days=7)
    failed: timedelta | None = timedelta(days=30)
    cancelled: timedelta | None = timedelta(days=7)
    batch_size: int = 1000
    interval: timedelta = timedelta(hours=1)

    def __post_init__(self) -> None:
        for name in ("succeeded", "failed", "cancelled"):
            age = getattr(self, name)
            if age is not None and (not isinstance(age, timedelta) or age < timedelta(0)):
                raise TaskInvalidValueError(f"TaskRetention.{name} must be a timedelta >= 0")
        check_delete_finished_tasks_args(TaskStatus.SUCCEEDED, timedelta(0), self.batch_size)
        if not isinstance(self.interval, timedelta) or self.interval <= timedelta(0):
            raise TaskInvalidValueError("TaskRetention.interval must be a positive timedelta")

    def ages(self) -> dict[TaskStatus, timedelta]:
        """The statuses to prune and their ages (statuses kept forever are left out)."""
        ages = {
            TaskStatus.SUCCEEDED: self.succeeded,
            TaskStatus.FAILED: self.failed,
            TaskStatus.CANCELLED: self.cancelled,
        }
        return {status: age for status, age in ages.items() if age is not None}


@dataclass(frozen=True, slots=True)
class TaskPruneReport:
    """What one retention pass deleted.

    Attributes:
        removed: Deleted rows per status (every pruned status is present, maybe 0).
        batches: Delete statements run.
        duration: Wall time of the pass.
    """

    removed: Mapping[TaskStatus, int] = field(default_factory=dict)
    batches: int = 0
    duration: timedelta = timedelta(0)

    @property
    def total(self) -> int:
        """Rows deleted in all."""
        return sum(self.removed.values())

    @property
    def duration_seconds(self) -> float:
        """:attr:`duration` in seconds, for metrics."""
        return self.duration.total_seconds()


def check_delete_finished_tasks_args(
    status: object, older_than: object, limit: object
) -> TaskStatus:
    """Validate :meth:`~aster_forge.tasks.TaskRetentionStore.delete_finished_tasks` arguments.

    A store input check: every retention store calls it first, so bad input raises the
    same error on every backend, and :class:`TaskRetention` checks its batch size with it.

    Returns:
        The status, as a :class:`~aster_forge.tasks.TaskStatus`.

    Raises:
        TaskInvalidValueError: Not a finished status, a negative age, or a bad limit.
    """
    try:
        value = TaskStatus(str(status))
    except ValueError as exc:
        raise TaskInvalidValueError(f"unknown task status {status!r}") from exc
    if value not in _FINISHED:
        raise TaskInvalidValueError(f"only finished tasks are pruned, not {value.value!r}")
    if not isinstance(older_than, timedelta) or older_than < timedelta(0):
        raise TaskInvalidValueError("older_than must be a timedelta >= 0")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PRUNE_BATCH:
        raise TaskInvalidValueError(f"prune limit must be an int in 1..{MAX_PRUNE_BATCH}")
    return value


# --- the stores operators control through ---


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
