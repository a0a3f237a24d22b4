"""The chaos workers' task store: every fenced write's outcome appended to a log file."""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any, TypeVar

from sqlalchemy.ext.asyncio import AsyncEngine

from aster_forge import BackgroundTaskRecord
from aster_forge.db import BackgroundTaskDbStore
from aster_forge.tasks import TaskLease
from aster_forge.tasks._rate_limit import TaskRateLimit
from aster_forge.tasks._records import TaskCompletion

from ._stall import WriteGate, now

__all__ = ["LoggingStore"]

T = TypeVar("T")


class LoggingStore(BackgroundTaskDbStore):
    """The DB store, appending every fenced write's outcome to a log file.

    With a :class:`WriteGate`, every fenced write passes through it (held while closed).
    """

    def __init__(self, engine: AsyncEngine, log_fd: int, gate: WriteGate | None = None) -> None:
        super().__init__(engine)
        self._fd = log_fd
        self._gate = gate
        self._combined = False  # inside mark_tasks_succeeded_and_claim: logged there

    def _log(self, op: str, lease: TaskLease, accepted: bool, **extra: Any) -> None:
        line = {"op": op, "task": lease.task_id, "token": lease.processing_token, "ok": accepted}
        os.write(self._fd, (json.dumps({**line, **extra}) + "\n").encode())

    async def _write(
        self,
        op: str,
        leases: Sequence[TaskLease],
        call: Callable[[], Awaitable[T]],
        accepted: Callable[[T], Sequence[bool]],
    ) -> T:
        async def logged(held: bool) -> T:
            sent = now()
            try:
                result = await call()
            except Exception as exc:
                # A fault interrupted this write while it was on the wire.
                for lease in leases:
                    self._log(op, lease, False, error=type(exc).__name__)
                raise
            extra = {"held": True, "sent": sent, "done": now()} if held else {}
            for lease, ok in zip(leases, accepted(result), strict=True):
                self._log(op, lease, bool(ok), **extra)
            return result

        if self._gate is None:
            return await logged(False)
        if self._gate.closed:
            for lease in leases:
                self._log(op, lease, False, stalled=True)
        return await self._gate.call(op, logged)

    async def renew_task_lease(self, lease: TaskLease, lease_ttl: timedelta) -> TaskLease | None:
        parent = super().renew_task_lease
        return await self._write(
            "heartbeat", [lease], lambda: parent(lease, lease_ttl), lambda r: [r is not None]
        )

    async def renew_task_leases_many(
        self, leases: Sequence[TaskLease], lease_ttl: timedelta
    ) -> list[TaskLease | None]:
        parent = super().renew_task_leases_many
        return await self._write(
            "heartbeat",
            leases,
            lambda: parent(leases, lease_ttl),
            lambda r: [x is not None for x in r],
        )

    async def mark_task_succeeded(
        self, lease: TaskLease, result_json: str | None, steps_json: str | None
    ) -> bool:
        parent = super().mark_task_succeeded
        return await self._write(
            "succeed", [lease], lambda: parent(lease, result_json, steps_json), lambda r: [r]
        )

    async def mark_tasks_succeeded_many(self, completions: Sequence[TaskCompletion]) -> list[bool]:
        parent = super().mark_tasks_succeeded_many
        if self._combined:
            return await parent(completions)
        return await self._write(
            "succeed", [c.lease for c in completions], lambda: parent(completions), lambda r: r
        )

    async def mark_tasks_succeeded_and_claim(
        self,
        completions: Sequence[TaskCompletion],
        lane: str,
        limit: int,
        owner: str,
        lease_ttl: timedelta,
        *,
        cluster_limit: int | None = None,
        partition_limit: int | None = None,
        rate_limit: TaskRateLimit | None = None,
        partition_rate_limit: TaskRateLimit | None = None,
    ) -> tuple[list[bool], list[BackgroundTaskRecord]]:
        parent = super().mark_tasks_succeeded_and_claim

        async def call() -> tuple[list[bool], list[BackgroundTaskRecord]]:
            self._combined = True
            try:
                return await parent(
                    completions,
                    lane,
                    limit,
                    owner,
                    lease_ttl,
                    cluster_limit=cluster_limit,
                    partition_limit=partition_limit,
                    rate_limit=rate_limit,
                    partition_rate_limit=partition_rate_limit,
                )
            finally:
                self._combined = False

        return await self._write("succeed", [c.lease for c in completions], call, lambda r: r[0])

    async def mark_task_retry(
        self,
        lease: TaskLease,
        *,
        delay: timedelta,
        error: str,
        steps_json: str | None,
        count_attempt: bool,
        traceback: str | None = None,
    ) -> bool:
        parent = super().mark_task_retry
        return await self._write(
            "retry",
            [lease],
            lambda: parent(
                lease,
                delay=delay,
                error=error,
                steps_json=steps_json,
                count_attempt=count_attempt,
                traceback=traceback,
            ),
            lambda r: [r],
        )

    async def mark_task_failed(
        self,
        lease: TaskLease,
        *,
        error: str,
        steps_json: str | None,
        manual_retry: bool,
        traceback: str | None = None,
    ) -> bool:
        parent = super().mark_task_failed
        return await self._write(
            "fail",
            [lease],
            lambda: parent(
                lease,
                error=error,
                steps_json=steps_json,
                manual_retry=manual_retry,
                traceback=traceback,
            ),
            lambda r: [r],
        )

    async def release_task_for_shutdown(self, lease: TaskLease) -> bool:
        parent = super().release_task_for_shutdown
        return await self._write("release", [lease], lambda: parent(lease), lambda r: [r])

    async def update_task_steps(self, lease: TaskLease, steps_json: str) -> bool:
        parent = super().update_task_steps
        return await self._write("steps", [lease], lambda: parent(lease, steps_json), lambda r: [r])
