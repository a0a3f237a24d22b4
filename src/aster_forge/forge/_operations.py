"""The operations a service runs on its forge's tasks: read, list, cancel, retry,
prune, pause a lane, await a result. Each is one store call (or a poll of one), so the
same guarantees hold as in the admin API and the CLI, which call the same store."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ..tasks import BackgroundTaskStore
from ..tasks._internal import (
    BackgroundTaskRecord,
    EnqueueResult,
    TaskCancelOutcome,
    TaskLaneState,
    TaskPage,
    TaskPruneReport,
    TaskRetention,
    TaskStatus,
    prune_finished_tasks,
)
from .errors import ForgeDeclarationError, ForgeTaskFailedError

if TYPE_CHECKING:
    from ._backend import ForgeBackend
    from ._task import ForgeTask

__all__ = ["ForgeOperations"]


def _task_id(task: int | EnqueueResult) -> int:
    return task.task_id if isinstance(task, EnqueueResult) else task


def _seconds(timeout: timedelta | float | None) -> float | None:
    if timeout is None:
        return None
    seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else float(timeout)
    if seconds < 0:
        raise ValueError(f"timeout must not be negative, got {timeout!r}")
    return seconds


class ForgeOperations:
    """Reading and operating on a forge's tasks without reaching into its backend.

    Mixed into :class:`~aster_forge.Forge`; every method works on every backend
    (``memory://`` included) and from any process on the forge's database.
    """

    _backend: ForgeBackend
    _tasks: dict[str, ForgeTask]

    if TYPE_CHECKING:  # defined by ForgeDeclarations

        @property
        def lanes(self) -> dict[str, int]: ...

    async def _store(self) -> BackgroundTaskStore:
        # An embedded forge creates its tables on the first use, whichever call it is.
        backend = self._backend
        if not backend.tables_ready:
            await backend.create_tables_once()
        return backend.task_store

    # -- reading --------------------------------------------------------------------------

    async def get_task(self, task_id: int) -> BackgroundTaskRecord | None:
        """The task's stored row (status, attempts, steps, result, last error), or
        ``None`` when no task has that id (pruned, or never enqueued)."""
        return await (await self._store()).get_task(task_id)

    async def list_tasks(
        self,
        *,
        status: TaskStatus | None = None,
        task: str | ForgeTask | None = None,
        lane: str | None = None,
        limit: int = 50,
        before_id: int | None = None,
    ) -> TaskPage:
        """One page of tasks, newest first, optionally filtered.

        Args:
            status: Only tasks in this status.
            task: Only tasks of this declared task (its handle or its name).
            lane: Only tasks of this lane.
            limit: The page size, 1 to 1,000.
            before_id: The cursor: the previous page's ``next_before_id``.
        """
        kind = task if task is None or isinstance(task, str) else task.name
        return await (await self._store()).list_tasks(
            status=status, kind=kind, lane=lane, limit=limit, before_id=before_id
        )

    # -- operating ------------------------------------------------------------------------

    async def cancel_task(self, task_id: int) -> TaskCancelOutcome:
        """Cancel a pending task, or ask a running one to stop.

        A running task's body sees the request at its next heartbeat
        (``ctx.cancel_requested``) and the task ends ``cancelled`` unless it finished
        first; exactly one outcome is written either way.

        Returns:
            ``CANCELLED``, ``CANCEL_REQUESTED``, ``ALREADY_FINISHED`` or ``NOT_FOUND``.
        """
        return await (await self._store()).cancel_task(task_id)

    async def retry_task(
        self, task_id: int, *, run_at: datetime | None = None, force: bool = False
    ) -> BackgroundTaskRecord:
        """Put a failed or cancelled task back to pending with its attempts reset.

        Args:
            task_id: The task.
            run_at: When it becomes due (timezone-aware; default now): a retry later.
            force: Retry even a failure its body marked as not to be retried by hand.

        Raises:
            TaskNotFoundError: No task has that id.
            TaskStateError: The task is not failed or cancelled, or its failure may
                only be retried with ``force=True``.
        """
        return await (await self._store()).retry_task(task_id, run_at=run_at, force=force)

    async def prune(self, retention: TaskRetention | None = None) -> TaskPruneReport:
        """Delete finished tasks older than their status's age, once, in bounded batches.

        For scripts and cron jobs; pending and running tasks are never touched.

        Args:
            retention: The ages per status and the batch size (default:
                :class:`~aster_forge.tasks.TaskRetention`'s: succeeded and cancelled
                after 7 days, failed after 30).
        """
        policy = retention if retention is not None else TaskRetention()
        return await prune_finished_tasks(await self._store(), policy)

    # -- lanes ----------------------------------------------------------------------------

    async def pause_lane(self, lane: str) -> TaskLaneState:
        """Stop every instance claiming new tasks of ``lane`` (idempotent).

        Tasks already running finish and write their outcome; enqueues still succeed and
        wait. The pause is stored, so it holds across restarts until :meth:`resume_lane`.

        Raises:
            ForgeDeclarationError: ``lane`` is not one of the forge's lanes.
        """
        return await (await self._store()).pause_lane(self._declared_lane(lane))

    async def resume_lane(self, lane: str) -> TaskLaneState:
        """Let ``lane``'s tasks be claimed again (idempotent).

        Raises:
            ForgeDeclarationError: ``lane`` is not one of the forge's lanes.
        """
        return await (await self._store()).resume_lane(self._declared_lane(lane))

    async def lane_states(self) -> Sequence[TaskLaneState]:
        """Every lane of the forge with its stored pause state, sorted by lane."""
        return list(await (await self._store()).lane_states(sorted(self.lanes)))

    def _declared_lane(self, lane: str) -> str:
        if lane not in self.lanes:
            raise ForgeDeclarationError(f"lane {lane!r} is not declared: {sorted(self.lanes)}")
        return lane

    # -- results --------------------------------------------------------------------------

    async def result(self, task: int | EnqueueResult) -> Any:
        """Wait until the task finishes and return its result.

        The result is decoded as the task's declared return type (plain JSON for a task
        this forge does not declare). On PostgreSQL the waiter is woken by the task's
        ending (a ``NOTIFY`` only awaited tasks send) and reads the row every few
        seconds in case a notification was lost; elsewhere the store is polled, quickly
        at first and then at most once a second. Works from any process on the forge's
        database. Bound the wait with ``asyncio.timeout`` (the task keeps running):
        ``async with asyncio.timeout(30): value = await forge.result(made)``. A
        workflow's result is its last step's: ``await forge.result(made[last])``.

        Args:
            task: The task's id, or what its enqueue returned.

        Raises:
            ForgeTaskFailedError: The task ended failed or cancelled.
            TaskNotFoundError: No task has that id.
        """
        await self._store()  # an embedded forge's tables exist before the wait
        return self._decoded_result(await self._backend.finished(_task_id(task)))

    def result_sync(
        self, task: int | EnqueueResult, *, timeout: timedelta | float | None = None
    ) -> Any:
        """:meth:`result` for synchronous code (a thread with no running event loop).

        It waits on the forge's synchronous thread, woken the same way.

        Raises:
            TimeoutError: The task had not finished within ``timeout``.
            ForgeTaskFailedError: The task ended failed or cancelled.
            TaskNotFoundError: No task has that id.
            ValueError: ``timeout`` is negative.
        """
        task_id, seconds = _task_id(task), _seconds(timeout)
        return self._decoded_result(self._backend.finished_sync(task_id, seconds))

    def _decoded_result(self, record: BackgroundTaskRecord) -> Any:
        if record.status is not TaskStatus.SUCCEEDED:
            raise ForgeTaskFailedError(record)
        if record.result_json is None:
            return None
        declared = self._tasks.get(record.kind)
        if declared is None or declared.result_type is None:
            return json.loads(record.result_json)
        return declared.decode_result(record.result_json)
