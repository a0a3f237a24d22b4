"""A controllable product for dispatch/execution tests: kinds, lanes, an instrumented body."""

from __future__ import annotations

import asyncio
import enum
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from pydantic import BaseModel

from aster_forge import BackgroundTaskRecord, TaskExecutionContext, TaskRetryPolicy
from aster_forge.tasks import (
    ClaimedTaskExecution,
    ClaimedTaskExecutionConfig,
    NewTask,
    SharedTaskHeartbeat,
    TaskLease,
    TaskRegistry,
    TaskSpec,
    TaskStepSpec,
    TaskStoreBase,
)
from aster_forge.tasks._execution import ClaimedTaskReport
from aster_forge.tasks._rate_limit import TaskRateLimit
from aster_forge.tasks.protocols import ClaimedTaskStore, ExecutableTaskRecord
from aster_forge.testing import InMemoryTaskStore, ManualClock


class Kind(enum.StrEnum):
    RENDER = "render"
    MAIL = "mail"
    REPORT = "report"


class Lane(enum.StrEnum):
    MEDIA = "media"
    FALLBACK = "fallback"


class Job(BaseModel):
    name: str
    value: int = 0


Action = Callable[[TaskExecutionContext, Job], Awaitable[Any]]


@dataclass
class Harness:
    """The application state task bodies receive; tests script and observe through it."""

    actions: dict[str, Action] = field(default_factory=dict)
    gates: dict[str, asyncio.Event] = field(default_factory=dict)
    started: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    running: Counter[str] = field(default_factory=Counter)
    max_running: Counter[str] = field(default_factory=Counter)
    contexts: dict[str, TaskExecutionContext] = field(default_factory=dict)

    def gate(self, *names: str) -> None:
        for name in names:
            self.gates[name] = asyncio.Event()

    def open(self, *names: str) -> None:
        for name in names:
            self.gates[name].set()


LANE_OF = {Kind.RENDER: Lane.MEDIA, Kind.MAIL: Lane.FALLBACK, Kind.REPORT: Lane.FALLBACK}


def _body(kind: Kind) -> Callable[[TaskExecutionContext, Harness, Job], Awaitable[int]]:
    lane = LANE_OF[kind].value

    async def run(ctx: TaskExecutionContext, state: Harness, payload: Job) -> int:
        state.running[lane] += 1
        state.max_running[lane] = max(state.max_running[lane], state.running[lane])
        state.started.append(payload.name)
        state.contexts[payload.name] = ctx
        try:
            action = state.actions.get(payload.name)
            if action is not None:
                result = await action(ctx, payload)
                return int(result) if result is not None else payload.value
            gate = state.gates.get(payload.name)
            if gate is not None:
                await gate.wait()
            return payload.value
        finally:
            state.running[lane] -= 1
            state.finished.append(payload.name)

    return run


REPORT_STEPS = (TaskStepSpec("collect", "Collect data"), TaskStepSpec("render", "Render"))


def build_registry() -> TaskRegistry[Harness, Kind, Lane]:
    registry: TaskRegistry[Harness, Kind, Lane] = TaskRegistry(kind=Kind, lane=Lane, state=Harness)
    registry.register(TaskSpec(Kind.RENDER, Job, int, _body(Kind.RENDER)))
    registry.register(TaskSpec(Kind.MAIL, Job, int, _body(Kind.MAIL)))
    registry.register(TaskSpec(Kind.REPORT, Job, int, _body(Kind.REPORT), steps=REPORT_STEPS))
    registry.lane(Lane.MEDIA, [Kind.RENDER])
    registry.lane(Lane.FALLBACK, [Kind.MAIL, Kind.REPORT])
    return registry.validate()


REGISTRY = build_registry()
NO_JITTER = TaskRetryPolicy(jitter=0.0)
LEASE_TTL = timedelta(seconds=30)


def make_config(
    harness: Harness, clock: ManualClock, **overrides: Any
) -> ClaimedTaskExecutionConfig[Harness]:
    options: dict[str, Any] = {
        "state": harness,
        "registry": REGISTRY,
        "lease_ttl": LEASE_TTL,
        "retry_policy": NO_JITTER,
        "clock": clock,
    }
    options.update(overrides)
    return ClaimedTaskExecutionConfig(**options)


def new_task(
    kind: Kind, name: str, *, value: int = 0, max_attempts: int = 5, payload: str | None = None
) -> NewTask:
    spec = REGISTRY.typed_spec_for(kind)
    steps = REGISTRY.spec_for(kind).initial_steps_json()
    return NewTask(
        kind=kind,
        lane=LANE_OF[kind],
        payload_json=payload
        if payload is not None
        else spec.encode_payload(Job(name=name, value=value)),
        steps_json=steps,
        max_attempts=max_attempts,
    )


