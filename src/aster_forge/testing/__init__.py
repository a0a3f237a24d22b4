"""Test support a product can use against its own code and stores.

Ships a :class:`ManualClock`, in-memory reference stores and conformance suites.
"""

from __future__ import annotations

from ._clock import ManualClock

# --- lease and scheduled-task stores and suites ---
from ._lease_conformance import RuntimeLeaseStoreConformance
from ._lease_store import InMemoryRuntimeLeaseStore
from ._scheduled_conformance import ScheduledTaskStoreConformance
from ._scheduled_store import InMemoryScheduledTaskStore

# --- enqueue validated against the registry ---
from ._enqueue_conformance import TaskEnqueueConformance

# isort: split
# --- task stores and suites ---
from ._task_conformance import TaskStoreConformance
from ._task_store import InMemoryTaskStore

__all__ = [
    "InMemoryRuntimeLeaseStore",
    "InMemoryScheduledTaskStore",
    "InMemoryTaskStore",
    "ManualClock",
    "RuntimeLeaseStoreConformance",
    "ScheduledTaskStoreConformance",
    "TaskEnqueueConformance",
    "TaskStoreConformance",
]
