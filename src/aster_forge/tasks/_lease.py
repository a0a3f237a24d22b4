"""Task processing leases: the fenced claim a worker holds, and the writes it fences.

A body's writes and its task's success share one transaction: the store opens a
:class:`TaskTransaction` when the body first asks for it (``ctx.transaction()``); when
the body returns, the success is written in it, conditional on the claim's processing
token, and everything commits together. Any other outcome rolls the body's writes back.
"""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Protocol

from ..runtime import CancellationToken
from ..runtime._internal import Clock, SystemClock
from .errors import (
    TaskCancelRequestedError,
    TaskInvalidValueError,
    TaskLeaseControlError,
    TaskLeaseLostError,
    TaskLeaseRenewalTimeoutError,
    TaskWorkerShutdownRequestedError,
)

__all__ = [
    "TaskEffects",
    "TaskLease",
    "TaskLeaseGuard",
    "TaskLeaseTermination",
    "TaskTransaction",
    "task_lease_termination_of",
]


@dataclass(frozen=True, slots=True)
class TaskLease:
    """The processing lease a successful claim hands to one worker.

    Every later write about the task (heartbeat, succeed, retry, fail, release, step
    update) is conditional on ``task_id`` *and* ``processing_token``: a worker whose
    token no longer matches the row writes nothing.

    Attributes:
        task_id: The persisted task identifier.
        processing_token: The fresh token the claim wrote into the row (opaque text).
        expires_at: When the lease lapses unless renewed (aware UTC datetime).
        cancel_requested: An operator asked to cancel the task, as the latest renewal
            read it from the row (``False`` from a store that does not report it).
    """

    task_id: int
    processing_token: str
    expires_at: datetime
    cancel_requested: bool = False

    def __post_init__(self) -> None:
        if not self.processing_token:
            raise ValueError("TaskLease.processing_token must be a non-empty string")
        if self.expires_at.tzinfo is None:
            raise ValueError("TaskLease.expires_at must be timezone-aware")

    def renewed(self, expires_at: datetime, *, cancel_requested: bool | None = None) -> TaskLease:
        """Return the same lease with a new expiry (what a heartbeat store returns).

        ``cancel_requested`` is the row's cancel flag read by the renewal (``None``: keep).
        """
        if cancel_requested is None:
            return replace(self, expires_at=expires_at)
        return replace(self, expires_at=expires_at, cancel_requested=bool(cancel_requested))

    def same_claim(self, other: TaskLease) -> bool:
        """Whether ``other`` names the same claim (task id and token), ignoring expiry."""
        return self.task_id == other.task_id and self.processing_token == other.processing_token


class TaskLeaseTermination(enum.StrEnum):
    """Why a :class:`TaskLeaseGuard` stopped allowing writes."""

    LOST = "lost"
    RENEWAL_TIMED_OUT = "renewal_timed_out"
    SHUTDOWN_REQUESTED = "shutdown_requested"
    CANCEL_REQUESTED = "cancel_requested"


# In precedence order: a lost lease wins over a stop requested at the same time.
_TERMINATIONS: tuple[tuple[type[TaskLeaseControlError], TaskLeaseTermination], ...] = (
    (TaskLeaseLostError, TaskLeaseTermination.LOST),
    (TaskLeaseRenewalTimeoutError, TaskLeaseTermination.RENEWAL_TIMED_OUT),
    (TaskWorkerShutdownRequestedError, TaskLeaseTermination.SHUTDOWN_REQUESTED),
    (TaskCancelRequestedError, TaskLeaseTermination.CANCEL_REQUESTED),
)


def task_lease_termination_of(exc: BaseException) -> TaskLeaseTermination | None:
    """Which lease-control stop ``exc`` is (or wraps via ``raise ... from``), if any.

    The default for ``ClaimedTaskExecutionConfig.lease_control_of``; a product whose
    error type hides the cause chain supplies its own mapping.
    """
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not seen for seen in chain):
        chain.append(current)
        current = current.__cause__ or current.__context__
    for error_type, termination in _TERMINATIONS:
        if any(isinstance(error, error_type) for error in chain):
            return termination
    return None


