"""The demo's task bodies (fetch -> transform -> publish) and its task registry."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from aster_forge.tasks import (
    ClassifiedTaskError,
    TaskExecutionContext,
    TaskRegistry,
    TaskRetryClass,
    TaskSpec,
)

from ._model import (
    PIPELINE_STEPS,
    DemoLane,
    DemoTaskKind,
    MaintenancePayload,
    MaintenanceResult,
    MediaPayload,
    MediaResult,
    ReportPayload,
    ReportResult,
)
from ._runtime_tasks import MAINTENANCE_STEPS, run_maintenance
from ._state import DemoState

__all__ = ["DEMO_TASKS", "build_task_registry", "run_media", "run_report"]

CHUNK_KB = 256
MAX_CHUNKS = 6


def _chunks(size_kb: int) -> int:
    return max(1, min(MAX_CHUNKS, size_kb // CHUNK_KB))


async def _fetch(ctx: TaskExecutionContext, state: DemoState, source: str, chunks: int) -> None:
    await ctx.step_active("fetch", detail=f"GET {source}", progress=(0, chunks))
    for done in range(1, chunks + 1):
        await ctx.sleep(state.pace)
        await ctx.step_active("fetch", detail=f"GET {source}", progress=(done, chunks))
    await ctx.step_succeeded("fetch", detail=f"{chunks} chunks", progress=(chunks, chunks))


async def _transform(
    ctx: TaskExecutionContext, state: DemoState, failure: str, passes: int
) -> None:
    await ctx.step_active("transform", progress=(0, passes))
    if failure == "flaky" and ctx.attempt == 1:  # 1-based: the first execution
        await ctx.sleep(state.pace)
        # Retryable: the executor puts the task back to pending with a backoff delay.
        raise ClassifiedTaskError(
            "Transcoder busy (simulated); retrying later", TaskRetryClass.RETRYABLE
        )
    if failure == "corrupt":
        await ctx.sleep(state.pace)
        raise ClassifiedTaskError("Source file is corrupt (simulated)", TaskRetryClass.PERMANENT)
    for done in range(1, passes + 1):
        await ctx.sleep(state.pace)
        await ctx.step_active("transform", progress=(done, passes))
    await ctx.step_succeeded("transform", progress=(passes, passes))


async def _publish(
    ctx: TaskExecutionContext, state: DemoState, failure: str, artifact: str, body: str
) -> Path:
    await ctx.step_active("publish", detail=artifact)
    if failure == "quota" and ctx.task_id not in state.quota_failed:
        state.quota_failed.add(ctx.task_id)
        raise ClassifiedTaskError(
            "Publish quota exceeded (simulated); retry by hand", TaskRetryClass.MANUAL
        )
    # The staged file lives in the task's private temp dir, removed after the execution.
    staged = await ctx.temp_dir() / artifact
    await asyncio.to_thread(staged.write_text, body, "utf-8")
    await ctx.sleep(state.pace)
    await ctx.step_succeeded("publish", detail=artifact)
    return staged


async def run_media(
    ctx: TaskExecutionContext, state: DemoState, payload: MediaPayload
) -> MediaResult:
    """Fetch the source in chunks, transform it, publish the rendition."""
    chunks = _chunks(payload.size_kb)
    await _fetch(ctx, state, payload.source_url, chunks)
    await _transform(ctx, state, payload.failure, passes=2)
    artifact = f"asset-{payload.asset_id}.bin"
    await _publish(ctx, state, payload.failure, artifact, payload.source_url)
    await state.record("task.published", task_id=ctx.task_id, detail=artifact)
    return MediaResult(
        asset_id=payload.asset_id, published_url=f"/published/{artifact}", chunks=chunks
    )


async def run_report(
    ctx: TaskExecutionContext, state: DemoState, payload: ReportPayload
) -> ReportResult:
    """Query the rows, render the report, publish it."""
    await _fetch(ctx, state, f"db://reports/{payload.report}", 2)
    await _transform(ctx, state, payload.failure, passes=1)
    artifact = f"{payload.report}.csv"
    await _publish(ctx, state, payload.failure, artifact, f"rows={payload.rows}\n")
    await state.record("task.published", task_id=ctx.task_id, detail=artifact)
    return ReportResult(report=payload.report, rows=payload.rows, location=f"/reports/{artifact}")


async def _run_maintenance(
    ctx: TaskExecutionContext, state: DemoState, payload: MaintenancePayload
) -> MaintenanceResult:
    return await run_maintenance(ctx, state, payload)


def _media_spec(kind: DemoTaskKind) -> TaskSpec[DemoState, MediaPayload, MediaResult]:
    # Thumbnails and transcodes run the same media pipeline; only the kind differs.
    return TaskSpec(
        kind=kind,
        payload_type=MediaPayload,
        result_type=MediaResult,
        run=run_media,
        steps=PIPELINE_STEPS,
    )


THUMBNAIL = _media_spec(DemoTaskKind.THUMBNAIL_RENDER)
TRANSCODE = _media_spec(DemoTaskKind.VIDEO_TRANSCODE)
REPORT: TaskSpec[DemoState, ReportPayload, ReportResult] = TaskSpec(
    kind=DemoTaskKind.REPORT_EXPORT,
    payload_type=ReportPayload,
    result_type=ReportResult,
    run=run_report,
    steps=PIPELINE_STEPS,
)
MAINTENANCE: TaskSpec[DemoState, MaintenancePayload, MaintenanceResult] = TaskSpec(
    kind=DemoTaskKind.RUNTIME_TASK,
    payload_type=MaintenancePayload,
    result_type=MaintenanceResult,
    run=_run_maintenance,
    steps=MAINTENANCE_STEPS,
)
DEMO_TASKS: tuple[TaskSpec[DemoState, Any, Any], ...] = (THUMBNAIL, TRANSCODE, REPORT, MAINTENANCE)
"""Every spec of the demo, one per :class:`DemoTaskKind` member."""


def build_task_registry() -> TaskRegistry[DemoState, DemoTaskKind, DemoLane]:
    """Return the demo's validated registry: kind -> spec, kind -> lane."""
    registry: TaskRegistry[DemoState, DemoTaskKind, DemoLane] = TaskRegistry(
        kind=DemoTaskKind, lane=DemoLane
    )
    for spec in DEMO_TASKS:
        registry.register(spec)
    registry.lane(DemoLane.MEDIA, [DemoTaskKind.THUMBNAIL_RENDER, DemoTaskKind.VIDEO_TRANSCODE])
    registry.lane(DemoLane.FALLBACK, [DemoTaskKind.REPORT_EXPORT])
    registry.lane(DemoLane.MAINTENANCE, [DemoTaskKind.RUNTIME_TASK])
    return registry.validate()
