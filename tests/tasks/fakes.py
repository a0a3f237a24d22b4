"""In-memory fakes of the heartbeat and execution stores for tasks-core tests."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import timedelta

from aster_forge import BackgroundTaskRecord
from aster_forge.tasks import TaskLease, TaskStoreBase
from aster_forge.tasks._rate_limit import TaskRateLimit
from aster_forge.testing import ManualClock


class FakeHeartbeatStore:
    """Renews while ``owner_token`` matches; can be told to fail or to hang."""

    def __init__(self, clock: ManualClock, owner_token: str) -> None:
        self.clock = clock
        self.owner_token = owner_token
        self.calls = 0
        self.fail_with: Exception | None = None
        self.hang: asyncio.Event | None = None
        self.cancelled_renewals = 0

    async def renew_task_lease(self, lease: TaskLease, lease_ttl: timedelta) -> TaskLease | None:
        self.calls += 1
        if self.hang is not None:
            try:
                await self.hang.wait()
            except asyncio.CancelledError:
                self.cancelled_renewals += 1
                raise
        if self.fail_with is not None:
            # A fresh exception each call, as a real driver would raise.
            raise type(self.fail_with)(*self.fail_with.args)
        if lease.processing_token != self.owner_token:
            return None
        return lease.renewed(self.clock.now() + lease_ttl)

    async def renew_task_leases_many(
        self, leases: Sequence[TaskLease], lease_ttl: timedelta
    ) -> list[TaskLease | None]:
        return list(await asyncio.gather(*(self.renew_task_lease(x, lease_ttl) for x in leases)))


class FakeStepStore(TaskStoreBase[BackgroundTaskRecord, str]):
    """Records fenced step writes (only ``update_task_steps`` is used by the context)."""

    def __init__(self, owner_token: str) -> None:
        self.owner_token = owner_token
        self.steps_writes: list[str] = []

    async def claim_due_for_lane(
        self,
        lane: str,
        limit: int,
        owner: str,
        lease_ttl: timedelta,
        *,
        cluster_limit: int | None = None,
        partition_limit: int | None = None,
        rate_limit: TaskRateLimit | None = None,
        partition_rate_limit: TaskRateLimit | None = None,
    ) -> list[BackgroundTaskRecord]:
        return []

    async def renew_task_lease(self, lease: TaskLease, lease_ttl: timedelta) -> TaskLease | None:
        return None

    async def update_task_steps(self, lease: TaskLease, steps_json: str) -> bool:
        if lease.processing_token != self.owner_token:
            return False
        self.steps_writes.append(steps_json)
        return True

    async def mark_task_succeeded(
        self, lease: TaskLease, result_json: str | None, steps_json: str | None
    ) -> bool:
        return lease.processing_token == self.owner_token

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
        return lease.processing_token == self.owner_token

    async def mark_task_failed(
        self,
        lease: TaskLease,
        *,
        error: str,
        steps_json: str | None,
        manual_retry: bool,
        traceback: str | None = None,
    ) -> bool:
        return lease.processing_token == self.owner_token

    async def release_task_for_shutdown(self, lease: TaskLease) -> bool:
        return lease.processing_token == self.owner_token
