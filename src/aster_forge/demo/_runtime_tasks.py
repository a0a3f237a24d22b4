"""The demo's runtime (system) task catalog and the body that runs its entries.

Runtime tasks are rows of kind ``runtime.task`` on the ``maintenance`` lane whose
payload names a catalog entry by wire value. Unknown (legacy) wire values still decode
(:class:`~aster_forge.tasks.RuntimeTaskName`) and fail permanently with a clear text.
"""

from __future__ import annotations

import enum
from datetime import timedelta

from aster_forge.runtime import HealthCheckScope, HealthStatus
from aster_forge.tasks import (
    ClassifiedTaskError,
    RuntimeTaskCatalog,
    RuntimeTaskDefinition,
    RuntimeTaskName,
    TaskExecutionContext,
    TaskLease,
    TaskRetryClass,
    TaskStatus,
    TaskStepSpec,
    sweep_task_temp_dirs,
)

from ._model import MaintenancePayload, MaintenanceResult
from ._state import DemoState

__all__ = [
    "MAINTENANCE_STEPS",
    "RUNTIME_TASKS",
    "DemoRuntimeTask",
    "RuntimeTaskPresentation",
    "run_maintenance",
]

MAINTENANCE_STEPS: tuple[TaskStepSpec, ...] = (
    TaskStepSpec("prepare", "Prepare"),
    TaskStepSpec("run", "Run"),
)
"""The visible steps of a runtime task."""


class DemoRuntimeTask(enum.Enum):
    """The demo's runtime tasks (stored by wire value in the maintenance payload)."""

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
    if state.run_health is None:
        raise ClassifiedTaskError("No health registry is configured", TaskRetryClass.PERMANENT)
    report = await state.run_health(HealthCheckScope.READINESS)
    if report.status() is HealthStatus.UNHEALTHY:
        # The seed's projection: the failing components go into the failure record.
        raise ClassifiedTaskError(f"Unhealthy: {report.issue_summary()}", TaskRetryClass.RETRYABLE)
    checked = len(report.components)
    return f"{report.status().as_str()} ({checked} components)", checked


async def _cleanup(state: DemoState, older_than: timedelta) -> tuple[str, int]:
    if state.purge_finished is None:
        raise ClassifiedTaskError("No task table is configured", TaskRetryClass.PERMANENT)
    removed = await state.purge_finished(older_than)
    return f"removed {removed} finished tasks older than {older_than}", removed


async def _sweep(state: DemoState, min_age: timedelta) -> tuple[str, int]:
    leases: list[TaskLease] = []
    if state.store is not None:
        before: int | None = None
        while True:
            page = await state.store.list_tasks(
                status=TaskStatus.RUNNING, limit=1000, before_id=before
            )
            leases.extend(
                TaskLease(r.id, r.processing_token, r.lease_expires_at)
                for r in page.items
                if r.processing_token is not None and r.lease_expires_at is not None
            )
            if page.next_before_id is None:
                break
            before = page.next_before_id
    removed = await sweep_task_temp_dirs(state.temp_root, leases, min_age=min_age)
    return f"removed {len(removed)} stale task temp dirs", len(removed)


async def run_maintenance(
    ctx: TaskExecutionContext, state: DemoState, payload: MaintenancePayload
) -> MaintenanceResult:
    """Run the runtime task the payload names."""
    name = RuntimeTaskName.parse(DemoRuntimeTask, payload.task)
    await ctx.step_active("prepare", detail=name.display_name())
    known = name.known()
    if known is None:
        raise ClassifiedTaskError(
            f"Unknown runtime task {name.as_str()!r} (removed in this version)",
            TaskRetryClass.PERMANENT,
        )
    await ctx.sleep(state.pace)
    await ctx.step_succeeded("prepare")
    await ctx.step_active("run")
    age = timedelta(seconds=payload.older_than_seconds)
    if known is DemoRuntimeTask.SYSTEM_HEALTH_CHECK:
        summary, affected = await _health_check(state)
    elif known is DemoRuntimeTask.FINISHED_TASK_CLEANUP:
        summary, affected = await _cleanup(state, age)
    else:
        summary, affected = await _sweep(state, age)
    await ctx.step_succeeded("run", detail=summary)
    await state.record("runtime_task.finished", task_id=ctx.task_id, detail=summary)
    return MaintenanceResult(
        task=name.as_str(), display_name=name.display_name(), summary=summary, affected=affected
    )
