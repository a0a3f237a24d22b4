"""The demo product on the Forge API: lanes, tasks, periodic jobs and resources.

Everything the workers run is declared here; :mod:`._app` only runs the forge.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from aster_forge import (
    ClassifiedTaskError,
    Forge,
    ForgeTask,
    ForgeWorkerSettings,
    TaskExecutionContext,
    TaskRetryClass,
    TaskRetryPolicy,
)
from aster_forge.runtime import CancellationToken, HealthComponentReport
from aster_forge.tasks import DispatchPollConfig

from ._audit import AuditLog, audit_events_table
from ._model import (
    LANE_LIMITS,
    PIPELINE_STEPS,
    DemoLane,
    MaintenancePayload,
    MaintenanceResult,
    MediaPayload,
    MediaResult,
    ReportPayload,
    ReportResult,
)
from ._runtime_tasks import DemoRuntimeTask, run_runtime_task
from ._seed import enqueue_sample_media, seed_demo_tasks
from ._state import DemoState

__all__ = ["DEMO_NAME", "DemoSchedule", "DemoTasks", "build_demo_forge"]

DEMO_NAME = "aster-forge-demo"
"""The forge's name: the scheduled catalog namespace and the scheduler lease's prefix."""


@dataclass(frozen=True, slots=True)
class DemoSchedule:
    """When the demo's periodic jobs fire.

    Attributes:
        health_check: How often the system health check runs.
        temp_sweep: How often stale task temp dirs are swept.
        cleanup_cron: The cron expression of the finished-task cleanup.
        sample_work: How often new sample pipelines are enqueued (zero: never).
        cleanup_older_than: The age past which finished tasks are purged.
    """

    health_check: timedelta = timedelta(seconds=10)
    temp_sweep: timedelta = timedelta(seconds=20)
    cleanup_cron: str = "* * * * *"
    sample_work: timedelta = timedelta(seconds=12)
    cleanup_older_than: timedelta = timedelta(minutes=10)


@dataclass(frozen=True, slots=True)
class DemoTasks:
    """The demo's task handles (``await tasks.thumbnail.enqueue(...)``)."""

    thumbnail: ForgeTask
    transcode: ForgeTask
    report: ForgeTask
    runtime_task: ForgeTask


async def _fetch(ctx: TaskExecutionContext, pace: float, source: str, chunks: int) -> None:
    await ctx.step_active("fetch", detail=f"GET {source}", progress=(0, chunks))
    for done in range(1, chunks + 1):
        await ctx.sleep(pace)
        await ctx.step_active("fetch", detail=f"GET {source}", progress=(done, chunks))
    await ctx.step_succeeded("fetch", detail=f"{chunks} chunks", progress=(chunks, chunks))


async def _transform(ctx: TaskExecutionContext, pace: float, failure: str, passes: int) -> None:
    await ctx.step_active("transform", progress=(0, passes))
    await ctx.sleep(pace)
    if failure == "flaky" and ctx.attempt == 1:
        # Retryable: the worker puts the task back to pending with a backoff delay.
        raise ClassifiedTaskError("Transcoder busy (simulated); retrying later")
    if failure == "corrupt":
        raise ClassifiedTaskError("Source file is corrupt (simulated)", TaskRetryClass.PERMANENT)
    for done in range(1, passes + 1):
        await ctx.sleep(pace)
        await ctx.step_active("transform", progress=(done, passes))
    await ctx.step_succeeded("transform", progress=(passes, passes))


async def _publish(
    ctx: TaskExecutionContext, state: DemoState, failure: str, artifact: str, body: str
) -> None:
    await ctx.step_active("publish", detail=artifact)
    if failure == "quota" and ctx.task_id not in state.quota_failed:
        state.quota_failed.add(ctx.task_id)
        raise ClassifiedTaskError(
            "Publish quota exceeded (simulated); retry by hand", TaskRetryClass.MANUAL
        )
    # Staged in the task's private temp dir, removed after the execution.
    staged = await ctx.temp_dir() / artifact
    await asyncio.to_thread(staged.write_text, body, "utf-8")
    await ctx.sleep(state.pace)
    await ctx.step_succeeded("publish", detail=artifact)
    await state.record("task.published", task_id=ctx.task_id, detail=artifact)


