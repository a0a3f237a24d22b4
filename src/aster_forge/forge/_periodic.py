"""``ForgePeriodic``: a job declared with ``@forge.periodic``, run once per firing.

A firing is claimed in the scheduled-task catalog by the instance holding the forge's
scheduler lease (the primitives decide who runs it and when); it then enqueues one
task of the job's kind with the firing's dedupe key, so the body runs in the worker
with a context, steps, retries and a row on the dashboard, and a firing re-run after
a crash never creates a second row.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta
from typing import Any

from .. import _tracing
from ..tasks import (
    CronSchedule,
    IntervalSchedule,
    ScheduledJob,
    ScheduledTaskOutcome,
    ScheduledTaskRun,
)
from ..tasks._internal import Schedule
from ..tasks.errors import CronExtraMissingError, PeriodicTaskConfigError, ScheduledTaskValueError
from ._signature import BodyShape
from ._task import ForgeTask
from .errors import ForgeDeclarationError

__all__ = ["ForgePeriodic", "periodic_schedule", "periodic_shape"]


def periodic_schedule(
    *,
    every: timedelta | None,
    cron: str | None,
    timezone: str | None,
    initial_delay: timedelta | None,
) -> Schedule:
    """The primitive schedule for ``every=`` or ``cron=`` (checked now, at declaration).

    Raises:
        ForgeDeclarationError: Neither or both given, ``timezone`` without ``cron``,
            ``initial_delay`` with ``cron``, a bad interval, expression or timezone, or
            the ``cron`` extra missing.
    """
    if (every is None) == (cron is None):
        raise ForgeDeclarationError("a periodic job takes exactly one of every= or cron=")
    try:
        if cron is not None:
            if initial_delay is not None:
                raise ForgeDeclarationError("initial_delay= applies to every=, not cron=")
            return CronSchedule(cron, timezone=timezone if timezone is not None else "UTC")
        if timezone is not None:
            raise ForgeDeclarationError("timezone= applies to cron=, not every=")
        if not isinstance(every, timedelta) or every <= timedelta(0):
            raise ForgeDeclarationError(f"every= must be a positive timedelta, got {every!r}")
        return IntervalSchedule(every, initial_delay=initial_delay)
    except (ScheduledTaskValueError, PeriodicTaskConfigError, CronExtraMissingError) as exc:
        raise ForgeDeclarationError(f"periodic job: {exc}") from exc


def periodic_shape(name: str, shape: BodyShape) -> BodyShape:
    """A periodic body's arguments: ``()``, ``(ctx)``, ``(ctx, state)``,
    ``(ctx, scheduled_at: datetime)`` or ``(ctx, scheduled_at: datetime, state)``.

    A second parameter not annotated ``datetime`` receives the state.

    Raises:
        ForgeDeclarationError: A third parameter after a non-``datetime`` second one.
    """
    if not shape.takes_payload or shape.payload_type is datetime:
        return shape
    if shape.takes_ctx and not shape.takes_state:
        return dataclasses.replace(shape, takes_payload=False, takes_state=True, payload_type=None)
    raise ForgeDeclarationError(
        f"periodic job {name!r}: the body takes (), (ctx), (ctx, state), "
        "(ctx, scheduled_at: datetime) or (ctx, scheduled_at: datetime, state)"
    )


class ForgePeriodic:
    """One periodic job: its schedule and the task each firing enqueues.

    Returned by :meth:`Forge.periodic`; :attr:`task` is the task handle (enqueue it to
    run the job now, outside its schedule).
    """

    def __init__(self, task: ForgeTask, *, schedule: Schedule) -> None:
        self._task = task
        self._schedule = schedule

    @property
    def name(self) -> str:
        """The job's name: its catalog row and its task kind."""
        return self._task.name

    @property
    def task(self) -> ForgeTask:
        """The task every firing enqueues."""
        return self._task

    @property
    def schedule(self) -> Schedule:
        """When it fires: a :class:`~aster_forge.tasks.CronSchedule` or an
        :class:`~aster_forge.tasks.IntervalSchedule`."""
        return self._schedule

    def job(self) -> ScheduledJob[ScheduledTaskOutcome]:
        """The job's catalog entry, for the forge's leased scheduler."""
        return ScheduledJob(kind=self.name, schedule=self._schedule, fn=self._fire)

    async def _fire(self, run: ScheduledTaskRun) -> ScheduledTaskOutcome:
        payload = run.scheduled_at if self._task.payload_type is datetime else None
        with _tracing.firing_span(self.name, run.scheduled_at):
            await self._task.enqueue(payload, dedupe_key=run.dedupe_key.as_str())
        return ScheduledTaskOutcome.succeeded()

    def __call__(self, *args: Any) -> Any:
        """Call the body directly (no store, no worker), e.g. in a unit test."""
        return self._task(*args)

    def __repr__(self) -> str:
        return f"ForgePeriodic(name={self.name!r}, schedule={self._schedule.text!r})"
