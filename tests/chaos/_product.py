"""The chaos suites' product: two lanes, three kinds, an instrumented task body.

Used in-process by the bad-input, soak and shutdown suites and by the worker
processes (``_worker.py``) of the crash, stale-writer and database-fault suites.
"""

from __future__ import annotations

import asyncio
import enum
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pydantic

from aster_forge import TaskExecutionContext, TaskRetryPolicy
from aster_forge.tasks import (
    ClaimedTaskExecutionConfig,
    NewTask,
    TaskLaneConfig,
    TaskRegistry,
    TaskSpec,
    TaskStepSpec,
)


class Kind(enum.StrEnum):
    """The task kinds."""

    NOOP = "chaos-noop"
    WORK = "chaos-work"
    REPORT = "chaos-report"


class Lane(enum.StrEnum):
    """The lanes: ``fast`` runs NOOP and WORK, ``reports`` runs REPORT."""

    FAST = "chaos-fast"
    REPORTS = "chaos-reports"


LANE_OF = {Kind.NOOP: Lane.FAST, Kind.WORK: Lane.FAST, Kind.REPORT: Lane.REPORTS}
LANE_LIMITS = {Lane.FAST: 8, Lane.REPORTS: 3}
REPORT_SEQ_BASE = 1_000_000
"""Report-lane tasks are numbered from here (the bodies tell the lane from it)."""


class Job(pydantic.BaseModel):
    """The payload every kind takes."""

    seq: int
    sleep_ms: int = 0


Hook = Callable[[TaskExecutionContext, "ChaosState", Job], Awaitable[None]]


@dataclass
class ChaosState:
    """Application state: what ran, concurrency per lane, and an optional hook.

    ``done`` counts executions per task sequence number; soak runs set
    ``track_done=False`` so only the ``completed`` total grows.
    """

    done: Counter[int] = field(default_factory=Counter)
    completed: int = 0
    track_done: bool = True
    running: Counter[str] = field(default_factory=Counter)
    max_running: Counter[str] = field(default_factory=Counter)
    hook: Hook | None = None


def _body(kind: Kind) -> Callable[[TaskExecutionContext, ChaosState, Job], Awaitable[int]]:
    lane = LANE_OF[kind].value

    async def run(ctx: TaskExecutionContext, state: ChaosState, job: Job) -> int:
        state.running[lane] += 1
        state.max_running[lane] = max(state.max_running[lane], state.running[lane])
        try:
            if state.hook is not None:
                await state.hook(ctx, state, job)
            elif job.sleep_ms:
                await asyncio.sleep(job.sleep_ms / 1000)
            state.completed += 1
            if state.track_done:
                state.done[job.seq] += 1
            return job.seq
        finally:
            state.running[lane] -= 1

    return run


REPORT_STEPS = (TaskStepSpec("collect", "Collect"), TaskStepSpec("render", "Render"))


def build_registry() -> TaskRegistry[ChaosState, Kind, Lane]:
    """The validated registry of the chaos product."""
    registry: TaskRegistry[ChaosState, Kind, Lane] = TaskRegistry(
        kind=Kind, lane=Lane, state=ChaosState
    )
    registry.register(TaskSpec(Kind.NOOP, Job, int, _body(Kind.NOOP)))
    registry.register(TaskSpec(Kind.WORK, Job, int, _body(Kind.WORK)))
    registry.register(TaskSpec(Kind.REPORT, Job, int, _body(Kind.REPORT), steps=REPORT_STEPS))
    registry.lane(Lane.FAST, [Kind.NOOP, Kind.WORK])
    registry.lane(Lane.REPORTS, [Kind.REPORT])
    return registry.validate()


REGISTRY = build_registry()
LANES = [TaskLaneConfig(lane, limit) for lane, limit in LANE_LIMITS.items()]


def new_task(kind: Kind, seq: int, *, sleep_ms: int = 0, max_attempts: int = 50) -> NewTask:
    """A task of ``kind`` numbered ``seq``."""
    spec = REGISTRY.typed_spec_for(kind)
    return NewTask(
        kind=kind,
        lane=LANE_OF[kind],
        payload_json=spec.encode_payload(Job(seq=seq, sleep_ms=sleep_ms)),
        steps_json=REGISTRY.spec_for(kind).initial_steps_json(),
        max_attempts=max_attempts,
    )


def execution_config(
    state: ChaosState, *, lease_ttl: timedelta = timedelta(seconds=30), **overrides: Any
) -> ClaimedTaskExecutionConfig[ChaosState]:
    """The execution config the chaos workers use (no retry jitter)."""
    options: dict[str, Any] = {
        "state": state,
        "registry": REGISTRY,
        "lease_ttl": lease_ttl,
        "retry_policy": TaskRetryPolicy(base_delay=timedelta(milliseconds=10), jitter=0.0),
    }
    options.update(overrides)
    return ClaimedTaskExecutionConfig(**options)
