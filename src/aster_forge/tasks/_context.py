"""What a task body sees: its context (lease, cancellation, steps, temp dir) and log fields."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from contextvars import ContextVar, Token
from datetime import timedelta
from pathlib import Path
from typing import NoReturn

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from ..runtime import CancellationToken
from ..runtime._internal import Clock, shielded, sleep_or_cancelled
from ._control import TaskSnooze
from ._lease import TaskEffects, TaskLease, TaskLeaseGuard, TaskLeaseTermination
from ._steps import (
    TaskStepInfo,
    serialize_task_steps_json,
    set_task_step_active,
    set_task_step_skipped,
    set_task_step_succeeded,
)
from .errors import TaskIoError, TaskTransactionUnavailableError
from .protocols import ClaimedTaskExecutionStore, TaskTempDirProvider

__all__ = [
    "TaskExecutionContext",
    "TaskLogContextFilter",
    "enter_task_log_context",
    "leave_task_log_context",
]


class TaskExecutionContext:
    """What a task body gets besides its payload: who it is, and when to stop.

    :attr:`cancellation` fires when the worker shuts down, at once when the lease is
    lost (fence failure or renewal timeout), and when a heartbeat learns that an
    operator cancelled the task (:attr:`cancel_requested`); long-running bodies should watch it (or
    call :meth:`ensure_active` between steps) and stop. Step updates go through the
    store and are fenced by the lease: a lost lease writes nothing and raises.
    """

    __slots__ = (
        "_attempt",
        "_effects",
        "_guard",
        "_steps",
        "_store",
        "_temp_dir",
        "_temp_provider",
    )

    def __init__(
        self,
        guard: TaskLeaseGuard,
        *,
        attempt: int,
        store: ClaimedTaskExecutionStore | None = None,
        steps: Sequence[TaskStepInfo] = (),
        temp_dirs: TaskTempDirProvider | None = None,
    ) -> None:
        """Create the context for one claimed execution.

        Args:
            guard: The lease guard shared with the heartbeat.
            attempt: The 1-based number of this execution (stored attempts + 1).
            store: The store step updates are written through (``None``: in-memory only).
            steps: The task's current step list.
            temp_dirs: Creates the per-task temp directory on first use.
        """
        if attempt < 1:
            raise ValueError("attempt must be >= 1")
        self._guard = guard
        self._attempt = attempt
        self._store = store
        self._steps = tuple(steps)
        self._temp_provider = temp_dirs
        self._temp_dir: Path | None = None
        self._effects: TaskEffects | None = None  # made by the first transaction()

    @property
    def task_id(self) -> int:
        """The persisted task id."""
        return self._guard.lease.task_id

    @property
    def attempt(self) -> int:
        """The 1-based number of this execution."""
        return self._attempt

    @property
    def lease(self) -> TaskLease:
        """The current lease (with the latest renewed expiry)."""
        return self._guard.lease

    @property
    def lease_guard(self) -> TaskLeaseGuard:
        """The guard shared with the heartbeat loop."""
        return self._guard

    @property
    def cancellation(self) -> CancellationToken:
        """Cancelled on worker shutdown and on lease loss."""
        return self._guard.token

    @property
    def clock(self) -> Clock:
        """The clock the lease deadline is measured on."""
        return self._guard.clock

    @property
    def lease_lost(self) -> bool:
        """Whether the lease was lost or its renewal timed out (no write will succeed)."""
        return self._guard.lease_lost

    @property
    def shutdown_requested(self) -> bool:
        """Whether the worker is shutting down (the task will be released, not failed)."""
        return self._guard.termination is TaskLeaseTermination.SHUTDOWN_REQUESTED

    @property
    def cancel_requested(self) -> bool:
        """Whether an operator cancelled the task (it ends ``cancelled``, fenced).

        Safe to read from a plain ``def`` body's worker thread (one attribute read): the
        thread is not stopped when the row is written ``cancelled``, so check this
        before a side effect.
        """
        return self._guard.cancel_requested

    def snooze(self, delay: timedelta) -> NoReturn:
        """Stop now and run again after ``delay`` without using an attempt.

        Raises:
            TaskSnooze: Always (let it propagate out of the body).
        """
        raise TaskSnooze(delay)

    @property
    def steps(self) -> tuple[TaskStepInfo, ...]:
        """The step list as last set through this context."""
        return self._steps

    def ensure_active(self) -> None:
        """Raise the matching lease-control error once the task must stop.

        Raises:
            TaskLeaseLostError: The lease was lost.
            TaskLeaseRenewalTimeoutError: The lease could not be renewed in time.
            TaskWorkerShutdownRequestedError: The worker is shutting down.
            TaskCancelRequestedError: An operator cancelled the task.
        """
        self._guard.ensure_active()

    async def sleep(self, seconds: float) -> None:
        """Sleep on the context's clock, stopping early when the task must stop.

        Raises:
            TaskLeaseControlError: When cancellation fires before the sleep ends.
        """
        self._guard.ensure_active()
        if await sleep_or_cancelled(self._guard.clock, self._guard.token, seconds):
            raise self._guard.mark_shutdown_requested()

    async def set_steps(self, steps: Sequence[TaskStepInfo]) -> None:
        """Persist a new step list, fenced by the lease.

        Raises:
            TaskLeaseControlError: When the task must stop, or the store's fence failed
                (the lease is then marked lost and :attr:`cancellation` fires).
        """
        self._guard.ensure_active()
        new_steps = tuple(steps)
        if self._store is not None:
            steps_json = serialize_task_steps_json(new_steps)
            written = (
                None if self._effects is None else await self._effects.update_task_steps(steps_json)
            )
            if written is None:
                written = await self._store.update_task_steps(self._guard.lease, steps_json)
            if not written:
                raise self._guard.mark_lost()
        self._steps = new_steps

    async def step_active(
        self, key: str, *, detail: str | None = None, progress: tuple[int, int] | None = None
    ) -> None:
        """Mark step ``key`` active (see :func:`~aster_forge.tasks.set_task_step_active`)."""
        await self.set_steps(
            set_task_step_active(self._steps, key, detail=detail, progress=progress)
        )

    async def step_succeeded(
        self, key: str, *, detail: str | None = None, progress: tuple[int, int] | None = None
    ) -> None:
        """Mark step ``key`` succeeded (see :func:`~aster_forge.tasks.set_task_step_succeeded`)."""
        await self.set_steps(
            set_task_step_succeeded(self._steps, key, detail=detail, progress=progress)
        )

    async def step_skipped(self, key: str, *, detail: str | None = None) -> None:
        """Mark step ``key`` skipped (see :func:`~aster_forge.tasks.set_task_step_skipped`)."""
        await self.set_steps(set_task_step_skipped(self._steps, key, detail=detail))

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[AsyncConnection]:
        """Write to the task's database in a transaction that commits with its success.

        ``async with ctx.transaction() as conn:`` opens (on first use) a transaction on
        the database the task lives in; what the body writes through ``conn`` commits
        together with the task's success and result once the body returns, only if this
        execution still holds the task's claim. A failure, a retry, a lost lease or a
        shutdown rolls it back, so a task retried after a crash writes its effects once.
        Entering it again in the same execution yields the same transaction. On SQLite
        it holds the database's write lock until the task's outcome is written: keep
        such bodies short.

        Raises:
            TaskTransactionUnavailableError: The worker's store keeps no database.
            TaskLeaseControlError: The task must stop (lease lost, shutdown, cancel).
        """
        if self._store is None:
            raise TaskTransactionUnavailableError(
                "ctx.transaction() needs a store; this context writes nothing"
            )
        if self._effects is None:
            self._effects = TaskEffects(self._store.begin_task_transaction, self._guard)
        effects = self._effects
        conn = await effects.connection()
        try:
            yield conn
        except BaseException:
            # Release the locks now; the task's own outcome follows as usual.
            await shielded(effects.rollback(), name=f"aster-forge:rollback-{self.task_id}")
            raise

    @property
    def effects(self) -> TaskEffects | None:
        """The transaction :meth:`transaction` opened, while it waits for the outcome."""
        effects = self._effects
        return effects if effects is not None and effects.open else None

    @asynccontextmanager
    async def session(self) -> AsyncIterator[AsyncSession]:
        """:meth:`transaction` as an ORM ``AsyncSession`` (flushed when the block ends).

        The session joins the task's transaction: it commits with the task's success,
        not when the block ends; ``session.commit()`` inside only flushes.

        Raises:
            TaskTransactionUnavailableError: The worker's store keeps no database.
        """
        async with self.transaction() as conn:
            session = AsyncSession(
                bind=conn,
                expire_on_commit=False,
            )
            try:
                yield session
                await session.flush()
            finally:
                await session.close()

    async def temp_dir(self) -> Path:
        """The task's private temp directory, created on first use.

        Raises:
            TaskIoError: When the worker was started without temp-dir support.
        """
        if self._temp_dir is None:
            if self._temp_provider is None:
                raise TaskIoError("no task temp directory provider is configured for this worker")
            self._temp_dir = await self._temp_provider.create_task_temp_dir(self._guard.lease)
        return self._temp_dir

    @property
    def temp_dir_created(self) -> bool:
        """Whether :meth:`temp_dir` created a directory (the executor then removes it)."""
        return self._temp_dir is not None

    def __repr__(self) -> str:
        return f"TaskExecutionContext(task_id={self.task_id}, attempt={self._attempt})"


# --- the running task on every log record ---

# (task_id, task_kind, task_lane, task_attempt) while a body runs; a plain tuple, set
# once per execution. Context variables follow the body into awaited code, tasks it
# creates and the worker thread of a plain ``def`` body (``asyncio.to_thread``).
_CURRENT: ContextVar[tuple[int, str, str | None, int] | None] = ContextVar(
    "aster_forge_task_log_context", default=None
)
_NAMES = ("task_id", "task_kind", "task_lane", "task_attempt")


def enter_task_log_context(
    task_id: int, kind: str, lane: str | None, attempt: int
) -> Token[tuple[int, str, str | None, int] | None]:
    """Mark the current context as running the given attempt (undo with the token)."""
    return _CURRENT.set((task_id, kind, lane, attempt))


def leave_task_log_context(token: Token[tuple[int, str, str | None, int] | None]) -> None:
    """Undo :func:`enter_task_log_context`."""
    _CURRENT.reset(token)


class TaskLogContextFilter(logging.Filter):
    """Adds ``task_id``, ``task_kind``, ``task_lane`` and ``task_attempt`` to log records
    emitted while a task body runs (any logger, a plain ``def`` body's thread included).

    Install it on a handler (``handler.addFilter(TaskLogContextFilter())``): a handler's
    filters see every record that reaches it, a logger's only that logger's own. The
    worker command installs it on the handler it sets up. A record that already has one
    of the fields (``extra=``) keeps its own value. It never drops a record.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        current = _CURRENT.get()
        if current is not None:
            fields = record.__dict__
            for name, value in zip(_NAMES, current, strict=True):
                if name not in fields:
                    fields[name] = value
        return True
