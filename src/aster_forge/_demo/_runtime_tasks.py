"""The demo's runtime (system) task catalog and what each entry does.

The catalog's wire values name the periodic jobs (``system-health-check`` ...) and
the payload of a ``runtime.task`` row requested by hand. A wire value from an older
release still decodes (:class:`~aster_forge.tasks.RuntimeTaskName`) and fails
permanently with a clear text instead of crashing the worker.
"""

from __future__ import annotations

import enum
from datetime import timedelta

from aster_forge import ClassifiedTaskError, TaskRetryClass, TaskStatus
from aster_forge.runtime import HealthCheckScope, HealthStatus
from aster_forge.tasks import (
    RuntimeTaskCatalog,
    RuntimeTaskDefinition,
    RuntimeTaskName,
    TaskLease,
    sweep_task_temp_dirs,
)

from ._model import MaintenanceResult
from ._state import DemoState

__all__ = ["RUNTIME_TASKS", "DemoRuntimeTask", "RuntimeTaskPresentation", "run_runtime_task"]


class DemoRuntimeTask(enum.Enum):
    """The demo's runtime tasks (stored by wire value)."""

    SYSTEM_HEALTH_CHECK = enum.auto()
    FINISHED_TASK_CLEANUP = enum.auto()
    TEMP_DIR_SWEEP = enum.auto()

    def as_str(self) -> str:
        """The wire value."""
        return RUNTIME_TASKS.as_str(self)

    def display_name(self) -> str:
        """The admin display name."""
        return RUNTIME_TASKS.display_name(self)

    @classmethod
    def from_wire_value(cls, value: str) -> DemoRuntimeTask | None:
        """The member for a wire value, or ``None`` for an unknown (legacy) one."""
        return RUNTIME_TASKS.from_wire_value(value)


class RuntimeTaskPresentation(enum.StrEnum):
    """i18n codes a front end would translate."""

    HEALTH = "runtime_task.system_health_check"
    CLEANUP = "runtime_task.finished_task_cleanup"
    TEMP_SWEEP = "runtime_task.temp_dir_sweep"


RUNTIME_TASKS: RuntimeTaskCatalog[DemoRuntimeTask, RuntimeTaskPresentation] = RuntimeTaskCatalog(
    DemoRuntimeTask,
    [
        RuntimeTaskDefinition(
            DemoRuntimeTask.SYSTEM_HEALTH_CHECK,
            "system-health-check",
            "System health check",
            RuntimeTaskPresentation.HEALTH,
        ),
        RuntimeTaskDefinition(
            DemoRuntimeTask.FINISHED_TASK_CLEANUP,
            "finished-task-cleanup",
            "Finished task cleanup",
            RuntimeTaskPresentation.CLEANUP,
        ),
        RuntimeTaskDefinition(
            DemoRuntimeTask.TEMP_DIR_SWEEP,
            "temp-dir-sweep",
            "Temp directory sweep",
            RuntimeTaskPresentation.TEMP_SWEEP,
        ),
    ],
)
RUNTIME_TASKS.check()


async def _health_check(state: DemoState) -> tuple[str, int]:
    report = await state.forge.run_health(HealthCheckScope.READINESS)
    if report.status() is HealthStatus.UNHEALTHY:
        # The failing components go into the failure record; the next firing retries.
        raise ClassifiedTaskError(f"Unhealthy: {report.issue_summary()}", TaskRetryClass.RETRYABLE)
    return f"{report.status().value} ({len(report.components)} components)", len(report.components)


async def _sweep(state: DemoState, min_age: timedelta) -> tuple[str, int]:
    # Every instance's running claims: demos on one machine share the temp root.
    page = await state.forge.backend.task_store.list_tasks(status=TaskStatus.RUNNING, limit=1000)
    running = [
        TaskLease(r.id, r.processing_token, r.lease_expires_at)
        for r in page.items
        if r.processing_token is not None and r.lease_expires_at is not None
    ]
    removed = await sweep_task_temp_dirs(state.temp_root, running, min_age=min_age)
    return f"removed {len(removed)} stale task temp dirs", len(removed)


async def run_runtime_task(
    state: DemoState, wire_value: str, *, older_than: timedelta
) -> MaintenanceResult:
    """Run the catalog entry ``wire_value`` names and audit what it did.

    Raises:
        ClassifiedTaskError: PERMANENT for a wire value no longer in the catalog,
            RETRYABLE when the health check finds the system unhealthy.
    """
    name = RuntimeTaskName.parse(DemoRuntimeTask, wire_value)
    known = name.known()
    if known is None:
        raise ClassifiedTaskError(
            f"Unknown runtime task {name.as_str()!r} (removed in this version)",
            TaskRetryClass.PERMANENT,
        )
    if known is DemoRuntimeTask.SYSTEM_HEALTH_CHECK:
        summary, affected = await _health_check(state)
    elif known is DemoRuntimeTask.FINISHED_TASK_CLEANUP:
        removed = await state.purge_finished(older_than)
        summary, affected = f"removed {removed} finished tasks older than {older_than}", removed
    else:
        summary, affected = await _sweep(state, older_than)
    await state.record("runtime_task.finished", detail=summary)
    return MaintenanceResult(
        task=name.as_str(), display_name=name.display_name(), summary=summary, affected=affected
    )
