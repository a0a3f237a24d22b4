"""The application state every demo task body receives."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from aster_forge.runtime import (
    HealthCheckScope,
    RecordClosedError,
    RecordFullError,
    SystemHealthReport,
    utc_now,
)
from aster_forge.tasks import BackgroundTaskStore

from ._audit import AuditEvent, AuditLog

__all__ = ["DemoState", "FinishedTaskPurger"]

logger = logging.getLogger("aster_forge.demo")

FinishedTaskPurger = Callable[[timedelta], Awaitable[int]]
"""Deletes finished task rows older than the given age; returns how many it removed."""


@dataclass(slots=True)
class DemoState:
    """What the demo's task bodies share.

    Attributes:
        instance: This process's instance id (shown in audit events).
        pace: Seconds one unit of simulated work takes (fetch chunk, transform pass).
        temp_root: The runtime root holding ``_runtime/tasks`` temp directories.
        store: The task store (the temp-dir sweep reads the running claims).
        audit: The buffered audit log, or ``None`` (unit tests without a database).
        run_health: Runs a health scope of the running service (the health-check task).
        purge_finished: Deletes old finished tasks (the cleanup task).
        quota_failed: Task ids whose publish already hit the simulated quota once in
            this process (an operator retry then succeeds).
    """

    instance: str
    pace: float
    temp_root: Path
    store: BackgroundTaskStore | None = None
    audit: AuditLog | None = None
    run_health: Callable[[HealthCheckScope], Awaitable[SystemHealthReport]] | None = None
    purge_finished: FinishedTaskPurger | None = None
    quota_failed: set[int] = field(default_factory=set)

    async def record(self, event: str, *, task_id: int | None = None, detail: str = "") -> None:
        """Append an audit event; a full or closed log is logged, never fatal to a task."""
        if self.audit is None:
            return
        try:
            await self.audit.record(
                AuditEvent(
                    at=utc_now(),
                    instance=self.instance,
                    event=event,
                    task_id=task_id,
                    detail=detail,
                )
            )
        except (RecordFullError, RecordClosedError) as exc:
            logger.warning("audit event %s not recorded (%s)", event, type(exc).__name__)
