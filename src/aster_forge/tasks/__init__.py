"""Background tasks: typed specs, registries, claiming, leases, dispatch and workers.

Imports :mod:`aster_forge.runtime` only; stores are protocols implemented by
:mod:`aster_forge.db` or by the product.
"""

from __future__ import annotations

from .errors import AsterForgeTasksError

# --- tasks core (issue 6) ---
# isort: split
from ._lease import TaskLease
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
    "TaskClaimStore",
    "TaskHeartbeatStore",
    "TaskLease",
    "TaskRecord",
]
