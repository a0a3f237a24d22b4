"""Background tasks: typed specs, registries, claiming, leases, dispatch and workers.

Imports :mod:`aster_forge.runtime` only; stores are protocols implemented by
:mod:`aster_forge.db` or by the product.
"""

from __future__ import annotations

from .errors import AsterForgeTasksError

# --- tasks core (issue 6) ---
# isort: split
from ._catalog import (
    RegisteredRuntimeTaskKind,
    RuntimeTaskCatalog,
    RuntimeTaskDefinition,
    RuntimeTaskName,
    legacy_runtime_task_display_name,
)
from ._context import TaskExecutionContext
from ._heartbeat import run_task_heartbeat, task_heartbeat_interval
from ._lease import TaskLease, TaskLeaseGuard, TaskLeaseTermination
from ._registry import TaskRegistry
from ._retry import (
    ClassifiedTaskError,
    TaskErrorClassifier,
    TaskFailureClassification,
    TaskRetryClass,
    TaskRetryPolicy,
    classify_task_error,
    default_task_retry_delay,
    should_auto_retry,
)
from ._spec import ErasedTaskSpec, TaskSpec, task_kind_label
from ._steps import (
    TaskStepInfo,
    TaskStepSpec,
    TaskStepStatus,
    initial_task_steps_from_specs,
    mark_active_step_failed,
    parse_task_steps_json,
    serialize_task_steps_json,
    set_task_step_active,
    set_task_step_skipped,
    set_task_step_succeeded,
    task_step_status_json_schema,
    task_steps_json_schema,
)
from .errors import (
    RuntimeTaskCatalogError,
    TaskCodecError,
    TaskCoreError,
    TaskCoreErrorKind,
    TaskInvalidValueError,
    TaskIoError,
    TaskLeaseControlError,
    TaskLeaseLostError,
    TaskLeaseRenewalTimeoutError,
    TaskPayloadError,
    TaskRegistryError,
    TaskStepNotFoundError,
    TaskWorkerShutdownRequestedError,
    is_task_lease_control_error,
    is_task_lease_lost,
    is_task_lease_renewal_timed_out,
    is_task_worker_shutdown_requested,
)
from .protocols import (
    ClaimableTaskRecord,
    ClaimedTaskExecutionStore,
    ExecutableTaskRecord,
    TaskClaimStore,
    TaskHeartbeatStore,
    TaskRecord,
    TaskTempDirProvider,
)

# isort: split
# --- dedupe / schedule types (issue 5) ---
from ._dedupe import TaskDedupeKey, scheduled_task_dedupe_key
from ._schedule_types import (
    ScheduledTaskClaim,
    ScheduledTaskOutcome,
    ScheduledTaskRecord,
    ScheduledTaskRunStatus,
)
from .errors import ScheduledTaskValueError, TaskDedupeKeyError
from .protocols import ScheduledTaskStore

# isort: split
# --- reference task store (issue 7) ---
from ._records import (
    LEASE_EXPIRED_ERROR,
    BackgroundTaskRecord,
    EnqueueResult,
    NewTask,
    TaskCancelOutcome,
    TaskCompletion,
    TaskFailureReason,
    TaskLaneCounts,
    TaskPage,
    TaskStatus,
)
from .errors import TaskEnqueueValueError, TaskNotFoundError, TaskStateError
from .protocols import BackgroundTaskStore

__all__ = [
    "AsterForgeTasksError",
    "BackgroundTaskRecord",
    "BackgroundTaskStore",
    "ClaimableTaskRecord",
    "ClaimedTaskExecutionStore",
    "ClassifiedTaskError",
    "EnqueueResult",
    "ErasedTaskSpec",
    "ExecutableTaskRecord",
    "LEASE_EXPIRED_ERROR",
    "NewTask",
    "RegisteredRuntimeTaskKind",
    "RuntimeTaskCatalog",
    "RuntimeTaskCatalogError",
    "RuntimeTaskDefinition",
    "RuntimeTaskName",
    "ScheduledTaskClaim",
    "ScheduledTaskOutcome",
    "ScheduledTaskRecord",
    "ScheduledTaskRunStatus",
    "ScheduledTaskStore",
    "ScheduledTaskValueError",
    "TaskCancelOutcome",
    "TaskClaimStore",
    "TaskCodecError",
    "TaskCompletion",
    "TaskCoreError",
    "TaskCoreErrorKind",
    "TaskDedupeKey",
    "TaskDedupeKeyError",
    "TaskEnqueueValueError",
    "TaskErrorClassifier",
    "TaskExecutionContext",
    "TaskFailureClassification",
    "TaskFailureReason",
    "TaskHeartbeatStore",
    "TaskInvalidValueError",
    "TaskIoError",
    "TaskLaneCounts",
    "TaskLease",
    "TaskLeaseControlError",
    "TaskLeaseGuard",
    "TaskLeaseLostError",
    "TaskLeaseRenewalTimeoutError",
    "TaskLeaseTermination",
    "TaskNotFoundError",
    "TaskPage",
    "TaskPayloadError",
    "TaskRecord",
    "TaskRegistry",
    "TaskRegistryError",
    "TaskRetryClass",
    "TaskRetryPolicy",
    "TaskSpec",
    "TaskStateError",
    "TaskStatus",
    "TaskStepInfo",
    "TaskStepNotFoundError",
    "TaskStepSpec",
    "TaskStepStatus",
    "TaskTempDirProvider",
    "TaskWorkerShutdownRequestedError",
    "classify_task_error",
    "default_task_retry_delay",
    "initial_task_steps_from_specs",
    "is_task_lease_control_error",
    "is_task_lease_lost",
    "is_task_lease_renewal_timed_out",
    "is_task_worker_shutdown_requested",
    "legacy_runtime_task_display_name",
    "mark_active_step_failed",
    "parse_task_steps_json",
    "run_task_heartbeat",
    "scheduled_task_dedupe_key",
    "serialize_task_steps_json",
    "set_task_step_active",
    "set_task_step_skipped",
    "set_task_step_succeeded",
    "should_auto_retry",
    "task_heartbeat_interval",
    "task_kind_label",
    "task_step_status_json_schema",
    "task_steps_json_schema",
]
