"""BackgroundTasks: a named group of asyncio worker tasks sharing one shutdown token."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, Final

from ..runtime import CancellationToken
from ..runtime._internal import Clock, SystemClock
from .errors import BackgroundTasksClosedError, BackgroundTaskSpawnError, PeriodicTaskConfigError

__all__ = [
    "BACKGROUND_TASKS_COMPONENT",
    "DEFAULT_SHUTDOWN_GRACE",
    "BackgroundTasks",
    "WorkerFn",
]

logger = logging.getLogger("aster_forge.tasks.runtime")

BACKGROUND_TASKS_COMPONENT: Final = "background_tasks"
"""The runtime component name every background-task component factory registers.

Database, mail or audit components name it to declare that they shut down after the
background tasks.
"""

WorkerFn = Callable[[CancellationToken], Awaitable[Any]]
"""A worker: ``async def worker(shutdown_token)`` that returns once the token is cancelled."""

DEFAULT_SHUTDOWN_GRACE = timedelta(seconds=5)
"""How long :meth:`BackgroundTasks.shutdown` lets workers stop on their own before cancelling."""

_SYSTEM_CLOCK = SystemClock()


# Kept: asyncio.TaskGroup ends every worker when one fails and has no grace on an injected
# clock; this group logs a failure and keeps the others (tests/tasks/test_background.py).
class BackgroundTasks:
    """Owns a group of named worker tasks and the token that tells them to stop.

    Every worker gets the group's token (a child of the ``shutdown_token`` the group
    was created with, so a process shutdown reaches it too, while :meth:`shutdown`
    stops only this group). :meth:`shutdown` cancels the token, gives the workers
    ``shutdown_grace`` to return on their own, cancels (aborts) the rest, and awaits
    every handle. Each handle is reaped exactly once, whether it ended before or
    during shutdown: a worker that raised is logged at ERROR with the group and worker
    name; a worker cancelled by shutdown is the expected path and logged at DEBUG.

    Args:
        shutdown_token: The parent token (e.g. the runtime's or a lease's); ``None``
            creates a standalone token.
        name: The group name used in task names and log records.
        shutdown_grace: How long shutdown waits before cancelling workers (zero:
            cancel at once). Cancelled workers still run their ``finally`` blocks.
        clock: Measures the grace period (``ManualClock`` in tests).

    Raises:
        PeriodicTaskConfigError: On a blank name or a negative/non-timedelta grace.

    Example:
        >>> tasks = BackgroundTasks(name="workers")
        >>> tasks.shutdown_token.cancelled, len(tasks)
        (False, 0)
    """

    def __init__(
        self,
        shutdown_token: CancellationToken | None = None,
        *,
        name: str = BACKGROUND_TASKS_COMPONENT,
        shutdown_grace: timedelta = DEFAULT_SHUTDOWN_GRACE,
        clock: Clock = _SYSTEM_CLOCK,
    ) -> None:
        if not isinstance(name, str) or not name.strip():
            raise PeriodicTaskConfigError(f"group name must be a non-empty str, got {name!r}")
        if not isinstance(shutdown_grace, timedelta) or shutdown_grace < timedelta(0):
            raise PeriodicTaskConfigError(
                f"shutdown_grace must be a non-negative timedelta, got {shutdown_grace!r}"
            )
        parent = shutdown_token if shutdown_token is not None else CancellationToken()
        self._token = parent.child_token()
        self._name = name
        self._grace = shutdown_grace.total_seconds()
        self._clock = clock
        self._live: dict[asyncio.Task[Any], str] = {}
        self._shutdown_task: asyncio.Task[None] | None = None

    @property
    def name(self) -> str:
        """The group name."""
        return self._name

    @property
    def shutdown_token(self) -> CancellationToken:
        """The group's token: cancelled by :meth:`shutdown` or by the parent token."""
        return self._token

    @property
    def is_shutting_down(self) -> bool:
        """Whether :meth:`shutdown` was called."""
        return self._shutdown_task is not None

    def worker_names(self) -> tuple[str, ...]:
        """The names of the workers still running, in spawn order."""
        return tuple(self._live.values())

    def __len__(self) -> int:
        return len(self._live)

    def spawn(self, name: str, fn: WorkerFn) -> asyncio.Task[Any]:
        """Start ``fn(shutdown_token)`` as a named worker of this group.

        Must be called with a running event loop. The returned task is owned by the
        group; callers need not (and should not) await it.

        Args:
            name: A name unique among the group's running workers.
            fn: The worker coroutine function; it receives the group's token.

        Returns:
            The worker's task.

        Raises:
            BackgroundTaskSpawnError: Blank or duplicate name, or ``fn`` not callable.
            BackgroundTasksClosedError: The group is shutting down.
        """
        if not isinstance(name, str) or not name.strip():
            raise BackgroundTaskSpawnError(f"worker name must be a non-empty str, got {name!r}")
        if not callable(fn):
            raise BackgroundTaskSpawnError(f"worker {name!r}: fn is not callable")
        if self._shutdown_task is not None:
            raise BackgroundTasksClosedError(
                f"background task group {self._name!r} is shutting down; cannot spawn {name!r}"
            )
        if name in self._live.values():
            raise BackgroundTaskSpawnError(
                f"background task group {self._name!r} already runs a worker named {name!r}"
            )
        token = self._token

        async def run() -> Any:
            return await fn(token)

        task = asyncio.create_task(run(), name=f"aster-forge:{self._name}:{name}")
        self._live[task] = name
        task.add_done_callback(self._reap)
        logger.debug(
            "background task %s/%s spawned",
            self._name,
            name,
            extra={"task_group": self._name, "worker": name},
        )
        return task

    def _reap(self, task: asyncio.Task[Any]) -> None:
        """Retrieve and log one finished worker's outcome; later calls for it are no-ops."""
        name = self._live.pop(task, None)
        if name is None:
            return
        extra = {"task_group": self._name, "worker": name}
        if task.cancelled():
            logger.debug("background task %s/%s cancelled", self._name, name, extra=extra)
            return
        exc = task.exception()
        if exc is not None:
            logger.error(
                "background task %s/%s exited with %s",
                self._name,
                name,
                type(exc).__name__,
                exc_info=exc,
                extra=extra,
            )
        elif self._shutdown_task is None and not self._token.cancelled:
            logger.info(
                "background task %s/%s returned before shutdown", self._name, name, extra=extra
            )
        else:
            logger.debug("background task %s/%s stopped", self._name, name, extra=extra)

    async def shutdown(self) -> None:
        """Stop every worker and wait for all of them; idempotent and safe to call concurrently.

        Cancels the group token, waits up to ``shutdown_grace`` for the workers to
        return, cancels the remaining ones and awaits them. If the caller is cancelled
        (e.g. a shutdown phase timed out), every remaining worker is cancelled at once
        and the cancellation propagates; the workers are still reaped.
        """
        if self._shutdown_task is None:
            self._token.cancel()
            self._shutdown_task = asyncio.create_task(
                self._drain(), name=f"aster-forge:{self._name}:shutdown"
            )
        try:
            await asyncio.shield(self._shutdown_task)
        except asyncio.CancelledError:
            self._abort()
            raise

    def _abort(self) -> None:
        for task in list(self._live):
            task.cancel()

    async def _drain(self) -> None:
        if self._live and self._grace > 0:
            timer = asyncio.create_task(
                self._clock.sleep(self._grace), name=f"aster-forge:{self._name}:grace"
            )
            try:
                while self._live and not timer.done():
                    await asyncio.wait({timer, *self._live}, return_when=asyncio.FIRST_COMPLETED)
                    for task in [t for t in self._live if t.done()]:
                        self._reap(task)
            finally:
                timer.cancel()
                await asyncio.gather(timer, return_exceptions=True)
        if self._live:
            logger.debug(
                "background task group %s: cancelling %d worker(s)",
                self._name,
                len(self._live),
                extra={"task_group": self._name},
            )
        while self._live:
            pending = set(self._live)
            for task in pending:
                task.cancel()
            await asyncio.wait(pending)
            for task in pending:
                self._reap(task)
        logger.debug("background task group %s stopped", self._name)

    def __repr__(self) -> str:
        return f"<BackgroundTasks {self._name!r} workers={len(self._live)}>"
