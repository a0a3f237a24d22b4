"""The demo's scheduled tasks, run by ``LeasedScheduledRuntimeConfig`` on the lease holder.

Each firing enqueues one runtime-task row whose dedupe key is the firing's key, so a
firing re-run after a crash or during a lease handover never creates a second row. The
``sample-work`` schedule keeps the dashboard busy by enqueuing a few more pipelines.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta

from aster_forge.runtime import RuntimeLeaseStore
from aster_forge.tasks import (
    BackgroundTaskStore,
    LeasedScheduledRuntime,
    LeasedScheduledRuntimeConfig,
    NewTask,
    ScheduledTaskOutcome,
    ScheduledTaskRun,
    ScheduledTaskStore,
    TaskRegistry,
)

from ._model import DemoLane, DemoTaskKind, MaintenancePayload, MediaPayload
from ._runtime_tasks import DemoRuntimeTask
from ._state import DemoState

__all__ = [
    "DEMO_LEASE_ID",
    "DEMO_NAMESPACE",
    "SAMPLE_WORK",
    "DemoSchedule",
    "scheduled_runtime_config",
]

logger = logging.getLogger("aster_forge.demo.schedule")

DEMO_NAMESPACE = "aster-forge-demo"
"""The scheduled catalog namespace."""

DEMO_LEASE_ID = "aster-forge-demo.scheduler"
"""The runtime lease only one demo instance holds; the holder runs the schedules."""

SAMPLE_WORK = "sample-work"
"""The schedule that enqueues fresh sample pipelines."""


@dataclass(frozen=True, slots=True)
class DemoSchedule:
    """Intervals of the demo's schedules and the cleanup age.

    Attributes:
        health_check: How often the system health check runs.
        cleanup: How often finished tasks are purged.
        temp_sweep: How often stale task temp dirs are swept.
        sample_work: How often new sample pipelines are enqueued (zero: never).
        cleanup_older_than: The age past which finished tasks are purged.
    """

    health_check: timedelta = timedelta(seconds=10)
    cleanup: timedelta = timedelta(seconds=30)
    temp_sweep: timedelta = timedelta(seconds=20)
    sample_work: timedelta = timedelta(seconds=12)
    cleanup_older_than: timedelta = timedelta(minutes=10)


class _Bodies:
    def __init__(
        self,
        store: BackgroundTaskStore,
        registry: TaskRegistry[DemoState, DemoTaskKind, DemoLane],
        schedule: DemoSchedule,
    ) -> None:
        self._store = store
        self._registry = registry
        self._schedule = schedule

    async def runtime_task(self, state: DemoState, run: ScheduledTaskRun) -> ScheduledTaskOutcome:
        name = run.task.name
        payload = MaintenancePayload(
            task=name,
            older_than_seconds=int(self._schedule.cleanup_older_than.total_seconds()),
            scheduled_firing=run.scheduled_at.isoformat(),
        )
        spec = self._registry.spec_for(DemoTaskKind.RUNTIME_TASK)
        result = await self._store.enqueue(
            NewTask(
                kind=DemoTaskKind.RUNTIME_TASK,
                lane=DemoLane.MAINTENANCE,
                payload_json=spec.spec.encode_payload(payload),
                steps_json=spec.initial_steps_json(),
                priority=10,
                max_attempts=3,
                dedupe_key=run.dedupe_key,
            )
        )
        return ScheduledTaskOutcome.succeeded() if result.created else _duplicate(result.record.id)

    async def sample_work(self, state: DemoState, run: ScheduledTaskRun) -> ScheduledTaskOutcome:
        spec = self._registry.spec_for(DemoTaskKind.THUMBNAIL_RENDER)
        stamp = int(run.scheduled_at.timestamp())
        tasks = [
            NewTask(
                kind=DemoTaskKind.THUMBNAIL_RENDER,
                lane=DemoLane.MEDIA,
                payload_json=spec.spec.encode_payload(
                    MediaPayload(
                        asset_id=1000 + (stamp % 1000) * 2 + offset,
                        source_url=f"https://media.example/uploads/{stamp}-{offset}",
                        size_kb=512 + 256 * offset,
                    )
                ),
                steps_json=spec.initial_steps_json(),
                max_attempts=3,
                dedupe_key=f"{run.dedupe_key.as_str()}:{offset}",
            )
            for offset in range(2)
        ]
        await self._store.enqueue_many(tasks)
        return ScheduledTaskOutcome.succeeded()


def _duplicate(task_id: int) -> ScheduledTaskOutcome:
    # Another instance already enqueued this firing's row: not an error, just no new row.
    logger.info("scheduled firing already has task %d", task_id)
    return ScheduledTaskOutcome.succeeded()


async def _record_outcome(
    state: DemoState, run: ScheduledTaskRun, outcome: ScheduledTaskOutcome, took: timedelta
) -> None:
    await state.record(
        "schedule.fired",
        detail=f"{run.task.name} at {run.scheduled_at.isoformat()}: {outcome.status.value}",
    )


def _on_panic(exc: Exception) -> ScheduledTaskOutcome:
    return ScheduledTaskOutcome.failed(f"scheduled body raised {type(exc).__name__}")


def scheduled_runtime_config(
    *,
    lease_store: RuntimeLeaseStore,
    scheduled_store: ScheduledTaskStore,
    state: DemoState,
    lease_ttl: timedelta = timedelta(seconds=6),
) -> LeasedScheduledRuntimeConfig[DemoState, ScheduledTaskOutcome]:
    """The lease-guarded scheduler configuration (short lease TTL so takeover is quick)."""
    return (
        LeasedScheduledRuntimeConfig(
            DEMO_NAMESPACE,
            DEMO_LEASE_ID,
            lease_store,
            scheduled_store,
            state=state,
            on_panic=_on_panic,
            record_outcome=_record_outcome,
        )
        .claim_ttl(timedelta(seconds=30))
        .lease_ttl(lease_ttl)
        .lease_renew_interval(lease_ttl / 3)
        .lease_standby_retry_interval(timedelta(seconds=1))
        .shutdown_grace(timedelta(seconds=3))
    )


def declare_schedules(
    runtime: LeasedScheduledRuntime[DemoState, ScheduledTaskOutcome],
    *,
    store: BackgroundTaskStore,
    registry: TaskRegistry[DemoState, DemoTaskKind, DemoLane],
    schedule: DemoSchedule,
) -> None:
    """Declare the runtime-task schedules (and the sample-work feeder) on ``runtime``."""
    bodies = _Bodies(store, registry, schedule)
    runtime.scheduled(
        DemoRuntimeTask.SYSTEM_HEALTH_CHECK,
        schedule.health_check,
        timedelta(seconds=2),
        bodies.runtime_task,
    )
    runtime.scheduled(
        DemoRuntimeTask.TEMP_DIR_SWEEP,
        schedule.temp_sweep,
        timedelta(seconds=4),
        bodies.runtime_task,
    )
    runtime.scheduled(
        DemoRuntimeTask.FINISHED_TASK_CLEANUP,
        schedule.cleanup,
        timedelta(seconds=6),
        bodies.runtime_task,
    )
    if schedule.sample_work > timedelta(0):
        runtime.scheduled(
            SAMPLE_WORK, schedule.sample_work, schedule.sample_work, bodies.sample_work
        )
