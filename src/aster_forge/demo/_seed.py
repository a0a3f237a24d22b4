"""Sample work the demo enqueues at start: a mix that succeeds, retries and fails."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from aster_forge.tasks import BackgroundTaskStore, EnqueueResult, NewTask, TaskRegistry

from ._model import (
    DemoLane,
    DemoTaskKind,
    FailureMode,
    MaintenancePayload,
    MediaPayload,
    ReportPayload,
)
from ._runtime_tasks import DemoRuntimeTask
from ._state import DemoState
from ._tasks import build_task_registry

__all__ = ["sample_tasks", "seed_demo_tasks"]

_MEDIA: tuple[tuple[DemoTaskKind, int, FailureMode], ...] = (
    (DemoTaskKind.THUMBNAIL_RENDER, 512, "none"),
    (DemoTaskKind.THUMBNAIL_RENDER, 1024, "flaky"),
    (DemoTaskKind.THUMBNAIL_RENDER, 768, "none"),
    (DemoTaskKind.THUMBNAIL_RENDER, 256, "corrupt"),
    (DemoTaskKind.VIDEO_TRANSCODE, 1536, "none"),
    (DemoTaskKind.VIDEO_TRANSCODE, 1280, "quota"),
    (DemoTaskKind.VIDEO_TRANSCODE, 1024, "none"),
)
_REPORTS: tuple[tuple[str, int, FailureMode], ...] = (
    ("daily-usage", 1200, "none"),
    ("billing", 480, "flaky"),
    ("signups", 90, "none"),
    ("audit-trail", 3000, "none"),
    ("inventory", 60, "none"),
)


def sample_tasks(
    registry: TaskRegistry[DemoState, DemoTaskKind, DemoLane] | None = None,
    *,
    batch: str | None = None,
) -> list[NewTask]:
    """Build the sample tasks: media and report pipelines plus runtime tasks.

    Args:
        registry: The demo registry (built when omitted).
        batch: A label for dedupe keys; enqueuing the same batch twice adds nothing.
    """
    tasks = registry or build_task_registry()
    label = batch or uuid.uuid4().hex[:12]
    out: list[NewTask] = []

    def add(kind: DemoTaskKind, payload: object, name: str, priority: int = 0) -> None:
        spec = tasks.spec_for(kind)
        out.append(
            NewTask(
                kind=kind,
                lane=tasks.lane_of(kind),
                payload_json=spec.spec.encode_payload(payload),
                steps_json=spec.initial_steps_json(),
                priority=priority,
                max_attempts=3,
                dedupe_key=f"demo-seed:{label}:{name}",
            )
        )

    for index, (kind, size_kb, failure) in enumerate(_MEDIA, start=1):
        payload = MediaPayload(
            asset_id=index,
            source_url=f"https://media.example/assets/{index}",
            size_kb=size_kb,
            failure=failure,
        )
        add(kind, payload, f"media-{index}")
    for report, rows, failure in _REPORTS:
        add(
            DemoTaskKind.REPORT_EXPORT,
            ReportPayload(report=report, rows=rows, failure=failure),
            f"report-{report}",
        )
    add(
        DemoTaskKind.RUNTIME_TASK,
        MaintenancePayload(task=DemoRuntimeTask.SYSTEM_HEALTH_CHECK.as_str()),
        "runtime-health",
        priority=10,
    )
    # A wire value from an older release: decodes as a legacy name and fails permanently.
    add(
        DemoTaskKind.RUNTIME_TASK,
        MaintenancePayload(task="removed-maintenance-task"),
        "runtime-legacy",
    )
    return out


async def seed_demo_tasks(
    store: BackgroundTaskStore,
    registry: TaskRegistry[DemoState, DemoTaskKind, DemoLane] | None = None,
    *,
    batch: str | None = None,
) -> Sequence[EnqueueResult]:
    """Enqueue :func:`sample_tasks` in one transaction; returns the results in order."""
    return await store.enqueue_many(sample_tasks(registry, batch=batch))
