"""Sample work the demo enqueues: a mix that succeeds, retries and fails."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import TYPE_CHECKING

from aster_forge import EnqueueResult

from ._model import FailureMode, MaintenancePayload, MediaPayload, ReportPayload

if TYPE_CHECKING:
    from ._forge import DemoTasks

__all__ = ["SEED_PREFIX", "enqueue_sample_media", "seed_demo_tasks"]

SEED_PREFIX = "demo-seed:"
"""The dedupe-key prefix of the tasks :func:`seed_demo_tasks` enqueues."""

_MEDIA: tuple[tuple[str, int, FailureMode], ...] = (
    ("thumbnail", 512, "none"),
    ("thumbnail", 1024, "flaky"),
    ("thumbnail", 768, "none"),
    ("thumbnail", 256, "corrupt"),
    ("transcode", 1536, "none"),
    ("transcode", 1280, "quota"),
    ("transcode", 1024, "none"),
)
_REPORTS: tuple[tuple[str, int, FailureMode], ...] = (
    ("daily-usage", 1200, "none"),
    ("billing", 480, "flaky"),
    ("signups", 90, "none"),
    ("audit-trail", 3000, "none"),
    ("inventory", 60, "none"),
)


async def seed_demo_tasks(tasks: DemoTasks, *, batch: str | None = None) -> list[EnqueueResult]:
    """Enqueue the media and report pipelines plus two runtime tasks.

    Args:
        tasks: The demo's task handles.
        batch: A label for the dedupe keys; seeding the same batch twice adds nothing.
    """
    key = f"{SEED_PREFIX}{batch or uuid.uuid4().hex[:12]}:"
    made = []
    for index, (handle, size_kb, failure) in enumerate(_MEDIA, start=1):
        url = f"https://media.example/assets/{index}"
        payload = MediaPayload(asset_id=index, source_url=url, size_kb=size_kb, failure=failure)
        task = tasks.thumbnail if handle == "thumbnail" else tasks.transcode
        made.append(await task.enqueue(payload, dedupe_key=f"{key}media-{index}"))
    for report, rows, failure in _REPORTS:
        payload_ = ReportPayload(report=report, rows=rows, failure=failure)
        made.append(await tasks.report.enqueue(payload_, dedupe_key=f"{key}report-{report}"))
    health = MaintenancePayload(task="system-health-check")
    made.append(
        await tasks.runtime_task.enqueue(health, dedupe_key=f"{key}runtime-health", priority=10)
    )
    # A wire value from an older release: decodes as a legacy name and fails permanently.
    legacy = MaintenancePayload(task="removed-maintenance-task")
    made.append(await tasks.runtime_task.enqueue(legacy, dedupe_key=f"{key}runtime-legacy"))
    return made


async def enqueue_sample_media(tasks: DemoTasks, firing: datetime) -> None:
    """Two more thumbnails for one ``sample-work`` firing (deduped per firing)."""
    stamp = int(firing.timestamp())
    for offset in range(2):
        payload = MediaPayload(
            asset_id=1000 + (stamp % 1000) * 2 + offset,
            source_url=f"https://media.example/uploads/{stamp}-{offset}",
            size_kb=512 + 256 * offset,
        )
        await tasks.thumbnail.enqueue(payload, dedupe_key=f"sample-work:{stamp}:{offset}")
