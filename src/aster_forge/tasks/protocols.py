"""Store protocols of :mod:`aster_forge.tasks`, each documenting its fencing contract.

A product implements these against its own tables (or uses :mod:`aster_forge.db`);
:mod:`aster_forge.testing` ships in-memory implementations and conformance suites.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Protocol, TypeVar, runtime_checkable

from ._control import TaskLaneControlStore, TaskRetentionStore
from ._lease import TaskLease, TaskTransaction
from ._rate_limit import TaskRateLimit
from ._records import (
    BackgroundTaskRecord,
    EnqueueResult,
    NewTask,
    TaskCancelOutcome,
    TaskCompletion,
    TaskLaneCounts,
    TaskPage,
    TaskStatus,
)
from ._schedules import (
    CronSchedule,
    IntervalSchedule,
    ScheduledTaskClaim,
    ScheduledTaskOutcome,
    ScheduledTaskRecord,
)
from ._workflow import TaskDependency

# --- task records and claim/heartbeat/execution stores ---

KindT_co = TypeVar("KindT_co", covariant=True)
TaskT_co = TypeVar("TaskT_co", covariant=True)
LaneT_contra = TypeVar("LaneT_contra", contravariant=True)


class TaskRecord(Protocol[KindT_co]):
    """The minimal read-only view of a persisted task row.

    Declared with read-only properties so a frozen dataclass or an ORM row object
    satisfies it structurally.
    """

    @property
    def id(self) -> int:
        """The stable database identifier, used in fences and diagnostics."""
        ...

    @property
    def kind(self) -> KindT_co:
        """The product-owned task kind (a member of the product's kind enum)."""
        ...


class ClaimableTaskRecord(TaskRecord[KindT_co], Protocol[KindT_co]):
    """A task row with the fields a lane claim orders and filters by."""

    @property
    def run_at(self) -> datetime:
        """When the task becomes due (aware UTC); not claimable before it."""
        ...

    @property
    def priority(self) -> int:
        """Claim order within a lane: higher first, then ``run_at``, then ``id``."""
        ...


class ExecutableTaskRecord(TaskRecord[KindT_co], Protocol[KindT_co]):
    """A claimed task row carrying what the executor needs to run it.

    ``attempt`` counts the executions already *counted* before this one: a claim does
    not increment it; a counted retry or a failure persists ``attempt + 1``; a shutdown
    release leaves it unchanged.
    """

    @property
    def payload_json(self) -> str:
        """The stored payload as JSON text, decoded by the kind's spec."""
        ...

    @property
    def steps_json(self) -> str | None:
        """The stored step list as JSON text, or ``None`` when the kind has no steps yet."""
        ...

    @property
    def attempt(self) -> int:
        """Counted attempts persisted before the current execution (starts at 0)."""
        ...

    @property
    def max_attempts(self) -> int:
        """How many counted attempts are allowed before a retryable failure becomes final."""
        ...

    @property
    def processing_token(self) -> str | None:
        """The token of the claim that owns the row, ``None`` when not processing."""
        ...

    @property
    def lease_expires_at(self) -> datetime | None:
        """When the current claim lapses (aware UTC), ``None`` when not processing."""
        ...

    @property
    def snooze_count(self) -> int:
        """How many times the body snoozed the task (capped by the worker's
        ``max_snoozes``; a store without snoozes answers ``0``)."""
        ...

    @property
    def rescued(self) -> bool:
        """Whether this claim took over the expired lease of a lost worker (a store
        that does not rescue answers ``False``)."""
        ...

    @property
    def trace_context(self) -> str | None:
        """The enqueuing side's trace context (carrier JSON) each attempt's span links
        to; a store that does not keep it answers ``None``."""
        ...

    @property
    def partition_key(self) -> str | None:
        """The partition the task was enqueued under (``enqueue(partition=...)``); a
        store without partitions answers ``None``."""
        ...


class TaskClaimStore(Protocol[TaskT_co, LaneT_contra]):
    """Claims due tasks of one lane, each under a fresh processing token.

    ``TaskT_co`` is the product's row type (normally both claimable and executable);
    ``LaneT_contra`` is the product's lane enum.
    """

    async def claim_due_for_lane(
        self,
        lane: LaneT_contra,
        limit: int,
        owner: str,
        lease_ttl: timedelta,
        *,
        cluster_limit: int | None = None,
        partition_limit: int | None = None,
        rate_limit: TaskRateLimit | None = None,
        partition_rate_limit: TaskRateLimit | None = None,
    ) -> Sequence[TaskT_co]:
        """Atomically claim up to ``limit`` due tasks whose kind belongs to ``lane``.

        Fencing contract:
            * every returned record carries a *fresh* ``processing_token`` (never reused,
              never shared with another claim) and ``lease_expires_at = now + lease_ttl``,
              both already persisted when this returns;
            * a task whose live (unexpired) lease belongs to another claim is never
              returned, even when two instances claim concurrently;
            * a task in processing whose lease has expired is claimable again (rescue of a
              crashed worker); the new token fences the old worker out;
            * ``limit <= 0`` claims nothing;
            * with ``cluster_limit``, the claim leaves at most that many tasks of the lane
              running across every claimer of the store's table (claims of the lane
              serialise on a lock; a task whose lease expired no longer counts), even
              when instances claim concurrently;
            * with ``partition_limit``, at most that many tasks of one partition of the
              lane run at once across every claimer (tasks without a partition are not
              capped), and the claim takes partitions in turn: each partition's first
              due task (by priority, due time, id), then each one's second, and so on;
            * with ``rate_limit=(count, period)``, at most ``count`` tasks of the lane
              start (are claimed) in each window of ``period`` across every claimer;
              windows are aligned to the Unix epoch on the store's clock, and a claim
              counts the window's starts under the same lock as ``cluster_limit``;
            * with ``partition_rate_limit=(count, period)``, at most ``count`` tasks of
              one partition of the lane start in each window of ``period`` across every
              claimer (tasks without a partition are not counted); a partition whose
              budget is spent is skipped and other partitions' tasks are claimed.

        Args:
            lane: The lane whose kinds may be claimed.
            limit: The most tasks to claim (free slots of the lane).
            owner: An identifier of the claiming worker, for diagnostics.
            lease_ttl: How long the claim stays live without a heartbeat.
            cluster_limit: The most tasks of the lane running at once across all
                claimers (``None``: no limit beyond ``limit``).
            partition_limit: The most tasks of one partition of the lane running at
                once across all claimers (``None``: partitions are not considered).
            rate_limit: ``(count, period)``: the most starts of the lane per window of
                ``period`` across all claimers (``None``: starts are not rate limited).
            partition_rate_limit: ``(count, period)``: the most starts of one partition
                of the lane per window of ``period`` across all claimers (``None``:
                partitions' starts are not rate limited).

        Returns:
            The claimed rows, in claim order (priority, due time, id).
        """
        ...


class TaskHeartbeatStore(Protocol):
    """Extends the lease of a claimed task."""

    async def renew_task_lease(self, lease: TaskLease, lease_ttl: timedelta) -> TaskLease | None:
        """Extend ``lease`` to ``now + lease_ttl`` if the claim still owns the task.

        Fencing contract: the update matches only the row with ``lease.task_id`` that is
        still processing under ``lease.processing_token``. When it matches, the new expiry
        is persisted and returned as a renewed :class:`TaskLease` carrying the row's
        ``cancel_requested`` read in the same statement (a store that cannot report it
        leaves the flag ``False``: an operator cancel then takes effect only at the
        owner's next retry or release); when it does not (the
        task finished, was released, or another claim took it over) nothing is written and
        ``None`` is returned - the caller must treat the lease as lost. Raising means a
        transient storage failure; the heartbeat loop retries it.

        Args:
            lease: The lease being renewed.
            lease_ttl: The extension from now.

        Returns:
            The renewed lease, or ``None`` when the fence failed.
        """
        ...

    async def renew_task_leases_many(
        self, leases: Sequence[TaskLease], lease_ttl: timedelta
    ) -> Sequence[TaskLease | None]:
        """Batched :meth:`renew_task_lease`: each lease fenced on its own, input order.

        The worker's heartbeat renews every in-flight lease with one call per tick.
        """
        ...


class ClaimedTaskExecutionStore(Protocol):
    """Records the outcome of a claimed task; every write is fenced by the lease.

    Each method updates only the row with ``lease.task_id`` that is still processing
    under ``lease.processing_token``. ``True`` means the write happened; ``False`` means
    the fence failed (the lease was lost or taken over) and *nothing* was written. Any
    exception means a storage failure with nothing known to be written.
    """

    async def mark_task_succeeded(
        self, lease: TaskLease, result_json: str | None, steps_json: str | None
    ) -> bool:
        """Mark the task succeeded, store its result and final steps, clear the token.

        Args:
            lease: The claim that ran the task.
            result_json: The encoded result, or ``None`` for a result-less kind.
            steps_json: The final step list, or ``None`` to leave the stored steps.

        Returns:
            ``True`` when written, ``False`` when the fence failed.
        """
        ...

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
        """Put the task back to pending, due after ``delay``, and clear the token.

        Args:
            lease: The claim that ran the task.
            delay: How long from now until the task is due again (never negative).
            error: The error text to store (``last_error``).
            steps_json: The step list with the active step marked failed, or ``None``.
            count_attempt: Whether this execution counts against ``max_attempts``
                (persist ``attempt + 1``); ``False`` leaves ``attempt`` unchanged.
            traceback: The failure's bounded traceback to store beside the error
                (``last_traceback``), or ``None`` to store none.

        Returns:
            ``True`` when written, ``False`` when the fence failed.
        """
        ...

    async def mark_task_failed(
        self,
        lease: TaskLease,
        *,
        error: str,
        steps_json: str | None,
        manual_retry: bool,
        traceback: str | None = None,
    ) -> bool:
        """Mark the task failed for good (persisting ``attempt + 1``) and clear the token.

        Args:
            lease: The claim that ran the task.
            error: The error text to store (``last_error``).
            steps_json: The step list with the active step marked failed, or ``None``.
            manual_retry: Whether an operator may retry the task by hand later
                (``TaskRetryClass.can_manual_retry``); stored for the admin UI.
            traceback: The failure's bounded traceback to store beside the error
                (``last_traceback``), or ``None`` to store none.

        Returns:
            ``True`` when written, ``False`` when the fence failed.
        """
        ...

    async def release_task_for_shutdown(self, lease: TaskLease) -> bool:
        """Return the task to pending, due now, without counting an attempt.

        Used when the worker stops before the task finished; the attempt is not a
        product failure, so ``attempt`` and the stored error stay unchanged.

        Returns:
            ``True`` when released, ``False`` when the fence failed.
        """
        ...

    async def update_task_steps(self, lease: TaskLease, steps_json: str) -> bool:
        """Persist step progress while the task runs.

        Args:
            lease: The claim running the task.
            steps_json: The serialized step list.

        Returns:
            ``True`` when written, ``False`` when the fence failed.
        """
        ...

    async def mark_tasks_succeeded_many(
        self, completions: Sequence[TaskCompletion]
    ) -> Sequence[bool]:
        """Batched :meth:`mark_task_succeeded`: one fenced write per entry, in input order.

        Each entry is fenced independently (``False`` where that fence failed).
        """
        ...

    async def begin_task_transaction(self, lease: TaskLease) -> TaskTransaction:
        """Open a transaction on the task's database for its body to write in
        (``ctx.transaction()``); the execution commits it with the fenced success.

        Raises:
            TaskTransactionUnavailableError: The store keeps no such database.
        """
        ...

    async def mark_task_cancelled(self, lease: TaskLease, *, steps_json: str | None) -> bool:
        """End the task ``CANCELLED`` (reason ``cancelled``) and clear the token.

        ``attempt`` and ``last_error`` are unchanged: a cancel is not a product failure.

        Args:
            lease: The claim that was running the task.
            steps_json: The step list to store, or ``None`` to keep the stored one.

        Returns:
            ``True`` when written, ``False`` when the fence failed.
        """
        ...

    async def mark_task_snoozed(
        self, lease: TaskLease, *, delay: timedelta, steps_json: str | None
    ) -> bool:
        """Put the task back to pending, due after ``delay``, without counting an attempt.

        ``snooze_count`` grows by one. When a cancel was requested meanwhile the task
        ends ``CANCELLED`` instead (as a retry would).

        Args:
            lease: The claim that ran the task.
            delay: How long from now until it is due again (never negative).
            steps_json: The step list to store, or ``None`` to keep the stored one.

        Returns:
            ``True`` when written, ``False`` when the fence failed.
        """
        ...


class TaskTempDirProvider(Protocol):
    """Creates and removes the per-task temporary directory behind ``ctx.temp_dir()``.

    Implemented by :mod:`aster_forge.tasks` temp-dir support (or the product); the
    directory is keyed by the claim so a stale worker never shares one with its successor.
    """

    async def create_task_temp_dir(self, lease: TaskLease) -> Path:
        """Create (if needed) and return the temp directory for this claim."""
        ...

    async def remove_task_temp_dir(self, lease: TaskLease) -> None:
        """Remove the claim's temp directory and everything in it; a missing one is fine."""
        ...


# --- scheduled task catalog store ---


@runtime_checkable
class ScheduledTaskStore(Protocol):
    """The scheduled task catalog: one execution per firing across instances.

    The runner's protocol is ``ensure -> claim due firing -> renew while running ->
    complete``. Claims are atomic across processes; renewal and completion are
    conditional on the ownership predicate ``(task_id, owner_id, claimed_at)``, so a
    firing another instance re-claimed can never be revived or completed through an
    old claim. Times come from the database server's clock where there is one
    (PostgreSQL, MariaDB), else from the store's injected clock; durations whose sum
    overflows saturate to "never". Invalid input raises
    :class:`~aster_forge.tasks.errors.ScheduledTaskValueError` before any I/O.

    Implementations: :class:`aster_forge.db.ScheduledTaskDbStore`,
    :class:`aster_forge.testing.InMemoryScheduledTaskStore`; check your own with
    :class:`aster_forge.testing.ScheduledTaskStoreConformance`.
    """

    async def ensure_scheduled_task(
        self,
        namespace: str,
        name: str,
        schedule: IntervalSchedule | CronSchedule,
    ) -> ScheduledTaskRecord:
        """Create the catalog row if missing (idempotent and safe under concurrency).

        ``schedule`` is an :class:`~aster_forge.tasks.IntervalSchedule` or a
        :class:`~aster_forge.tasks.CronSchedule`. A new row's first firing is the
        schedule's ``first_run_at(now)``: ``now + initial_delay`` for an interval, the
        first cron instant after ``now`` for cron. An existing row keeps its claim;
        a changed schedule is stored (interval, cron expression, timezone). An
        interval change keeps the pending firing and takes effect at the next
        completion; a change to a cron schedule moves an unclaimed row's pending
        firing to the new schedule's first instant after ``now``.

        Returns:
            The row as stored after the call.
        """
        ...

    async def claim_scheduled_task(
        self, namespace: str, name: str, owner_id: str, claim_ttl: timedelta
    ) -> ScheduledTaskClaim | None:
        """Atomically claim the current firing if it is due and unclaimed (or its claim expired).

        Returns:
            The claim (with its ``claimed_at`` timestamp and the firing's
            ``scheduled_at``), or ``None`` when the task is unknown, not yet due, or
            claimed by someone else unexpired.
        """
        ...

    async def renew_scheduled_task_claim(
        self, claim: ScheduledTaskClaim, claim_ttl: timedelta
    ) -> bool:
        """Extend the claim to ``now + claim_ttl`` if it still matches the ownership predicate.

        Only ``claim_expires_at`` and ``updated_at`` change. An expired claim nobody
        else took is renewed (so a transient outage does not cause a duplicate run).

        Returns:
            ``False`` when the firing was completed or re-claimed by someone else.
        """
        ...

    async def complete_scheduled_task(
        self,
        claim: ScheduledTaskClaim,
        outcome: ScheduledTaskOutcome,
        *,
        next_run_at: datetime | None = None,
    ) -> bool:
        """Record the outcome, advance ``next_run_at`` and release the claim (ownership-checked).

        Args:
            claim: The claim returned by :meth:`claim_scheduled_task`.
            outcome: Status, error text and duration to record.
            next_run_at: The next firing; default the stored schedule's next firing
                after ``now`` (``now + interval``, or the next cron instant).

        Returns:
            ``False`` (and nothing written) when the claim no longer matches.
        """
        ...

    async def get_scheduled_task(self, namespace: str, name: str) -> ScheduledTaskRecord | None:
        """Return the catalog row, or ``None`` when it does not exist."""
        ...

    async def list_scheduled_tasks(
        self, namespace: str | None = None
    ) -> Sequence[ScheduledTaskRecord]:
        """Return the catalog rows (of one namespace, or all) ordered by namespace and name."""
        ...


# --- dispatch and execution ---


class ClaimedTaskRecord(
    ClaimableTaskRecord[KindT_co], ExecutableTaskRecord[KindT_co], Protocol[KindT_co]
):
    """A row as a lane claim returns it: claimable fields plus what execution needs."""

    @property
    def rescued(self) -> bool:
        """Whether this claim took over the expired lease of a lost worker (counted in
        the worker's stats; a store that never rescues answers ``False``)."""
        ...


class ClaimedTaskStore(TaskHeartbeatStore, ClaimedTaskExecutionStore, Protocol):
    """What running a claimed task needs: lease renewal plus fenced outcome writes."""


class DispatchTaskStore(
    TaskClaimStore[TaskT_co, LaneT_contra],
    TaskHeartbeatStore,
    ClaimedTaskExecutionStore,
    Protocol[TaskT_co, LaneT_contra],
):
    """Everything a :class:`~aster_forge.tasks.TaskWorker` calls: lane claims,
    heartbeats, fenced writes, and the hints it runs faster with.

    :class:`aster_forge.db.BackgroundTaskDbStore` and
    :class:`aster_forge.testing.InMemoryTaskStore` implement it; a product's own store
    subclasses :class:`~aster_forge.tasks.TaskStoreBase`, which derives every method
    past the claim and the fenced writes.
    """

    async def mark_tasks_succeeded_and_claim(
        self,
        completions: Sequence[TaskCompletion],
        lane: LaneT_contra,
        limit: int,
        owner: str,
        lease_ttl: timedelta,
        *,
        cluster_limit: int | None = None,
        partition_limit: int | None = None,
        rate_limit: TaskRateLimit | None = None,
        partition_rate_limit: TaskRateLimit | None = None,
    ) -> tuple[Sequence[bool], Sequence[TaskT_co]]:
        """:meth:`mark_tasks_succeeded_many`, then :meth:`claim_due_for_lane` for the
        slots they free (under ``cluster_limit``, ``partition_limit``, ``rate_limit``
        and ``partition_rate_limit``, counting the written successes as finished); the
        worker calls it only when :attr:`claims_with_success`.

        Returns:
            The success results in input order, and the claimed records.
        """
        ...

    async def stage_waiting_tasks(self) -> int:
        """Move pending tasks that came due into the claim order (about once a second).

        Returns:
            How many tasks were moved (``0`` for a store whose claim reads every task).
        """
        ...

    def keep_connection(self) -> Callable[[], None]:
        """Keep a pooled connection while the worker has tasks in flight.

        Returns:
            Lets go of the connection (a second call does nothing).
        """
        ...

    @property
    def claims_with_success(self) -> bool:
        """Whether :meth:`mark_tasks_succeeded_and_claim` writes and claims together."""
        ...

    @property
    def success_writes_in_flight(self) -> int:
        """How many batched success writes the worker may have in flight at once."""
        ...


# --- reference task store ---


@runtime_checkable
class BackgroundTaskStore(
    DispatchTaskStore[BackgroundTaskRecord, str],
    TaskLaneControlStore,
    TaskRetentionStore,
    Protocol,
):
    """A complete task table: enqueue, claim, heartbeat, fenced outcomes, admin, control.

    Lanes and kinds are wire values (``str``; a ``StrEnum`` member works too). Claim
    order within a lane is ``priority`` descending, then ``run_at``, then ``id``.

    Rescue: a claim first looks at the lane's running tasks whose lease expired. Each
    one's lost execution counts an attempt (``attempt + 1``, ``failure_reason =
    LEASE_EXPIRED``); if attempts are left it becomes claimable again and the claim that
    picks it returns it with ``rescued=True``; if not, it ends ``FAILED`` (or
    ``CANCELLED`` if a cancel was requested), so a task that kills its worker every
    time cannot loop forever.

    Fenced writes (see :class:`ClaimedTaskExecutionStore`) match
    ``(id, processing_token, status RUNNING)`` only. Admin writes never change a running
    task's token: :meth:`cancel_task` on a running task only records the request.

    Implementations: :class:`aster_forge.db.BackgroundTaskDbStore`,
    :class:`aster_forge.testing.InMemoryTaskStore`; check your own with
    :class:`aster_forge.testing.TaskStoreConformance`.
    """

    async def enqueue(self, task: NewTask) -> EnqueueResult:
        """Insert a task, or return the existing row when its dedupe key is taken.

        Safe under races between processes: exactly one row per dedupe key exists and
        every racer gets it back (``created`` is ``True`` for exactly one of them).
        """
        ...

    async def enqueue_many(self, tasks: Sequence[NewTask]) -> Sequence[EnqueueResult]:
        """Enqueue several tasks in one transaction; results are in input order.

        A dedupe key repeated inside ``tasks`` yields one row; later entries get it
        back with ``created=False``.
        """
        ...

    async def get_task(self, task_id: int) -> BackgroundTaskRecord | None:
        """Return the row, or ``None`` when it does not exist."""
        ...

    async def list_tasks(
        self,
        *,
        status: TaskStatus | None = None,
        kind: str | None = None,
        lane: str | None = None,
        limit: int = 50,
        before_id: int | None = None,
    ) -> TaskPage:
        """Return one page of rows, newest (highest id) first, optionally filtered.

        Args:
            status: Only this status.
            kind: Only this kind (wire value).
            lane: Only this lane (wire value).
            limit: Page size, 1..1000.
            before_id: Keyset cursor: only ids below it (from ``next_before_id``).
        """
        ...

    async def retry_task(
        self, task_id: int, *, run_at: datetime | None = None, force: bool = False
    ) -> BackgroundTaskRecord:
        """Operator retry: put a ``FAILED`` or ``CANCELLED`` task back to pending.

        Resets ``attempt`` to 0 and clears the result and failure reason (``last_error``
        is kept for history). Conditional on the status, so it cannot race a worker.
        A store with workflows brings back, in the same write, the dependents the
        task's ending cancelled: they wait for it again.

        Args:
            task_id: The task.
            run_at: When it becomes due (default now).
            force: Retry even a failure stored with ``manual_retry_allowed=False``.

        Raises:
            TaskNotFoundError: No such task.
            TaskStateError: Not failed/cancelled, or manual retry not allowed.
        """
        ...

    async def cancel_task(self, task_id: int) -> TaskCancelOutcome:
        """Cancel a pending task, or request cancellation of a running one.

        See :class:`~aster_forge.tasks.TaskCancelOutcome` for the exact semantics; the
        running owner's processing token and lease are never touched.
        """
        ...

    async def lane_counts(self, lanes: Sequence[str] | None = None) -> Sequence[TaskLaneCounts]:
        """Pending/due/running/expired counts and the oldest due ``run_at`` per lane.

        Args:
            lanes: Report exactly these lanes (zeros where empty); default: every lane
                that has pending or running tasks. Sorted by lane.
        """
        ...

    async def enqueue_workflow(
        self, tasks: Sequence[NewTask], dependencies: Sequence[TaskDependency]
    ) -> Sequence[EnqueueResult]:
        """Write every task and edge of a workflow at once; results in input order.

        A task with dependencies is stored ``pending`` but not due until they have all
        finished: then it becomes due, or ends ``CANCELLED`` when one of them ended
        failed or cancelled without ``run_anyway`` on its edge (and so, in turn, do its
        own dependents), in the write of the ending that decided it. An operator retry
        of that dependency brings the cancelled dependents back (see
        :meth:`retry_task`). A task with dependents waiting is returned with
        ``dependents_waiting`` set.

        Raises:
            TaskEnqueueValueError: The edges are not a DAG over ``tasks``, or a task
                has a dedupe key (see :meth:`~aster_forge.tasks.TaskDependency.checked`);
                nothing is written.
        """
        ...

    async def dependency_records(self, task_id: int) -> Sequence[BackgroundTaskRecord]:
        """The rows of the tasks ``task_id`` waits (or waited) for, by id; empty for a
        task without dependencies (or an unknown id)."""
        ...


# --- runtime workers and scheduling ---


@runtime_checkable
class ScheduledOutcomeConvertible(Protocol):
    """A product outcome that says what the scheduled catalog should record for it.

    When a scheduled body returns (or ``on_exception`` maps an exception to) a value
    with this method, the runner completes the firing with its result; a plain
    :class:`~aster_forge.tasks.ScheduledTaskOutcome` is used as is; any other value
    records "succeeded" when the body returned and "failed" when it raised.
    """

    def scheduled_task_outcome(self) -> ScheduledTaskOutcome:
        """Return the status and error text to store in the catalog row."""
        ...
