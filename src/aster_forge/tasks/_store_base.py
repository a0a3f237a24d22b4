"""``TaskStoreBase``: the worker's store protocol with everything derivable derived.

A product keeping its own task table implements the claim and the seven fenced writes;
the batched forms, the control outcomes and the worker's hints follow from them here.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Generic, TypeVar

from ._lease import TaskLease, TaskTransaction
from ._rate_limit import TaskRateLimit
from ._records import TaskCompletion
from .errors import TaskTransactionUnavailableError

__all__ = ["TaskStoreBase"]

TaskT = TypeVar("TaskT")
LaneT = TypeVar("LaneT")


def _let_go() -> None:
    """Nothing is held, so nothing is let go."""


class TaskStoreBase(ABC, Generic[TaskT, LaneT]):
    """A base for a :class:`~aster_forge.tasks.DispatchTaskStore` over the product's table.

    Implement :meth:`claim_due_for_lane`, :meth:`renew_task_lease` and the fenced writes
    (:meth:`mark_task_succeeded`, :meth:`mark_task_retry`, :meth:`mark_task_failed`,
    :meth:`release_task_for_shutdown`, :meth:`update_task_steps`). The rest is built on
    them, one call per entry, with the same fencing; override what your database does
    better (one statement for many renewals or successes, a real cancel outcome).
    """

    @abstractmethod
    async def claim_due_for_lane(
        self,
        lane: LaneT,
        limit: int,
        owner: str,
        lease_ttl: timedelta,
        *,
        cluster_limit: int | None = None,
        partition_limit: int | None = None,
        rate_limit: TaskRateLimit | None = None,
        partition_rate_limit: TaskRateLimit | None = None,
    ) -> Sequence[TaskT]:
        """See :meth:`~aster_forge.tasks.TaskClaimStore.claim_due_for_lane`."""

    @abstractmethod
    async def renew_task_lease(self, lease: TaskLease, lease_ttl: timedelta) -> TaskLease | None:
        """See :meth:`~aster_forge.tasks.TaskHeartbeatStore.renew_task_lease`."""

    @abstractmethod
    async def mark_task_succeeded(
        self, lease: TaskLease, result_json: str | None, steps_json: str | None
    ) -> bool:
        """See :meth:`~aster_forge.tasks.ClaimedTaskExecutionStore.mark_task_succeeded`."""

    @abstractmethod
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
        """See :meth:`~aster_forge.tasks.ClaimedTaskExecutionStore.mark_task_retry`."""

    @abstractmethod
    async def mark_task_failed(
        self,
        lease: TaskLease,
        *,
        error: str,
        steps_json: str | None,
        manual_retry: bool,
        traceback: str | None = None,
    ) -> bool:
        """See :meth:`~aster_forge.tasks.ClaimedTaskExecutionStore.mark_task_failed`."""

    @abstractmethod
    async def release_task_for_shutdown(self, lease: TaskLease) -> bool:
        """See :meth:`~aster_forge.tasks.ClaimedTaskExecutionStore.release_task_for_shutdown`."""

    @abstractmethod
    async def update_task_steps(self, lease: TaskLease, steps_json: str) -> bool:
        """See :meth:`~aster_forge.tasks.ClaimedTaskExecutionStore.update_task_steps`."""

    async def renew_task_leases_many(
        self, leases: Sequence[TaskLease], lease_ttl: timedelta
    ) -> Sequence[TaskLease | None]:
        """Each lease renewed on its own (concurrently), results in input order."""
        if len(leases) == 1:
            return [await self.renew_task_lease(leases[0], lease_ttl)]
        return await asyncio.gather(*(self.renew_task_lease(lease, lease_ttl) for lease in leases))

    async def mark_tasks_succeeded_many(
        self, completions: Sequence[TaskCompletion]
    ) -> Sequence[bool]:
        """Each success written on its own, in input order."""
        return [
            await self.mark_task_succeeded(c.lease, c.result_json, c.steps_json)
            for c in completions
        ]

    async def mark_tasks_succeeded_and_claim(
        self,
        completions: Sequence[TaskCompletion],
        lane: LaneT,
        limit: int,
        owner: str,
        lease_ttl: timedelta,
        *,
        cluster_limit: int | None = None,
        partition_limit: int | None = None,
        rate_limit: TaskRateLimit | None = None,
        partition_rate_limit: TaskRateLimit | None = None,
    ) -> tuple[Sequence[bool], Sequence[TaskT]]:
        """The successes, then a claim of ``limit`` tasks of ``lane`` (two calls)."""
        results = await self.mark_tasks_succeeded_many(completions)
        claimed = await self.claim_due_for_lane(
            lane,
            limit,
            owner,
            lease_ttl,
            cluster_limit=cluster_limit,
            partition_limit=partition_limit,
            rate_limit=rate_limit,
            partition_rate_limit=partition_rate_limit,
        )
        return results, claimed

    async def mark_task_cancelled(self, lease: TaskLease, *, steps_json: str | None) -> bool:
        """The shutdown release: it ends a task whose cancel was requested ``cancelled``
        without counting an attempt (the store's claim and release must honour the flag)."""
        return await self.release_task_for_shutdown(lease)

    async def mark_task_snoozed(
        self, lease: TaskLease, *, delay: timedelta, steps_json: str | None
    ) -> bool:
        """A retry after ``delay`` that counts no attempt."""
        return await self.mark_task_retry(
            lease, delay=delay, error="Task snoozed", steps_json=steps_json, count_attempt=False
        )

    async def begin_task_transaction(self, lease: TaskLease) -> TaskTransaction:
        """Not available: override to open a transaction on the table's database.

        Raises:
            TaskTransactionUnavailableError: Always.
        """
        raise TaskTransactionUnavailableError(
            f"{type(self).__name__} keeps no database a task body can write in: "
            "ctx.transaction() needs a database store"
        )

    async def stage_waiting_tasks(self) -> int:
        """Nothing to stage: every pending task is in the claim order already."""
        return 0

    def keep_connection(self) -> Callable[[], None]:
        """Nothing to keep: the store holds no connection between calls."""
        return _let_go

    @property
    def claims_with_success(self) -> bool:
        """``False``: :meth:`mark_tasks_succeeded_and_claim` is two calls, so the worker
        claims on its own."""
        return False

    @property
    def success_writes_in_flight(self) -> int:
        """One batched success write at a time."""
        return 1
