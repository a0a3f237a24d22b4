"""Background tasks: typed specs, registries, claiming, leases, dispatch and workers.

Imports :mod:`aster_forge.runtime` only; stores are protocols implemented by
:mod:`aster_forge.db` or by the product.
"""

from __future__ import annotations

from .errors import AsterForgeTasksError

# --- tasks core (issue 6) ---
# isort: split
from ._lease import TaskLease
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
)

# isort: split
# --- dedupe / schedule types (issue 5) ---

__all__ = [
    "AsterForgeTasksError",
    "ClaimableTaskRecord",
    "ClaimedTaskExecutionStore",
    "ExecutableTaskRecord",
    "RuntimeTaskCatalogError",
    "TaskClaimStore",
    "TaskCodecError",
    "TaskCoreError",
    "TaskCoreErrorKind",
    "TaskHeartbeatStore",
    "TaskInvalidValueError",
    "TaskIoError",
    "TaskLease",
    "TaskLeaseControlError",
    "TaskLeaseLostError",
    "TaskLeaseRenewalTimeoutError",
    "TaskPayloadError",
    "TaskRecord",
    "TaskRegistryError",
    "TaskStepInfo",
    "TaskStepNotFoundError",
    "TaskStepSpec",
    "TaskStepStatus",
    "TaskWorkerShutdownRequestedError",
    "initial_task_steps_from_specs",
    "is_task_lease_control_error",
    "is_task_lease_lost",
    "is_task_lease_renewal_timed_out",
    "is_task_worker_shutdown_requested",
    "mark_active_step_failed",
    "parse_task_steps_json",
    "serialize_task_steps_json",
    "set_task_step_active",
    "set_task_step_skipped",
    "set_task_step_succeeded",
    "task_step_status_json_schema",
    "task_steps_json_schema",
]
