"""Background tasks for products that keep their own task table.

Typed specs and a registry keyed by the product's own kinds, the runtime-task catalog,
steps, the lease, the worker, dedupe keys, the scheduled catalog and the store
protocol. The records and statuses every user meets (``TaskStatus``,
``BackgroundTaskRecord``, ``TaskExecutionContext``, retry and retention types) are
imported from :mod:`aster_forge`. Imports :mod:`aster_forge.runtime` only; stores are
protocols implemented by :mod:`aster_forge.db` or by the product. Every error is in
:mod:`aster_forge.tasks.errors` and every protocol in :mod:`aster_forge.tasks.protocols`;
the door re-exports the ones a product catches or implements.
"""

from __future__ import annotations

# --- specs, registry, catalog, steps, lease ---
from ._catalog import RuntimeTaskCatalog, RuntimeTaskDefinition, RuntimeTaskName
from ._lease import TaskLease, TaskLeaseGuard
from ._registry import TaskRegistry
from ._workflow import TaskDependency
from ._spec import TaskSpec
from ._steps import TaskStepSpec
from .errors import TaskInvalidValueError, TaskLeaseLostError, TaskPayloadError

# isort: split
# --- the store ---
from ._records import NewTask
from ._retention import task_retention_worker
from ._store_base import TaskStoreBase
from .protocols import BackgroundTaskStore

# isort: split
# --- the worker: dispatch, execution, heartbeat, temp dirs ---
from ._dispatch import (
    ClaimedTaskOutcome,
    DispatchPollConfig,
    DispatchStatsRecorder,
    TaskLaneConfig,
)
from ._execution import ClaimedTaskExecution, ClaimedTaskExecutionConfig
from ._heartbeat import SharedTaskHeartbeat
from ._temp import TaskTempDirs, sweep_task_temp_dirs
from ._worker import TaskWorker

# isort: split
# --- runtime workers and the scheduled catalog ---
from ._background import BackgroundTasks
from ._background import BACKGROUND_TASKS_COMPONENT
from ._components import background_task_component_with_definitions_from_shutdown
from ._dedupe import TaskDedupeKey, scheduled_task_dedupe_key
from ._scheduled import LeasedScheduledRuntimeConfig, ScheduledJob
from ._schedules import CronSchedule, IntervalSchedule, ScheduledTaskOutcome, ScheduledTaskRun
from .protocols import ScheduledTaskStore

__all__ = [
    "BACKGROUND_TASKS_COMPONENT",
    "BackgroundTaskStore",
    "BackgroundTasks",
    "ClaimedTaskExecution",
    "ClaimedTaskExecutionConfig",
    "ClaimedTaskOutcome",
    "CronSchedule",
    "DispatchPollConfig",
    "DispatchStatsRecorder",
    "IntervalSchedule",
    "LeasedScheduledRuntimeConfig",
    "NewTask",
    "RuntimeTaskCatalog",
    "RuntimeTaskDefinition",
    "RuntimeTaskName",
    "ScheduledJob",
    "ScheduledTaskOutcome",
    "ScheduledTaskRun",
    "ScheduledTaskStore",
    "SharedTaskHeartbeat",
    "TaskDedupeKey",
    "TaskDependency",
    "TaskInvalidValueError",
    "TaskLaneConfig",
    "TaskLease",
    "TaskLeaseGuard",
    "TaskLeaseLostError",
    "TaskPayloadError",
    "TaskRegistry",
    "TaskSpec",
    "TaskStepSpec",
    "TaskStoreBase",
    "TaskTempDirs",
    "TaskWorker",
    "background_task_component_with_definitions_from_shutdown",
    "scheduled_task_dedupe_key",
    "sweep_task_temp_dirs",
    "task_retention_worker",
]
