"""What the demo's task bodies share: the forge's resources (``forge.state``)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import sqlalchemy as sa

from aster_forge import Forge, TaskStatus
from aster_forge.runtime._internal import utc_now
from aster_forge.runtime.errors import RecordClosedError, RecordFullError

from ._audit import AuditEvent, AuditLog

__all__ = ["DemoState"]

logger = logging.getLogger("aster_forge._demo")


@dataclass(slots=True)
class DemoState:
    """The demo's resources, opened by ``@forge.resources`` and passed to every body.

    Attributes:
        forge: The forge (health, stores, engine).
        audit: The buffered audit log.
        pace: Seconds one unit of simulated work takes (fetch chunk, transform pass).
        temp_root: The root holding the ``_runtime/tasks`` temp directories.
        cleanup_older_than: The age past which finished tasks are purged.
        quota_failed: Task ids whose publish already hit the simulated quota once in
            this process (an operator retry then succeeds).
    """

    forge: Forge
    audit: AuditLog
    pace: float
    temp_root: Path
    cleanup_older_than: timedelta
    quota_failed: set[int] = field(default_factory=set)

    async def record(self, event: str, *, task_id: int | None = None, detail: str = "") -> None:
        """Append an audit event; a full or closed log is logged, never fatal to a task."""
        try:
            await self.audit.record(
                AuditEvent(utc_now(), self.forge.instance_id, event, task_id, detail)
            )
        except (RecordFullError, RecordClosedError) as exc:
            logger.warning("audit event %s not recorded (%s)", event, type(exc).__name__)

    async def purge_finished(self, older_than: timedelta) -> int:
        """Delete succeeded and cancelled tasks finished more than ``older_than`` ago.

        Failed tasks are kept: an operator may still want to read or retry them.
        """
        engine, table = self.forge.backend.engine, self.forge.backend.tasks_table
        if engine is None:
            return 0
        done = [TaskStatus.SUCCEEDED.value, TaskStatus.CANCELLED.value]
        async with engine.begin() as conn:
            result = await conn.execute(
                sa.delete(table).where(
                    table.c.status.in_(done), table.c.finished_at < utc_now() - older_than
                )
            )
        return int(result.rowcount or 0)