async def enqueue(store: InMemoryTaskStore, *tasks: NewTask) -> list[int]:
    results = await store.enqueue_many(list(tasks))
    return [result.record.id for result in results]


async def claim_one(
    store: InMemoryTaskStore, lane: Lane, owner: str = "test-owner"
) -> BackgroundTaskRecord:
    claimed = await store.claim_due_for_lane(lane, 1, owner, LEASE_TTL)
    assert len(claimed) == 1
    return claimed[0]


async def run_claimed(
    store: ClaimedTaskStore,
    record: ExecutableTaskRecord[Any],
    config: ClaimedTaskExecutionConfig[Any],
) -> ClaimedTaskReport:
    """Run one claimed record as a worker does: in its own task, with a heartbeat engine.

    A cancelled caller cancels the run (the release is still written) and re-raises.
    """
    heartbeat = SharedTaskHeartbeat(
        store,
        config.clock,
        config.lease_ttl,
        late_wake_threshold=config.heartbeat_late_wake_threshold,
    )
    execution = ClaimedTaskExecution(store, record, config, heartbeat=heartbeat)
    run = execution.start()
    try:
        await execution.settled()
    except asyncio.CancelledError:
        await execution.cancel()
        await execution.settled()
        raise
    finally:
        await heartbeat.join()
    report = execution.report if execution.abandoned else run.result()
    assert report is not None  # written, refused, or (abandoned) nothing written
    return report


async def until(predicate: Callable[[], bool], *, turns: int = 20_000) -> None:
    """Yield to the event loop until ``predicate`` holds (no wall-clock sleeping)."""
    for _ in range(turns):
        if predicate():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition not reached")


class ProxyStore(TaskStoreBase[BackgroundTaskRecord, str]):
    """Wraps an :class:`InMemoryTaskStore`; tests inject failures per method."""

    def __init__(self, inner: InMemoryTaskStore) -> None:
        self.inner = inner
        self.claim_errors = 0
        self.claim_lanes: list[str] = []
        self.renew_error: Exception | None = None
        self.renewals = 0
        self.refuse_success = False
        self.success_error: Exception | None = None
        self.extra_claims = 0

    async def claim_due_for_lane(
        self,
        lane: str,
        limit: int,
        owner: str,
        lease_ttl: timedelta,
        *,
        cluster_limit: int | None = None,
        partition_limit: int | None = None,
        rate_limit: TaskRateLimit | None = None,
        partition_rate_limit: TaskRateLimit | None = None,
    ) -> Sequence[BackgroundTaskRecord]:
        self.claim_lanes.append(str(lane))
        if self.claim_errors:
            self.claim_errors -= 1
            raise ConnectionError("database is down")
        return await self.inner.claim_due_for_lane(
            lane,
            limit + self.extra_claims,
            owner,
            lease_ttl,
            cluster_limit=cluster_limit,
            partition_limit=partition_limit,
            rate_limit=rate_limit,
            partition_rate_limit=partition_rate_limit,
        )

    async def renew_task_lease(self, lease: TaskLease, lease_ttl: timedelta) -> TaskLease | None:
        self.renewals += 1
        if self.renew_error is not None:
            raise self.renew_error
        return await self.inner.renew_task_lease(lease, lease_ttl)

    async def mark_task_succeeded(
        self, lease: TaskLease, result_json: str | None, steps_json: str | None
    ) -> bool:
        if self.success_error is not None:
            raise self.success_error
        if self.refuse_success:
            return False
        return await self.inner.mark_task_succeeded(lease, result_json, steps_json)

    async def mark_task_retry(
        self,
        lease: TaskLease,
        *,
        delay: timedelta,
        error: str,
        steps_json: str | None,
        count_attempt: bool,
        traceback: str | None = None,
    ) -> bool:
        return await self.inner.mark_task_retry(
            lease,
            delay=delay,
            error=error,
            steps_json=steps_json,
            count_attempt=count_attempt,
            traceback=traceback,
        )

    async def mark_task_failed(
        self,
        lease: TaskLease,
        *,
        error: str,
        steps_json: str | None,
        manual_retry: bool,
        traceback: str | None = None,
    ) -> bool:
        return await self.inner.mark_task_failed(
            lease,
            error=error,
            steps_json=steps_json,
            manual_retry=manual_retry,
            traceback=traceback,
        )

    async def release_task_for_shutdown(self, lease: TaskLease) -> bool:
        return await self.inner.release_task_for_shutdown(lease)

    async def update_task_steps(self, lease: TaskLease, steps_json: str) -> bool:
        return await self.inner.update_task_steps(lease, steps_json)
