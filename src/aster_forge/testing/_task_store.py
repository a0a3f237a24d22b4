"""An in-memory :class:`~aster_forge.tasks.BackgroundTaskStore` on an injected clock."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from ..runtime._internal import Clock, SystemClock, saturating_expiry
from ..tasks import NewTask, TaskLease, TaskRegistry, TaskStoreBase
from ..tasks._internal import (
    LEASE_EXPIRED_ERROR,
    MAX_TASK_CLAIM_LIMIT,
    TOP_PARTITIONS_WAITING,
    BackgroundTaskRecord,
    EnqueueResult,
    TaskCancelOutcome,
    TaskCompletion,
    TaskFailureReason,
    TaskLaneCounts,
    TaskLaneState,
    TaskPage,
    TaskRateLimit,
    TaskStatus,
    cancel_active_step,
    check_claim_args,
    check_claim_rate_limit,
    check_list_tasks_args,
    check_retry_delay,
    check_run_at,
    check_ttl,
    dedupe_window_holds,
    fair_pick,
    parse_task_steps_json,
    rate_window,
    serialize_task_steps_json,
    wire_value,
)
from ..tasks.errors import (
    TaskEnqueueValueError,
    TaskNotFoundError,
    TaskRegistryError,
    TaskStateError,
)
from ._task_store_admin import InMemoryTaskAdminMixin
from ._task_store_control import InMemoryTaskControlMixin
from ._task_store_workflow import InMemoryTaskWorkflowMixin

__all__ = ["InMemoryTaskStore"]


class InMemoryTaskStore(
    InMemoryTaskAdminMixin,
    InMemoryTaskControlMixin,
    InMemoryTaskWorkflowMixin,
    TaskStoreBase[BackgroundTaskRecord, str],
):
    """A :class:`~aster_forge.tasks.BackgroundTaskStore` kept in a dict.

    Every method runs without awaiting in between reads and writes, so each is atomic
    on the event loop, like one database transaction. Time comes from ``clock`` (use
    :class:`~aster_forge.testing.ManualClock` in tests). It follows exactly the
    semantics of :class:`aster_forge.db.BackgroundTaskDbStore`, so dispatcher tests on
    it carry over.

    Args:
        clock: The time source for ``run_at``, leases and timestamps.
        registry: A validated :class:`~aster_forge.tasks.TaskRegistry`: every enqueued
            task is checked against it (kind registered, lane its own, the spec's steps
            filled in when absent); a bad batch is refused whole. Without one, any kind
            and lane are stored as given.

    Example:
        >>> from aster_forge.tasks import NewTask
        >>> from aster_forge.testing import InMemoryTaskStore, ManualClock
        >>> store = InMemoryTaskStore(ManualClock())
        >>> import asyncio
        >>> asyncio.run(store.enqueue(NewTask("email", "default"))).created
        True
    """

    def __init__(
        self, clock: Clock | None = None, *, registry: TaskRegistry[Any, Any, Any] | None = None
    ) -> None:
        if registry is not None and not registry.validated:
            raise TaskRegistryError("task registry is not validated; call validate() first")
        self._registry = registry
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._rows: dict[int, BackgroundTaskRecord] = {}
        self._by_key: dict[str, int] = {}
        self._lanes: dict[str, TaskLaneState] = {}
        # (lane, partition): the window its starts were counted in last, and the count.
        self._partition_rates: dict[tuple[str, str], tuple[datetime, int]] = {}
        self._next_id = 1
        self.claim_calls = 0
        """How many times :meth:`claim_due_for_lane` was called (for dispatcher tests)."""
        self._lease_expiries: dict[str, dict[TaskStatus, int]] = {}
        self._dependents: dict[int, list[int]] = {}
        self._dependencies: dict[int, list[tuple[int, bool]]] = {}

    @property
    def clock(self) -> Clock:
        """The store's clock."""
        return self._clock

    def lease_expiry_counts(self) -> dict[str, dict[TaskStatus, int]]:
        """Tasks this store's claims ended because their lease had expired, per lane
        (see :meth:`aster_forge.db.BackgroundTaskDbStore.lease_expiry_counts`)."""
        return {lane: dict(counts) for lane, counts in self._lease_expiries.items()}

    def all_tasks(self) -> list[BackgroundTaskRecord]:
        """Every row, by id (a synchronous snapshot for test assertions)."""
        return [self._rows[key] for key in sorted(self._rows)]

    # -- enqueue -----------------------------------------------------------------

    def _insert(self, task: NewTask, now: datetime, fresh: set[int]) -> EnqueueResult:
        # ``fresh``: the rows this batch inserted or already resolved a key to.
        key = task.dedupe_key_text
        if key is not None and key in self._by_key:
            holder = self._rows[self._by_key[key]]
            window = task.windowed_dedupe_key
            if holder.id in fresh or window is None:
                return EnqueueResult(holder, created=False)
            if dedupe_window_holds(window, holder, now):
                # A key's first task in the batch decides: later ones get this row.
                fresh.add(holder.id)
                if window.replace:
                    holder = self._replaced(task, holder, now)
                return EnqueueResult(holder, created=False)
            # The holder's window ended: the key moves to a new task.
            self._rows[holder.id] = replace(holder, dedupe_key=None)
            del self._by_key[key]
        run_at = task.run_at if task.run_at is not None else saturating_expiry(now, task.delay)
        record = BackgroundTaskRecord(
            id=self._next_id,
            kind=task.kind,
            lane=task.lane,
            status=TaskStatus.PENDING,
            payload_json=task.payload_json,
            result_json=None,
            steps_json=task.steps_json,
            attempt=0,
            max_attempts=task.max_attempts,
            run_at=run_at,
            priority=task.priority,
            processing_token=None,
            lease_expires_at=None,
            claimed_by=None,
            dedupe_key=key,
            last_error=None,
            failure_reason=None,
            manual_retry_allowed=True,
            cancel_requested=False,
            rescued=False,
            created_at=now,
            updated_at=now,
            started_at=None,
            finished_at=None,
            trace_context=task.trace_context,
            partition_key=task.partition,
        )
        self._next_id += 1
        self._rows[record.id] = record
        fresh.add(record.id)
        if key is not None:
            self._by_key[key] = record.id
        return EnqueueResult(record, created=True)

    def _replaced(
        self, task: NewTask, holder: BackgroundTaskRecord, now: datetime
    ) -> BackgroundTaskRecord:
        if holder.status is not TaskStatus.PENDING or holder.kind != task.kind:
            return holder
        run_at = task.run_at if task.run_at is not None else saturating_expiry(now, task.delay)
        updated = replace(holder, payload_json=task.payload_json, run_at=run_at, updated_at=now)
        self._rows[holder.id] = updated
        return updated

    def _checked(self, tasks: Sequence[NewTask]) -> list[NewTask]:
        for task in tasks:
            if not isinstance(task, NewTask):
                raise TypeError(f"enqueue expects NewTask, got {type(task).__name__}")
        registry = self._registry
        return list(tasks) if registry is None else [registry.check_new_task(t) for t in tasks]

    async def enqueue(self, task: NewTask, *, connection: None = None) -> EnqueueResult:
        """Insert ``task`` or return the row holding its dedupe key (registry-checked)."""
        return (await self.enqueue_many([task], connection=connection))[0]

    async def enqueue_many(
        self, tasks: Sequence[NewTask], *, connection: None = None
    ) -> list[EnqueueResult]:
        """Enqueue every task atomically; results in input order.

        Every task is checked first (with a registry), so a bad one refuses the batch.

        Raises:
            TaskEnqueueValueError: When ``connection`` is given: there is no database
                transaction to join (the keyword exists so code written for
                :class:`aster_forge.db.BackgroundTaskDbStore` calls both alike).
        """
        if connection is not None:
            raise TaskEnqueueValueError("InMemoryTaskStore has no database transaction to join")
        checked = self._checked(tasks)
        now = self._clock.now()
        fresh: set[int] = set()
        return [self._insert(task, now, fresh) for task in checked]

    # -- claim and rescue ---------------------------------------------------------

    def _rescue_expired(self, lane: str, now: datetime) -> None:
        for row in list(self._rows.values()):
            if (
                row.lane != lane
                or row.status is not TaskStatus.RUNNING
                or row.lease_expires_at is None
                or row.lease_expires_at > now
            ):
                continue
            attempt = row.attempt + 1
            status = TaskStatus.PENDING
            reason = TaskFailureReason.LEASE_EXPIRED
            finished: datetime | None = None
            if row.cancel_requested:
                status, finished = TaskStatus.CANCELLED, now
                reason = TaskFailureReason.CANCELLED
            elif attempt >= row.max_attempts:
                status, finished = TaskStatus.FAILED, now
            if finished is not None:
                ended = self._lease_expiries.setdefault(
                    lane, {TaskStatus.FAILED: 0, TaskStatus.CANCELLED: 0}
                )
                ended[status] += 1
            self._rows[row.id] = replace(
                row,
                status=status,
                attempt=attempt,
                processing_token=None,
                lease_expires_at=None,
                last_error=LEASE_EXPIRED_ERROR,
                last_traceback=None,
                failure_reason=reason,
                rescued=status is TaskStatus.PENDING,
                updated_at=now,
                finished_at=finished,
            )
            if finished is not None:
                self._settle([row.id])

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
        """Rescue expired leases of ``lane``, then claim up to ``limit`` due tasks
        (fewer when ``cluster_limit`` tasks of the lane would then be running; with
        ``partition_limit``, partitions in turn and none past the limit; with
        ``rate_limit``, no more than the starts left in the current window; with
        ``partition_rate_limit``, no partition past the starts it has left in it)."""
        lane_value = check_claim_args(lane, owner, lease_ttl, limit, cluster_limit, partition_limit)
        rate = check_claim_rate_limit(rate_limit)
        partition_rate = check_claim_rate_limit(partition_rate_limit, "partition_rate_limit")
        self.claim_calls += 1
        if limit <= 0:
            return []
        now = self._clock.now()
        self._rescue_expired(lane_value, now)
        if self._lane_paused(lane_value):
            return []
        if cluster_limit is not None:
            running = sum(
                1
                for row in self._rows.values()
                if row.lane == lane_value and row.status is TaskStatus.RUNNING
            )
            limit = max(0, min(limit, cluster_limit - running))
        window: datetime | None = None
        if rate is not None:
            window = rate_window(now, rate[1])
            limit = max(0, min(limit, rate[0] - self._rate_used(lane_value, window)))
        pending = [
            row
            for row in self._rows.values()
            if row.lane == lane_value and row.status is TaskStatus.PENDING and row.run_at <= now
        ]
        part_window = None if partition_rate is None else rate_window(now, partition_rate[1])
        if partition_limit is None and part_window is None:
            due = sorted(pending, key=lambda row: (-row.priority, row.run_at, row.id))[:limit]
        else:
            running_in: dict[str, int] = {}
            for row in self._rows.values():
                if (
                    row.lane == lane_value
                    and row.status is TaskStatus.RUNNING
                    and row.partition_key
                ):
                    running_in[row.partition_key] = running_in.get(row.partition_key, 0) + 1
            budget_left = None
            if partition_rate is not None and part_window is not None:
                budget_left = {
                    key: partition_rate[0] - self._partition_rate_used(lane_value, key, part_window)
                    for key in {row.partition_key for row in pending if row.partition_key}
                }
            due = fair_pick(
                pending,
                running_in,
                partition_limit=partition_limit,
                limit=limit,
                budget_left=budget_left,
            )
        expires = saturating_expiry(now, lease_ttl)
        claimed: list[BackgroundTaskRecord] = []
        for row in due:
            record = replace(
                row,
                status=TaskStatus.RUNNING,
                processing_token=uuid.uuid4().hex,
                lease_expires_at=expires,
                claimed_by=owner,
                started_at=now,
                updated_at=now,
            )
            self._rows[row.id] = record
            claimed.append(record)
        if window is not None and claimed:
            state = self._lanes.get(lane_value) or TaskLaneState(lane_value, updated_at=now)
            self._lanes[lane_value] = replace(
                state,
                rate_window_start=window,
                rate_started=self._rate_used(lane_value, window) + len(claimed),
            )
        if part_window is not None:
            for record in claimed:
                key = record.partition_key
                if key is not None:
                    used = self._partition_rate_used(lane_value, key, part_window)
                    self._partition_rates[lane_value, key] = (part_window, used + 1)
        return claimed

    def _partition_rate_used(self, lane: str, partition: str, window: datetime) -> int:
        """Starts of ``partition`` already counted in ``window`` (as :meth:`_rate_used`)."""
        stored = self._partition_rates.get((lane, partition))
        if stored is None or stored[0] < window:
            return 0
        return stored[1] if stored[0] == window else MAX_TASK_CLAIM_LIMIT

    def _rate_used(self, lane: str, window: datetime) -> int:
        """Starts already counted in ``window`` (all of it once a later window began)."""
        state = self._lanes.get(lane)
        stored = None if state is None else state.rate_window_start
        if state is None or stored is None or stored < window:
            return 0
        return state.rate_started if stored == window else MAX_TASK_CLAIM_LIMIT

    # -- fenced writes --------------------------------------------------------------

    def _owned(self, lease: TaskLease) -> BackgroundTaskRecord | None:
        row = self._rows.get(lease.task_id)
        if (
            row is None
            or row.status is not TaskStatus.RUNNING
            or row.processing_token != lease.processing_token
        ):
            return None
        return row

    def _finish(self, row: BackgroundTaskRecord, **changes: Any) -> None:
        # A task that ends keeps whether its last run was a rescue; one going back to
        # pending starts afresh.
        status = changes.get("status")
        ended = isinstance(status, TaskStatus) and status.is_terminal
        self._rows[row.id] = replace(
            row,
            processing_token=None,
            lease_expires_at=None,
            rescued=row.rescued and ended,
            updated_at=self._clock.now(),
            **changes,
        )
        if ended:
            self._settle([row.id])

    async def renew_task_lease(self, lease: TaskLease, lease_ttl: timedelta) -> TaskLease | None:
        """Extend the lease if the claim still owns the task (else ``None``)."""
        check_ttl(lease_ttl)
        row = self._owned(lease)
        if row is None:
            return None
        now = self._clock.now()
        expires = saturating_expiry(now, lease_ttl)
        self._rows[row.id] = replace(row, lease_expires_at=expires, updated_at=now)
        return lease.renewed(expires, cancel_requested=row.cancel_requested)

    async def renew_task_leases_many(
        self, leases: Sequence[TaskLease], lease_ttl: timedelta
    ) -> list[TaskLease | None]:
        """Batched :meth:`renew_task_lease`: each lease fenced on its own, input order."""
        check_ttl(lease_ttl)
        return [await self.renew_task_lease(lease, lease_ttl) for lease in leases]

    def _succeed(self, lease: TaskLease, result_json: str | None, steps_json: str | None) -> bool:
        row = self._owned(lease)
        if row is None:
            return False
        self._finish(
            row,
            status=TaskStatus.SUCCEEDED,
            result_json=result_json,
            steps_json=row.steps_json if steps_json is None else steps_json,
            failure_reason=None,
            finished_at=self._clock.now(),
        )
        return True

    async def mark_task_succeeded(
        self, lease: TaskLease, result_json: str | None, steps_json: str | None
    ) -> bool:
        """Fenced: mark succeeded and store the result."""
        return self._succeed(lease, result_json, steps_json)

    async def mark_tasks_succeeded_many(self, completions: Sequence[TaskCompletion]) -> list[bool]:
        """Fenced per entry; results in input order."""
        return [self._succeed(c.lease, c.result_json, c.steps_json) for c in completions]

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
        """Fenced: back to pending after ``delay`` (cancelled if a cancel was requested)."""
        check_retry_delay(delay)
        row = self._owned(lease)
        if row is None:
            return False
        self._requeue(
            row,
            delay,
            steps_json,
            attempt=row.attempt + 1 if count_attempt else row.attempt,
            last_error=error,
            last_traceback=traceback,
            failure_reason=TaskFailureReason.PRODUCT_ERROR,
        )
        return True

    async def mark_task_failed(
        self,
        lease: TaskLease,
        *,
        error: str,
        steps_json: str | None,
        manual_retry: bool,
        traceback: str | None = None,
    ) -> bool:
        """Fenced: failed for good, ``attempt + 1``."""
        row = self._owned(lease)
        if row is None:
            return False
        self._finish(
            row,
            status=TaskStatus.FAILED,
            attempt=row.attempt + 1,
            last_error=error,
            last_traceback=traceback,
            failure_reason=TaskFailureReason.PRODUCT_ERROR,
            manual_retry_allowed=manual_retry,
            steps_json=row.steps_json if steps_json is None else steps_json,
            finished_at=self._clock.now(),
        )
        return True

    async def release_task_for_shutdown(self, lease: TaskLease) -> bool:
        """Fenced: back to pending, due now, attempt and error unchanged."""
        row = self._owned(lease)
        if row is None:
            return False
        now = self._clock.now()
        if row.cancel_requested:
            self._finish(
                row,
                status=TaskStatus.CANCELLED,
                failure_reason=TaskFailureReason.CANCELLED,
                finished_at=now,
            )
        else:
            self._finish(row, status=TaskStatus.PENDING, run_at=now)
        return True

    async def update_task_steps(self, lease: TaskLease, steps_json: str) -> bool:
        """Fenced: store step progress."""
        row = self._owned(lease)
        if row is None:
            return False
        self._rows[row.id] = replace(row, steps_json=steps_json, updated_at=self._clock.now())
        return True

    # -- admin ------------------------------------------------------------------------

    async def get_task(self, task_id: int) -> BackgroundTaskRecord | None:
        """Return the row or ``None``."""
        return self._rows.get(task_id)

    async def list_tasks(
        self,
        *,
        status: TaskStatus | None = None,
        kind: str | None = None,
        lane: str | None = None,
        limit: int = 50,
        before_id: int | None = None,
    ) -> TaskPage:
        """One page, newest first, filtered."""
        status_v, kind_v, lane_v = check_list_tasks_args(status, kind, lane, limit, before_id)
        rows = [
            row
            for task_id, row in sorted(self._rows.items(), reverse=True)
            if (before_id is None or task_id < before_id)
            and (status_v is None or row.status == status_v)
            and (kind_v is None or row.kind == kind_v)
            and (lane_v is None or row.lane == lane_v)
        ]
        items = rows[:limit]
        more = len(rows) > limit
        return TaskPage(items, items[-1].id if more else None)

    async def retry_task(
        self, task_id: int, *, run_at: datetime | None = None, force: bool = False
    ) -> BackgroundTaskRecord:
        """Operator retry of a failed/cancelled task; the workflow dependents its ending
        cancelled wait again."""
        self._retry_row(task_id, run_at=run_at, force=force)
        self._restore([task_id])
        return self._rows[task_id]

    def _retry_row(self, task_id: int, *, run_at: datetime | None, force: bool) -> None:
        row = self._rows.get(task_id)
        if row is None:
            raise TaskNotFoundError(task_id)
        if row.status not in (TaskStatus.FAILED, TaskStatus.CANCELLED):
            raise TaskStateError(task_id, row.status.value, "only failed or cancelled tasks retry")
        if row.status is TaskStatus.FAILED and not row.manual_retry_allowed and not force:
            raise TaskStateError(task_id, row.status.value, "manual retry is not allowed")
        check_run_at(run_at)
        now = self._clock.now()
        record = replace(
            row,
            status=TaskStatus.PENDING,
            attempt=0,
            run_at=run_at or now,
            result_json=None,
            failure_reason=None,
            manual_retry_allowed=True,
            cancel_requested=False,
            rescued=False,
            updated_at=now,
            finished_at=None,
        )
        self._rows[task_id] = record

    async def cancel_task(self, task_id: int) -> TaskCancelOutcome:
        """Cancel a pending task or flag a running one."""
        row = self._rows.get(task_id)
        if row is None:
            return TaskCancelOutcome.NOT_FOUND
        now = self._clock.now()
        if row.status is TaskStatus.PENDING:
            steps_json = row.steps_json
            if steps_json is not None:  # its "Waiting for worker" step ends cancelled
                steps_json = serialize_task_steps_json(
                    cancel_active_step(parse_task_steps_json(steps_json))
                )
            self._rows[task_id] = replace(
                row,
                status=TaskStatus.CANCELLED,
                failure_reason=TaskFailureReason.CANCELLED,
                rescued=False,
                steps_json=steps_json,
                updated_at=now,
                finished_at=now,
            )
            self._settle([task_id])
            return TaskCancelOutcome.CANCELLED
        if row.status is TaskStatus.RUNNING:
            self._rows[task_id] = replace(row, cancel_requested=True, updated_at=now)
            return TaskCancelOutcome.CANCEL_REQUESTED
        return TaskCancelOutcome.ALREADY_FINISHED

    async def lane_counts(self, lanes: Sequence[str] | None = None) -> list[TaskLaneCounts]:
        """Per-lane queue figures."""
        now = self._clock.now()
        wanted = None if lanes is None else {wire_value(lane, "lane") for lane in lanes}
        figures: dict[str, list[Any]] = {lane: [0, 0, 0, 0, None] for lane in wanted or ()}
        waiting: dict[str, Counter[str]] = {}
        for row in self._rows.values():
            if wanted is not None and row.lane not in wanted:
                continue
            if row.status not in (TaskStatus.PENDING, TaskStatus.RUNNING):
                continue
            entry = figures.setdefault(row.lane, [0, 0, 0, 0, None])
            if row.status is TaskStatus.PENDING:
                entry[0] += 1
                if row.run_at <= now:
                    entry[1] += 1
                    if entry[4] is None or row.run_at < entry[4]:
                        entry[4] = row.run_at
                    if row.partition_key is not None:
                        waiting.setdefault(row.lane, Counter())[row.partition_key] += 1
            else:
                entry[2] += 1
                if row.lease_expires_at is not None and row.lease_expires_at <= now:
                    entry[3] += 1
        return [
            TaskLaneCounts(
                lane,
                e[0],
                e[1],
                e[2],
                e[3],
                e[4],
                now,
                partitions_waiting=len(waiting.get(lane, ())),
                top_partitions_waiting=tuple(
                    sorted(waiting.get(lane, Counter()).items(), key=lambda p: (-p[1], p[0]))[
                        :TOP_PARTITIONS_WAITING
                    ]
                ),
            )
            for lane, e in sorted(figures.items())
        ]

    def __repr__(self) -> str:
        return f"<InMemoryTaskStore tasks={len(self._rows)}>"