class TaskLeaseGuard:
    """The in-memory view of one claim, shared by the task body and its heartbeat.

    The guard tracks the current lease (renewals move ``expires_at``), a local safety
    deadline measured on the injected clock (``lease_ttl`` after the start of the last
    successful renewal, or after the claim), and why the lease stopped being usable.
    Its :attr:`token` is a child of the worker's shutdown token and is cancelled at once
    when the lease is lost or its renewal times out.
    """

    __slots__ = ("_clock", "_deadline", "_lease", "_lease_ttl", "_termination", "_token")

    def __init__(
        self,
        lease: TaskLease,
        lease_ttl: timedelta,
        *,
        shutdown_token: CancellationToken | None = None,
        clock: Clock | None = None,
        claimed_at: float | None = None,
    ) -> None:
        """Create a guard for a fresh claim.

        Args:
            lease: The lease the claim returned.
            lease_ttl: The lease duration the claim and renewals use.
            shutdown_token: The worker's shutdown token; the guard's token is its child.
            clock: The clock for the safety deadline (default: :class:`SystemClock`).
            claimed_at: The clock's monotonic reading taken *before* the claim was sent
                (default: now); the safety deadline is ``claimed_at + lease_ttl``.
        """
        if lease_ttl <= timedelta(0):
            raise ValueError("lease_ttl must be positive")
        self._lease = lease
        self._lease_ttl = lease_ttl
        self._clock: Clock = clock or SystemClock()
        start = self._clock.monotonic() if claimed_at is None else claimed_at
        self._deadline = start + lease_ttl.total_seconds()
        self._termination: TaskLeaseTermination | None = None
        self._token = shutdown_token.child_token() if shutdown_token else CancellationToken()

    @property
    def lease(self) -> TaskLease:
        """The current lease (with the latest renewed expiry)."""
        return self._lease

    @property
    def lease_ttl(self) -> timedelta:
        """The lease duration used by the claim and renewals."""
        return self._lease_ttl

    @property
    def clock(self) -> Clock:
        """The clock the safety deadline is measured on."""
        return self._clock

    @property
    def token(self) -> CancellationToken:
        """Cancelled on worker shutdown and at once on lease loss or renewal timeout."""
        return self._token

    @property
    def deadline(self) -> float:
        """The monotonic reading (on :attr:`clock`) after which the lease may have lapsed."""
        return self._deadline

    @property
    def termination(self) -> TaskLeaseTermination | None:
        """Why the guard stopped allowing writes, ``None`` while it is usable."""
        if self._termination is None and self._token.cancelled:
            # The parent (shutdown) token fired: remember it so later checks agree.
            self._termination = TaskLeaseTermination.SHUTDOWN_REQUESTED
        return self._termination

    @property
    def lease_lost(self) -> bool:
        """Whether the lease is lost or could not be renewed in time (no more writes)."""
        return self._termination in (
            TaskLeaseTermination.LOST,
            TaskLeaseTermination.RENEWAL_TIMED_OUT,
        )

    def remaining(self) -> float:
        """Seconds until the safety deadline (negative once passed)."""
        return self._deadline - self._clock.monotonic()

    def record_renewed(self, lease: TaskLease, *, renewal_started_at: float) -> None:
        """Record a successful renewal (and the operator cancel it may report).

        Args:
            lease: The renewed lease the store returned (same task id and token).
            renewal_started_at: The monotonic reading taken before the renewal was sent.

        Raises:
            TaskInvalidValueError: When ``lease`` belongs to a different claim.
        """
        if not lease.same_claim(self._lease):
            raise TaskInvalidValueError(
                f"renewed lease for task #{lease.task_id} does not match the guarded claim"
            )
        if self._termination in (TaskLeaseTermination.LOST, TaskLeaseTermination.RENEWAL_TIMED_OUT):
            return
        self._lease = lease
        self._deadline = max(self._deadline, renewal_started_at + self._lease_ttl.total_seconds())
        if lease.cancel_requested and not self.cancel_requested:
            # The renewal read an operator's cancel: stop the body now; the lease stays
            # usable, so the execution's "cancelled" write is still fenced by the token.
            self.mark_cancel_requested()

    def mark_lost(self) -> TaskLeaseLostError:
        """Mark the lease lost (fence failed), cancel :attr:`token`, return the error."""
        self._termination = TaskLeaseTermination.LOST
        self._token.cancel()
        return TaskLeaseLostError(self._lease.task_id, self._lease.processing_token)

    def mark_renewal_timed_out(self) -> TaskLeaseRenewalTimeoutError:
        """Mark the renewal timed out, cancel :attr:`token`, return the error."""
        if self._termination is not TaskLeaseTermination.LOST:
            self._termination = TaskLeaseTermination.RENEWAL_TIMED_OUT
        self._token.cancel()
        return TaskLeaseRenewalTimeoutError(self._lease.task_id, self._lease.processing_token)

    def mark_cancel_requested(self) -> TaskLeaseControlError:
        """Record an operator's cancel (reported by a renewal), cancel :attr:`token`.

        Writes stay allowed: the execution writes the task ``cancelled``. A lease that
        is already lost, timed out or shutting down keeps that reason.

        Returns:
            The matching stop error (:class:`TaskCancelRequestedError` when it took).
        """
        if self._termination is None and not self._token.cancelled:
            self._termination = TaskLeaseTermination.CANCEL_REQUESTED
        self._token.cancel()
        error = self.stop_error()
        assert error is not None  # the token is cancelled, so there is a termination
        return error

    @property
    def cancel_requested(self) -> bool:
        """Whether an operator's cancel reached this claim (the body is being stopped)."""
        return self._termination is TaskLeaseTermination.CANCEL_REQUESTED

    def mark_shutdown_requested(self) -> TaskLeaseControlError:
        """Record a cooperative shutdown and return the matching stop error.

        A lease that is already lost or timed out keeps that (stronger) reason.
        """
        if self._termination is None:
            self._termination = TaskLeaseTermination.SHUTDOWN_REQUESTED
        return self.stop_error() or TaskWorkerShutdownRequestedError(
            self._lease.task_id, self._lease.processing_token
        )

    def stop_error(self) -> TaskLeaseControlError | None:
        """The lease-control error matching :attr:`termination`, or ``None`` while usable."""
        termination = self.termination
        task_id, token = self._lease.task_id, self._lease.processing_token
        if termination is TaskLeaseTermination.LOST:
            return TaskLeaseLostError(task_id, token)
        if termination is TaskLeaseTermination.RENEWAL_TIMED_OUT:
            return TaskLeaseRenewalTimeoutError(task_id, token)
        if termination is TaskLeaseTermination.SHUTDOWN_REQUESTED:
            return TaskWorkerShutdownRequestedError(task_id, token)
        if termination is TaskLeaseTermination.CANCEL_REQUESTED:
            return TaskCancelRequestedError(task_id, token)
        return None

    def ensure_active(self) -> None:
        """Return only while writes under this lease are still safe.

        Raises:
            TaskLeaseLostError: The fence failed earlier.
            TaskLeaseRenewalTimeoutError: The safety deadline passed without a renewal.
            TaskWorkerShutdownRequestedError: The worker is shutting down.
            TaskCancelRequestedError: An operator cancelled the task.
        """
        error = self.stop_error()
        if error is None and self.remaining() <= 0:
            error = self.mark_renewal_timed_out()
        if error is not None:
            raise error

    def __repr__(self) -> str:
        return (
            f"TaskLeaseGuard(task_id={self._lease.task_id}, "
            f"termination={self._termination and self._termination.value})"
        )


# --- the body's writes and its success in one transaction ---


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
