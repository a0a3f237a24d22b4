"""``ForgePeriodic``: a job declared with ``@forge.periodic``, run once per firing.

A firing is claimed in the scheduled-task catalog by the instance holding the forge's
scheduler lease (the primitives decide who runs it and when); it then enqueues one
task of the job's kind with the firing's dedupe key, so the body runs in the worker
with a context, steps, retries and a row on the dashboard, and a firing re-run after
a crash never creates a second row.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ..tasks import LeasedScheduledRuntime, ScheduledTaskOutcome, ScheduledTaskRun
from ._task import ForgeTask
from .errors import ForgeDeclarationError

if TYPE_CHECKING:
    from ._app import Forge

__all__ = ["ForgePeriodic", "check_periodic_payload"]


def check_periodic_payload(name: str, payload_type: Any) -> None:
    """A periodic body takes no payload, or the firing time as a ``datetime``.

    Raises:
        ForgeDeclarationError: Any other payload type.
    """
    if payload_type is not None and payload_type is not datetime:
        raise ForgeDeclarationError(
            f"periodic job {name!r}: the body takes (), (ctx) or (ctx, scheduled_at: datetime)"
        )


class ForgePeriodic:
    """One periodic job: its schedule and the task each firing enqueues.

    Returned by :meth:`Forge.periodic`; :attr:`task` is the task handle (enqueue it to
    run the job now, outside its schedule).
    """

    def __init__(
        self, task: ForgeTask, *, every: timedelta, initial_delay: timedelta | None
    ) -> None:
        self._task = task
        self._every = every
        self._initial_delay = initial_delay

    @property
    def name(self) -> str:
        """The job's name: its catalog row and its task kind."""
        return self._task.name

    @property
    def task(self) -> ForgeTask:
        """The task every firing enqueues."""
        return self._task

    @property
    def every(self) -> timedelta:
        """The period between firings."""
        return self._every

    def declare(self, runtime: LeasedScheduledRuntime[Forge, ScheduledTaskOutcome]) -> None:
        """Declare the job's catalog entry on the forge's leased scheduler."""
        runtime.scheduled(self.name, self._every, self._initial_delay, self._fire)

    async def _fire(self, forge: Forge, run: ScheduledTaskRun) -> ScheduledTaskOutcome:
        payload = run.scheduled_at if self._task.payload_type is datetime else None
        await self._task.enqueue(payload, dedupe_key=run.dedupe_key.as_str())
        return ScheduledTaskOutcome.succeeded()

    def __call__(self, *args: Any) -> Any:
        """Call the body directly (no store, no worker), e.g. in a unit test."""
        return self._task(*args)

    def __repr__(self) -> str:
        return f"ForgePeriodic(name={self.name!r}, every={self._every!r})"
