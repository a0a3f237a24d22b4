"""What the other subpackages and the front door take from :mod:`aster_forge.tasks`.

The input checks and bounds every task store applies (so the database and in-memory
stores refuse the same input alike), the records and operator types the stores, the
web app and the CLI pass around, and the records :mod:`aster_forge` re-exports. Not a
public API: products import from :mod:`aster_forge` and :mod:`aster_forge.tasks`.
"""

from __future__ import annotations

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
from ._context import TaskExecutionContext
from ._control import (
    TaskLaneState,
    TaskPruneReport,
    TaskRetention,
    TaskSnooze,
    check_delete_finished_tasks_args,
    check_snooze_delay,
)
from ._dedupe import MAX_TASK_DEDUPE_KEY_LENGTH
from ._dispatch import DispatchStats, default_dispatch_owner
from ._log_context import TaskLogContextFilter
from ._partitions import fair_pick
from ._records import (
    LEASE_EXPIRED_ERROR,
    MAX_TASK_CLAIM_LIMIT,
    MAX_TASK_ID,
    MAX_TASK_KIND_LENGTH,
    MAX_TASK_PAGE_SIZE,
    MAX_TASK_PARTITION_LENGTH,
    BackgroundTaskRecord,
    EnqueueResult,
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
    dedupe_window_holds,
    wire_value,
)
from ._retention import prune_finished_tasks
from ._retry import ClassifiedTaskError, TaskErrorClassifier, TaskRetryClass, TaskRetryPolicy
from ._schedule_types import (
    MAX_SCHEDULED_TASK_NAME_LENGTH,
    ScheduledTaskClaim,
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
from ._schedules import MAX_CRON_EXPRESSION_LENGTH, MAX_CRON_TIMEZONE_LENGTH, Schedule
from ._steps import (
    TaskStepInfo,
    TaskStepStatus,
    cancel_active_step,
    initial_task_steps_from_specs,
    mark_active_step_failed,
    parse_task_steps_json,
    serialize_task_steps_json,
    set_task_step_active,
    set_task_step_succeeded,
)

__all__ = [
    "LEASE_EXPIRED_ERROR",
    "MAX_CRON_EXPRESSION_LENGTH",
    "MAX_CRON_TIMEZONE_LENGTH",
    "MAX_SCHEDULED_TASK_NAME_LENGTH",
    "MAX_TASK_CLAIM_LIMIT",
    "MAX_TASK_DEDUPE_KEY_LENGTH",
    "MAX_TASK_ERROR_SEARCH_LENGTH",
    "MAX_TASK_ID",
    "MAX_TASK_KIND_LENGTH",
    "MAX_TASK_PAGE_SIZE",
    "MAX_TASK_PARTITION_LENGTH",
    "BackgroundTaskRecord",
    "ClassifiedTaskError",
    "DispatchStats",
    "EnqueueResult",
    "Schedule",
    "ScheduledTaskClaim",
    "ScheduledTaskRecord",
    "ScheduledTaskRunStatus",
    "TaskAdminStore",
    "TaskBulkResult",
    "TaskCancelOutcome",
    "TaskCompletion",
    "TaskErrorClassifier",
    "TaskExecutionContext",
    "TaskFailureReason",
    "TaskLaneCounts",
    "TaskLaneState",
    "TaskLaneStatusCounts",
    "TaskLogContextFilter",
    "TaskPage",
    "TaskPruneReport",
    "TaskQuery",
    "TaskRetention",
    "TaskRetryClass",
    "TaskRetryPolicy",
    "TaskSearchPage",
    "TaskSnooze",
    "TaskStatus",
    "TaskStepInfo",
    "TaskStepStatus",
    "TaskThroughput",
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
    "dedupe_window_holds",
    "default_dispatch_owner",
    "fair_pick",
    "initial_task_steps_from_specs",
    "mark_active_step_failed",
    "parse_task_steps_json",
    "prune_finished_tasks",
    "serialize_task_steps_json",
    "set_task_step_active",
    "set_task_step_succeeded",
    "stored_schedule_columns",
    "validate_claim_scheduled_task_args",
    "validate_complete_scheduled_task_args",
    "validate_ensure_scheduled_task_args",
    "validate_scheduled_claim",
    "validate_scheduled_duration",
    "validate_scheduled_identifier",
    "wire_value",
]