def build_demo_forge(
    database_url: str,
    *,
    pace: float = 0.4,
    temp_root: Path,
    schedule: DemoSchedule | None = None,
    retry_delay: timedelta = timedelta(seconds=2),
    seed: bool = False,
) -> tuple[Forge, DemoTasks]:
    """Declare the demo on a new forge (a function, so a test can run several demos).

    A product with one database declares the same at module level instead.

    Args:
        database_url: The database (``memory://`` for declarations only).
        pace: Seconds per unit of simulated work.
        temp_root: Root of the per-task temp directories.
        schedule: When the periodic jobs fire.
        retry_delay: Base backoff of a retryable failure.
        seed: Enqueue the sample work when the resources open (before the workers).
    """
    when = schedule if schedule is not None else DemoSchedule()
    forge = Forge(
        database_url,
        name=DEMO_NAME,
        create_tables=True,  # the demo creates its tables on every backend; a product migrates
        settings=ForgeWorkerSettings(
            poll=DispatchPollConfig(
                base_interval=timedelta(seconds=0.5), max_interval=timedelta(seconds=2)
            ),
            task_lease_ttl=timedelta(seconds=10),
            retry=TaskRetryPolicy(base_delay=retry_delay),
            shutdown_grace=timedelta(seconds=3),
            scheduler_lease_ttl=timedelta(seconds=6),  # a standby takes over quickly
            scheduler_claim_ttl=timedelta(seconds=30),
            temp_root=temp_root,
        ),
    )
    for lane, limit in LANE_LIMITS.items():
        forge.lane(lane, concurrency=limit)
    audit_table = audit_events_table(forge.metadata)

    @forge.resources
    async def resources() -> AsyncIterator[DemoState]:
        engine = forge.backend.engine
        assert engine is not None, "the demo runs on a database"
        audit = AuditLog(engine, audit_table)
        await audit.start()
        stop = CancellationToken()
        retry = asyncio.create_task(audit.run_retry_loop(stop), name="demo-audit-retry")
        state = DemoState(forge, audit, pace, temp_root, when.cleanup_older_than)
        try:
            if seed:
                made = await seed_demo_tasks(tasks)
                await state.record("demo.seeded", detail=f"{len(made)} sample tasks")
            yield state
        finally:
            stop.cancel()
            await retry
            await audit.stop(timedelta(seconds=5))  # drained after the workers stopped

    @forge.health_check("audit_log")
    async def audit_health(state: DemoState | None) -> HealthComponentReport:
        if state is None:
            return HealthComponentReport.degraded("audit_log", "audit log not open")
        return state.audit.health("audit_log")

    async def media(
        ctx: TaskExecutionContext, payload: MediaPayload, state: DemoState
    ) -> MediaResult:
        chunks = max(1, min(6, payload.size_kb // 256))
        await _fetch(ctx, state.pace, payload.source_url, chunks)
        await _transform(ctx, state.pace, payload.failure, passes=2)
        artifact = f"asset-{payload.asset_id}.bin"
        await _publish(ctx, state, payload.failure, artifact, payload.source_url)
        return MediaResult(
            asset_id=payload.asset_id, published_url=f"/published/{artifact}", chunks=chunks
        )

    # Thumbnails and transcodes run the same pipeline under two kinds.
    thumbnail, transcode = (
        forge.task(name=kind, lane=DemoLane.MEDIA, max_attempts=3, steps=PIPELINE_STEPS)(media)
        for kind in ("thumbnail.render", "video.transcode")
    )

    @forge.task(name="report.export", lane=DemoLane.FALLBACK, max_attempts=3, steps=PIPELINE_STEPS)
    async def report(
        ctx: TaskExecutionContext, payload: ReportPayload, state: DemoState
    ) -> ReportResult:
        await _fetch(ctx, state.pace, f"db://reports/{payload.report}", 2)
        await _transform(ctx, state.pace, payload.failure, passes=1)
        artifact = f"{payload.report}.csv"
        await _publish(ctx, state, payload.failure, artifact, f"rows={payload.rows}\n")
        return ReportResult(
            report=payload.report, rows=payload.rows, location=f"/reports/{artifact}"
        )

    @forge.task(name="runtime.task", lane=DemoLane.MAINTENANCE, max_attempts=3)
    async def runtime_task(
        ctx: TaskExecutionContext, payload: MaintenancePayload, state: DemoState
    ) -> MaintenanceResult:
        """A catalog entry requested by hand (or a legacy row from an older release)."""
        older_than = timedelta(seconds=payload.older_than_seconds)
        return await run_runtime_task(state, payload.task, older_than=older_than)

    def maintenance(
        entry: DemoRuntimeTask,
        *,
        every: timedelta | None = None,
        initial_delay: timedelta | None = None,
        cron: str | None = None,
    ) -> None:
        @forge.periodic(
            name=entry.as_str(),
            lane=DemoLane.MAINTENANCE,
            every=every,
            initial_delay=initial_delay,
            cron=cron,
        )
        async def job(ctx: TaskExecutionContext, state: DemoState) -> MaintenanceResult:
            older = state.cleanup_older_than
            return await run_runtime_task(state, entry.as_str(), older_than=older)

    maintenance(
        DemoRuntimeTask.SYSTEM_HEALTH_CHECK,
        every=when.health_check,
        initial_delay=timedelta(seconds=2),
    )
    maintenance(
        DemoRuntimeTask.TEMP_DIR_SWEEP, every=when.temp_sweep, initial_delay=timedelta(seconds=4)
    )
    maintenance(DemoRuntimeTask.FINISHED_TASK_CLEANUP, cron=when.cleanup_cron)
    tasks = DemoTasks(thumbnail, transcode, report, runtime_task)
    if when.sample_work > timedelta(0):

        @forge.periodic(name="sample-work", every=when.sample_work, lane=DemoLane.FALLBACK)
        async def sample_work(ctx: TaskExecutionContext, scheduled_at: datetime) -> None:
            """Keep the dashboard busy: two more thumbnails per firing."""
            await enqueue_sample_media(tasks, scheduled_at)

    return forge, tasks
