"""aster-forge: database-backed background tasks and runtime lifecycle for asyncio services.

Start with :class:`Forge` (the application layer: ``@forge.task``, ``@forge.periodic``,
``aster-forge worker module:forge``, ``FastAPI(lifespan=forge.lifespan)``). The
primitives live in the subpackages:

- :mod:`aster_forge.runtime`: health, components, startup/shutdown, leases, batch writer.
- :mod:`aster_forge.tasks`: typed task specs, registries, claiming, dispatch, workers.
- :mod:`aster_forge.db`: SQLAlchemy tables and stores for SQLite, PostgreSQL and MariaDB.
- :mod:`aster_forge.testing`: in-memory stores, conformance suites and a manual clock.
"""

from __future__ import annotations

from ._errors import AsterForgeError
from .db.errors import TablesMissingError
from .forge._internal import (
    DrainedTask,
    Forge,
    ForgeDrainResult,
    ForgePeriodic,
    ForgeStep,
    ForgeTask,
    ForgeWorkerSettings,
)
from .forge.errors import (
    ForgeDeclarationError,
    ForgePayloadError,
    ForgeStateError,
    ForgeTaskFailedError,
)
from .tasks._internal import (
    BackgroundTaskRecord,
    ClassifiedTaskError,
    EnqueueResult,
    TaskCancelOutcome,
    TaskExecutionContext,
    TaskLaneState,
    TaskLogContextFilter,
    TaskPage,
    TaskPruneReport,
    TaskRetention,
    TaskRetryClass,
    TaskRetryPolicy,
    TaskSnooze,
    TaskStatus,
)
from .tasks.errors import TaskNotFoundError, TaskStateError

__version__ = "0.1.0"

__all__ = [
    "AsterForgeError",
    "BackgroundTaskRecord",
    "ClassifiedTaskError",
    "DrainedTask",
    "EnqueueResult",
    "Forge",
    "ForgeDeclarationError",
    "ForgeDrainResult",
    "ForgePayloadError",
    "ForgePeriodic",
    "ForgeStateError",
    "ForgeStep",
    "ForgeTask",
    "ForgeTaskFailedError",
    "ForgeWorkerSettings",
    "TablesMissingError",
    "TaskCancelOutcome",
    "TaskExecutionContext",
    "TaskLaneState",
    "TaskLogContextFilter",
    "TaskNotFoundError",
    "TaskPage",
    "TaskPruneReport",
    "TaskRetention",
    "TaskRetryClass",
    "TaskRetryPolicy",
    "TaskSnooze",
    "TaskStateError",
    "TaskStatus",
]
