"""A component's background task: supervised, started after startup, joined at shutdown."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from ._cancellation import CancellationToken
from ._isolation import _Escape, _guarded
from .errors import ShutdownPhaseFailure

__all__ = ["COMPONENT_TASK_FAILED", "ComponentTask"]

logger = logging.getLogger("aster_forge.runtime")

#: The fixed text of a component task's shutdown phase when the task had raised.
COMPONENT_TASK_FAILED = "component task failed"


class ComponentTask:
    """A background task owned by a component: started with the runtime, joined at shutdown.

    It is supervised: when it ends by raising, the error is logged at once (not only in
    the shutdown report), and a ``critical`` task also stops the runtime.
    """

    def __init__(
        self,
        component: str,
        name: str,
        fn: Callable[[CancellationToken], Awaitable[Any]],
        *,
        critical: bool = False,
    ) -> None:
        self.component = component
        self.name = name
        self.fn = fn
        self.critical = critical
        self.token: CancellationToken | None = None
        self.parent: CancellationToken | None = None
        self.task: asyncio.Task[Any] | None = None

    def start(self, parent: CancellationToken) -> None:
        if self.task is not None:
            return
        self.parent = parent
        token = self.token = parent.child_token()
        fn = self.fn
        self.task = asyncio.create_task(
            _guarded(lambda: fn(token)), name=f"aster-forge:component-task:{self.name}"
        )
        self.task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[Any]) -> None:
        if task.cancelled():
            return
        error = task.exception()
        if error is None:
            return
        if not isinstance(error, _Escape):
            stopping = "; stopping the runtime" if self.critical else ""
            logger.error(
                "component task %s of %s crashed: %s: %s%s",
                self.name,
                self.component,
                type(error).__name__,
                error,
                stopping,
                exc_info=error,
                extra={"component": self.component, "component_task": self.name},
            )
        if self.critical and self.parent is not None:
            self.parent.cancel()  # as a stop request: every component shuts down in order

    async def join(self) -> None:
        # Tolerates "never started": the runtime may shut down after a startup abort.
        if self.token is not None:
            self.token.cancel()
        if self.task is None:
            return
        await asyncio.wait({self.task})
        if not self.task.cancelled() and self.task.exception() is not None:
            raise ShutdownPhaseFailure(COMPONENT_TASK_FAILED)
