"""A body's writes and its task's success in one transaction, fenced by the claim.

The store opens a :class:`TaskTransaction` on the task's database when the body first
asks for it (``ctx.transaction()``); the body writes through its connection; when the
body returns, the success (with its result) is written in the same transaction,
conditional on the claim's processing token, and everything commits together. Any
other outcome rolls the body's writes back.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from ._lease import TaskLease, TaskLeaseGuard

__all__ = ["TaskEffects", "TaskTransaction"]


class TaskTransaction(Protocol):
    """An open transaction on the task's database, owned by one execution.

    Returned by :meth:`~aster_forge.tasks.ClaimedTaskExecutionStore.begin_task_transaction`.
    """

    @property
    def connection(self) -> Any:
        """What the body writes through (an SQLAlchemy ``AsyncConnection``)."""
        ...

    async def update_task_steps(self, lease: TaskLease, steps_json: str) -> bool:
        """Persist step progress while the transaction is open, fenced by ``lease``
        (without waiting for this transaction's own locks)."""
        ...

    async def succeed(
        self, lease: TaskLease, result_json: str | None, steps_json: str | None
    ) -> bool:
        """Write the success fenced by ``lease`` and commit everything.

        Returns:
            ``True`` when committed; ``False`` when the fence failed (the lease was
            taken over): everything was rolled back.
        """
        ...

    async def rollback(self) -> None:
        """Roll back and close (idempotent)."""
        ...


class TaskEffects:
    """One execution's transaction: opened on the body's first ``ctx.transaction()``,
    settled once by the execution (success commits it, anything else rolls it back)."""

    __slots__ = ("_begin", "_guard", "_lock", "_transaction")

    def __init__(self, begin: Any, guard: TaskLeaseGuard) -> None:
        self._begin = begin
        self._guard = guard
        self._transaction: TaskTransaction | None = None
        self._lock = asyncio.Lock()

    @property
    def open(self) -> bool:
        """Whether the body opened the transaction and it is not settled yet."""
        return self._transaction is not None

    async def connection(self) -> Any:
        """The transaction's connection, opened on first use.

        Raises:
            TaskLeaseControlError: The task must stop (lease lost, shutdown, cancel).
        """
        async with self._lock:
            self._guard.ensure_active()
            if self._transaction is None:
                self._transaction = await self._begin(self._guard.lease)
            return self._transaction.connection

    async def update_task_steps(self, steps_json: str) -> bool | None:
        """Step progress through the open transaction; ``None`` when none is open."""
        if self._transaction is None:
            return None
        return await self._transaction.update_task_steps(self._guard.lease, steps_json)

    async def succeed(self, result_json: str | None, steps_json: str | None) -> bool:
        """Commit the body's writes with the fenced success (``False``: rolled back)."""
        transaction, self._transaction = self._transaction, None
        assert transaction is not None
        if not await transaction.succeed(self._guard.lease, result_json, steps_json):
            self._guard.mark_lost()
            return False
        return True

    async def rollback(self) -> None:
        """Roll the body's writes back (nothing happens when none is open)."""
        transaction, self._transaction = self._transaction, None
        if transaction is not None:
            await transaction.rollback()
