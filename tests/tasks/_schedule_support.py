"""Helpers for the scheduled-runner tests: a fault-injecting store and a recording body."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from aster_forge.runtime import CancellationToken
from aster_forge.tasks import (
    CronSchedule,
    IntervalSchedule,
    ScheduledTaskOutcome,
    ScheduledTaskRun,
    ScheduledTaskStore,
)
from aster_forge.tasks._scheduled import run_scheduled_periodic_task
from aster_forge.tasks._schedules import (
    ScheduledPeriodicTask,
    ScheduledTaskClaim,
    ScheduledTaskRecord,
)
from aster_forge.testing import InMemoryScheduledTaskStore, ManualClock


class FlakyStore:
    """Delegates to an in-memory store; each fault list is consumed one call at a time."""

    def __init__(self, inner: InMemoryScheduledTaskStore) -> None:
        self.inner = inner
        self.ensure_errors: list[Exception] = []
        self.claim_errors: list[Exception] = []
        self.renew_results: list[bool | Exception] = []
        self.complete_errors: list[Exception] = []
        self.renewals = 0
        self.claims = 0

    async def ensure_scheduled_task(
        self,
        namespace: str,
        name: str,
        schedule: IntervalSchedule | CronSchedule,
    ) -> ScheduledTaskRecord:
        if self.ensure_errors:
            raise self.ensure_errors.pop(0)
        return await self.inner.ensure_scheduled_task(namespace, name, schedule)

    async def claim_scheduled_task(
        self, namespace: str, name: str, owner_id: str, claim_ttl: timedelta
    ) -> ScheduledTaskClaim | None:
        self.claims += 1
        if self.claim_errors:
            raise self.claim_errors.pop(0)
        return await self.inner.claim_scheduled_task(namespace, name, owner_id, claim_ttl)

    async def renew_scheduled_task_claim(
        self, claim: ScheduledTaskClaim, claim_ttl: timedelta
    ) -> bool:
        self.renewals += 1
        if self.renew_results:
            result = self.renew_results.pop(0)
            if isinstance(result, Exception):
                raise result
            return result
        return await self.inner.renew_scheduled_task_claim(claim, claim_ttl)

    async def complete_scheduled_task(
        self,
        claim: ScheduledTaskClaim,
        outcome: ScheduledTaskOutcome,
        *,
        next_run_at: datetime | None = None,
    ) -> bool:
        if self.complete_errors:
            raise self.complete_errors.pop(0)
        return await self.inner.complete_scheduled_task(claim, outcome, next_run_at=next_run_at)

    async def get_scheduled_task(self, namespace: str, name: str) -> ScheduledTaskRecord | None:
        return await self.inner.get_scheduled_task(namespace, name)

    async def list_scheduled_tasks(
        self, namespace: str | None = None
    ) -> Sequence[ScheduledTaskRecord]:
        return await self.inner.list_scheduled_tasks(namespace)


@dataclass
class Body:
    """A scheduled body that records each run and can be told to sleep or fail."""

    clock: ManualClock
    seconds: float = 0.0
    fail: bool = False
    outcome: object = "done"
    runs: list[ScheduledTaskRun] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    recorded: list[tuple[str, object, timedelta]] = field(default_factory=list)
    started: asyncio.Event = field(default_factory=asyncio.Event)

    async def __call__(self, run: ScheduledTaskRun) -> object:
        self.runs.append(run)
        self.started.set()
        if self.seconds and len(self.runs) == 1:  # only the first run is slow
            await self.clock.sleep(self.seconds)
        if self.fail:
            raise RuntimeError("body failed with a secret")
        self.finished.append(run.dedupe_key.as_str())
        return self.outcome

    async def record(self, run: ScheduledTaskRun, outcome: object, duration: timedelta) -> None:
        self.recorded.append((run.dedupe_key.as_str(), outcome, duration))

    @staticmethod
    def on_exception(exc: Exception) -> object:
        return f"failed:{type(exc).__name__}"

    def keys(self) -> list[str]:
        return [r.dedupe_key.as_str() for r in self.runs]


async def until(predicate: Callable[[], bool], limit: float = 5.0) -> None:
    """Yield to the loop until ``predicate()`` holds (bounded in real time; no sleeps)."""
    async with asyncio.timeout(limit):
        while not predicate():  # noqa: ASYNC110 (polls state other coroutines change)
            await asyncio.sleep(0)


def start_runner(
    store: ScheduledTaskStore,
    task: ScheduledPeriodicTask,
    body: Body,
    token: CancellationToken,
    clock: ManualClock,
) -> asyncio.Task[None]:
    return asyncio.create_task(
        run_scheduled_periodic_task(
            store,
            task,
            body,
            shutdown_token=token,
            record_outcome=body.record,
            on_exception=body.on_exception,
            clock=clock,
        ),
        name=f"runner:{task.owner_id}",
    )
