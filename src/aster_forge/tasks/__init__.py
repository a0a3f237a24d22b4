"""Background tasks: typed specs, registries, claiming, leases, dispatch and workers.

Imports :mod:`aster_forge.runtime` only; stores are protocols implemented by
:mod:`aster_forge.db` or by the product.

For store implementations, the ``check_*`` and ``validate_*`` functions are the input
checks of the store protocols and the ``MAX_*`` constants their bounds: the database
stores and the in-memory stores of :mod:`aster_forge.testing` call them before touching
a row, so bad input raises the same typed error on every backend, and a product's own
store that calls them passes the same conformance suites.
"""

from __future__ import annotations

from .errors import AsterForgeTasksError

# --- tasks core ---
# isort: split
from ._catalog import (
    RegisteredRuntimeTaskKind,
    RuntimeTaskCatalog,
    RuntimeTaskDefinition,
    RuntimeTaskName,
)
from ._context import TaskExecutionContext
from ._heartbeat import SharedTaskHeartbeat
from ._workflow import TaskDependency
from ._lease import TaskLease, TaskLeaseGuard, TaskLeaseTermination, task_lease_termination_of
from ._registry import TaskRegistry
from ._retry import (
    ClassifiedTaskError,
    TaskErrorClassifier,
    TaskFailureClassification,
    TaskRetryClass,
    TaskRetryPolicy,
    classify_task_error,
    default_task_retry_delay,
)
from ._spec import ErasedTaskSpec, TaskSpec
from ._steps import (
    TaskStepInfo,
    TaskStepSpec,
    TaskStepStatus,
    initial_task_steps_from_specs,
    mark_active_step_failed,
    cancel_active_step,
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
    TaskInvalidValueError,
    TaskIoError,
    TaskLeaseControlError,
    TaskLeaseLostError,
    TaskLeaseRenewalTimeoutError,
    TaskPayloadError,
    TaskRegistryError,
    TaskStepNotFoundError,
    TaskTransactionUnavailableError,
    TaskWorkerShutdownRequestedError,
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
# --- dedupe / schedule types ---
from ._dedupe import MAX_TASK_DEDUPE_KEY_LENGTH, TaskDedupeKey, scheduled_task_dedupe_key
from ._schedule_types import (
    MAX_SCHEDULED_TASK_NAME_LENGTH,
    ScheduledTaskClaim,
    ScheduledTaskOutcome,
    ScheduledTaskRecord,
    ScheduledTaskRunStatus,
    stored_schedule_columns,
    validate_claim_scheduled_task_args,
    validate_complete_scheduled_task_args,
    validate_ensure_scheduled_task_args,
    validate_scheduled_claim,
    validate_scheduled_duration,
    validate_scheduled_identifier,
)
from .errors import ScheduledTaskValueError, TaskDedupeKeyError
from .protocols import ScheduledTaskStore

# isort: split
# --- reference task store ---
from ._records import (
    LEASE_EXPIRED_ERROR,
    MAX_TASK_ID,
    MAX_TASK_KIND_LENGTH,
    MAX_TASK_PAGE_SIZE,
    BackgroundTaskRecord,
    EnqueueResult,
    NewTask,
    TaskCancelOutcome,
    TaskCompletion,
    TaskFailureReason,
    TaskLaneCounts,
    TaskPage,
    TaskStatus,
    check_claim_args,
    check_list_tasks_args,
    check_retry_delay,
    check_run_at,
    check_ttl,
    wire_value,
)
from .errors import TaskEnqueueValueError, TaskNotFoundError, TaskStateError

# isort: split
# --- enqueue validated against the registry ---
from .errors import TaskKindNotRegisteredError, TaskLaneMismatchError
from .protocols import BackgroundTaskStore

# isort: split
# operator queries (search, counts, throughput, bulk actions)
from ._admin_query import (
    MAX_TASK_ERROR_SEARCH_LENGTH,
    TaskAdminStore,
    TaskBulkResult,
    TaskLaneStatusCounts,
    TaskQuery,
    TaskSearchPage,
    TaskThroughput,
    check_bulk_limit,
    check_search_page_args,
    check_throughput_minutes,
)

# isort: split
# --- dispatch and execution ---
from ._dispatch import (
    ClaimedTaskOutcome,
    DispatchDrainResult,
    DispatchPollConfig,
    DispatchStats,
    DispatchStatsRecorder,
    DispatchWakeSignal,
    TaskLaneConfig,
    default_dispatch_owner,
    effective_dispatch_base_interval,
)
from ._execution import (
    ClaimedTaskExecution,
    ClaimedTaskExecutionConfig,
    ClaimedTaskReport,
)
from ._temp import (
    TaskTempDirs,
    sweep_task_temp_dirs,
)
from ._worker import InFlightTask, TaskWorker
from .errors import TaskDispatchConfigError
from .protocols import ClaimedTaskRecord, ClaimedTaskStore, DispatchTaskStore

# isort: split
# --- runtime workers and scheduling ---
from ._background import BackgroundTasks
from ._component_name import BACKGROUND_TASKS_COMPONENT
from ._components import (
    BackgroundTaskComponent,
    background_task_component,
    background_task_component_from_shutdown,
    background_task_component_with_definitions,
    background_task_component_with_definitions_from_shutdown,
)
from ._leased import run_leased_background_tasks
from ._leased_scheduled import (
    LeasedScheduledRuntime,
    LeasedScheduledRuntimeConfig,
    LeasedScheduledRuntimeSettings,
)
from ._periodic import periodic_sleep_duration, run_periodic_task
from ._schedule import (
    SCHEDULED_TASK_RAISED,
    ScheduledPeriodicTask,
    ScheduledTaskRun,
    run_scheduled_periodic_task,
    scheduled_claim_renew_interval,
    scheduled_next_run_at,
)
from .errors import (
    BackgroundTasksClosedError,
    BackgroundTasksError,
    BackgroundTaskSpawnError,
    PeriodicTaskConfigError,
    ScheduledRuntimeDeclarationError,
)
from .protocols import ScheduledOutcomeConvertible

# isort: split
# --- schedules of the scheduled catalog: intervals and cron ---
from ._schedules import (
    MAX_CRON_EXPRESSION_LENGTH,
    MAX_CRON_TIMEZONE_LENGTH,
    CronSchedule,
    IntervalSchedule,
    Schedule,
)
from .errors import CronExtraMissingError, CronScheduleError

# isort: split
# --- operator control: cancel a running task, snooze, lane pause, retention ---
from ._control import (
    DEFAULT_MAX_SNOOZES,
    TaskLaneState,
    TaskPruneReport,
    TaskRetention,
    TaskSnooze,
    check_delete_finished_tasks_args,
    check_snooze_delay,
)
from ._control_protocols import TaskLaneControlStore, TaskRetentionStore
from ._effects import TaskTransaction
from ._store_base import TaskStoreBase
from ._retention import prune_finished_tasks, run_task_retention, task_retention_worker
from .errors import TaskCancelRequestedError

__all__ = [
    "AsterForgeTasksError",
    "BACKGROUND_TASKS_COMPONENT",
    "BackgroundTaskComponent",
    "BackgroundTaskRecord",
    "BackgroundTaskSpawnError",
    "BackgroundTaskStore",
    "BackgroundTasks",
    "BackgroundTasksClosedError",
    "BackgroundTasksError",
    "ClaimableTaskRecord",
    "ClaimedTaskExecution",
    "ClaimedTaskExecutionConfig",
    "ClaimedTaskExecutionStore",
    "ClaimedTaskOutcome",
    "ClaimedTaskRecord",
    "ClaimedTaskReport",
    "ClaimedTaskStore",
    "ClassifiedTaskError",
    "CronExtraMissingError",
    "CronSchedule",
    "CronScheduleError",
    "DEFAULT_MAX_SNOOZES",
    "DispatchDrainResult",
    "DispatchPollConfig",
    "DispatchStats",
    "DispatchStatsRecorder",
    "DispatchTaskStore",
    "DispatchWakeSignal",
    "EnqueueResult",
    "ErasedTaskSpec",
    "ExecutableTaskRecord",
    "InFlightTask",
    "IntervalSchedule",
    "LEASE_EXPIRED_ERROR",
    "LeasedScheduledRuntime",
    "LeasedScheduledRuntimeConfig",
    "LeasedScheduledRuntimeSettings",
    "MAX_CRON_EXPRESSION_LENGTH",
    "MAX_CRON_TIMEZONE_LENGTH",
    "MAX_SCHEDULED_TASK_NAME_LENGTH",
    "MAX_TASK_DEDUPE_KEY_LENGTH",
    "MAX_TASK_ERROR_SEARCH_LENGTH",
    "MAX_TASK_ID",
    "MAX_TASK_KIND_LENGTH",
    "MAX_TASK_PAGE_SIZE",
    "NewTask",
    "PeriodicTaskConfigError",
    "RegisteredRuntimeTaskKind",
    "RuntimeTaskCatalog",
    "RuntimeTaskCatalogError",
    "RuntimeTaskDefinition",
    "RuntimeTaskName",
    "SCHEDULED_TASK_RAISED",
    "Schedule",
    "ScheduledOutcomeConvertible",
    "ScheduledPeriodicTask",
    "ScheduledRuntimeDeclarationError",
    "ScheduledTaskClaim",
    "ScheduledTaskOutcome",
    "ScheduledTaskRecord",
    "ScheduledTaskRun",
    "ScheduledTaskRunStatus",
    "ScheduledTaskStore",
    "ScheduledTaskValueError",
    "SharedTaskHeartbeat",
    "TaskAdminStore",
    "TaskBulkResult",
    "TaskCancelOutcome",
    "TaskCancelRequestedError",
    "TaskClaimStore",
    "TaskCodecError",
    "TaskCompletion",
    "TaskCoreError",
    "TaskDedupeKey",
    "TaskDedupeKeyError",
    "TaskDependency",
    "TaskDispatchConfigError",
    "TaskEnqueueValueError",
    "TaskErrorClassifier",
    "TaskExecutionContext",
    "TaskFailureClassification",
    "TaskFailureReason",
    "TaskHeartbeatStore",
    "TaskInvalidValueError",
    "TaskIoError",
    "TaskKindNotRegisteredError",
    "TaskLaneConfig",
    "TaskLaneControlStore",
    "TaskLaneCounts",
    "TaskLaneMismatchError",
    "TaskLaneState",
    "TaskLaneStatusCounts",
    "TaskLease",
    "TaskLeaseControlError",
    "TaskLeaseGuard",
    "TaskLeaseLostError",
    "TaskLeaseRenewalTimeoutError",
    "TaskLeaseTermination",
    "TaskNotFoundError",
    "TaskPage",
    "TaskPayloadError",
    "TaskPruneReport",
    "TaskQuery",
    "TaskRecord",
    "TaskRegistry",
    "TaskRegistryError",
    "TaskRetention",
    "TaskRetentionStore",
    "TaskRetryClass",
    "TaskRetryPolicy",
    "TaskSearchPage",
    "TaskSnooze",
    "TaskSpec",
    "TaskStateError",
    "TaskStatus",
    "TaskStepInfo",
    "TaskStepNotFoundError",
    "TaskStepSpec",
    "TaskStepStatus",
    "TaskStoreBase",
    "TaskTempDirProvider",
    "TaskTempDirs",
    "TaskThroughput",
    "TaskTransaction",
    "TaskTransactionUnavailableError",
    "TaskWorker",
    "TaskWorkerShutdownRequestedError",
    "background_task_component",
    "background_task_component_from_shutdown",
    "background_task_component_with_definitions",
    "background_task_component_with_definitions_from_shutdown",
    "cancel_active_step",
    "check_bulk_limit",
    "check_claim_args",
    "check_delete_finished_tasks_args",
    "check_list_tasks_args",
    "check_retry_delay",
    "check_run_at",
    "check_search_page_args",
    "check_snooze_delay",
    "check_throughput_minutes",
    "check_ttl",
    "classify_task_error",
    "default_dispatch_owner",
    "default_task_retry_delay",
    "effective_dispatch_base_interval",
    "initial_task_steps_from_specs",
    "mark_active_step_failed",
    "parse_task_steps_json",
    "periodic_sleep_duration",
    "prune_finished_tasks",
    "run_leased_background_tasks",
    "run_periodic_task",
    "run_scheduled_periodic_task",
    "run_task_retention",
    "scheduled_claim_renew_interval",
    "scheduled_next_run_at",
    "scheduled_task_dedupe_key",
    "serialize_task_steps_json",
    "set_task_step_active",
    "set_task_step_skipped",
    "set_task_step_succeeded",
    "stored_schedule_columns",
    "sweep_task_temp_dirs",
    "task_lease_termination_of",
    "task_retention_worker",
    "task_step_status_json_schema",
    "task_steps_json_schema",
    "validate_claim_scheduled_task_args",
    "validate_complete_scheduled_task_args",
    "validate_ensure_scheduled_task_args",
    "validate_scheduled_claim",
    "validate_scheduled_duration",
    "validate_scheduled_identifier",
    "wire_value",
]
