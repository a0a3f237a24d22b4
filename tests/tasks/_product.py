"""A tiny example product used by the tasks-core tests: kinds, lanes, specs, catalog."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel
from typing_extensions import TypedDict

from aster_forge import ClassifiedTaskError, TaskExecutionContext, TaskRetryClass
from aster_forge.tasks import RuntimeTaskCatalog, RuntimeTaskDefinition, TaskSpec, TaskStepSpec


class Kind(enum.Enum):
    THUMBNAIL = "thumbnail"
    ARCHIVE = "archive"
    CLEANUP = "cleanup"


class Lane(enum.Enum):
    MEDIA = "media"
    FALLBACK = "fallback"


@dataclass
class AppState:
    calls: list[str]


class ThumbnailPayload(BaseModel):
    file_id: int
    width: int
    height: int


class ThumbnailResult(BaseModel):
    path: str


@dataclass
class ArchivePayload:
    files: list[int]


class CleanupPayload(TypedDict):
    older_than_days: int


async def run_thumbnail(
    ctx: TaskExecutionContext, state: AppState, payload: ThumbnailPayload
) -> ThumbnailResult:
    state.calls.append(f"thumbnail:{payload.file_id}")
    if payload.width > 10_000:
        raise ClassifiedTaskError("Image too large", TaskRetryClass.PERMANENT)
    return ThumbnailResult(path=f"/thumbs/{payload.file_id}_{payload.width}x{payload.height}.png")


async def run_archive(ctx: TaskExecutionContext, state: AppState, payload: ArchivePayload) -> int:
    state.calls.append("archive")
    return len(payload.files)


async def run_cleanup(ctx: TaskExecutionContext, state: AppState, payload: CleanupPayload) -> None:
    state.calls.append(f"cleanup:{payload['older_than_days']}")


THUMBNAIL: TaskSpec[AppState, ThumbnailPayload, ThumbnailResult] = TaskSpec(
    kind=Kind.THUMBNAIL,
    payload_type=ThumbnailPayload,
    result_type=ThumbnailResult,
    run=run_thumbnail,
    steps=(TaskStepSpec("load", "Load image"), TaskStepSpec("render", "Render thumbnail")),
)
ARCHIVE: TaskSpec[AppState, ArchivePayload, int] = TaskSpec(
    kind=Kind.ARCHIVE, payload_type=ArchivePayload, result_type=int, run=run_archive
)
CLEANUP: TaskSpec[AppState, CleanupPayload, None] = TaskSpec(
    kind=Kind.CLEANUP, payload_type=CleanupPayload, result_type=None, run=run_cleanup
)
ALL_SPECS: tuple[TaskSpec[AppState, Any, Any], ...] = (THUMBNAIL, ARCHIVE, CLEANUP)


class SystemRuntimeTaskKind(enum.Enum):
    SYSTEM_HEALTH_CHECK = enum.auto()
    AUDIT_CLEANUP = enum.auto()

    def as_str(self) -> str:
        return RUNTIME_TASKS.as_str(self)

    def display_name(self) -> str:
        return RUNTIME_TASKS.display_name(self)

    @classmethod
    def from_wire_value(cls, value: str) -> SystemRuntimeTaskKind | None:
        return RUNTIME_TASKS.from_wire_value(value)


class Presentation(enum.Enum):
    HEALTH = "runtime_task.system_health_check"
    AUDIT = "runtime_task.audit_cleanup"


RUNTIME_TASKS: RuntimeTaskCatalog[SystemRuntimeTaskKind, Presentation] = RuntimeTaskCatalog(
    SystemRuntimeTaskKind,
    [
        RuntimeTaskDefinition(
            SystemRuntimeTaskKind.SYSTEM_HEALTH_CHECK,
            "system-health-check",
            "System health check",
            Presentation.HEALTH,
        ),
        RuntimeTaskDefinition(
            SystemRuntimeTaskKind.AUDIT_CLEANUP,
            "audit-cleanup",
            "Audit cleanup",
            Presentation.AUDIT,
        ),
    ],
)
