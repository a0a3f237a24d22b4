"""The in-memory store's operator queries (:class:`~aster_forge.tasks.TaskAdminStore`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from ..tasks._internal import (
    BackgroundTaskRecord,
    TaskBulkResult,
    TaskCancelOutcome,
    TaskFailureReason,
    TaskLaneStatusCounts,
    TaskQuery,
    TaskSearchPage,
    TaskStatus,
    TaskThroughput,
    check_bulk_limit,
    check_search_page_args,
    check_throughput_minutes,
)

if TYPE_CHECKING:
    from ..runtime._internal import Clock

__all__ = ["InMemoryTaskAdminMixin", "matches"]

_RETRY_REASONS = (TaskFailureReason.PRODUCT_ERROR, TaskFailureReason.LEASE_EXPIRED)


def matches(row: BackgroundTaskRecord, query: TaskQuery) -> bool:
    """Whether ``row`` is one of the rows ``query`` describes."""
    error = None if query.error_contains is None else query.error_contains.lower()
    found = error is None or (row.last_error is not None and error in row.last_error.lower())
    return (
        (query.status is None or row.status is query.status)
        and (query.kind is None or row.kind == query.kind)
        and (query.lane is None or row.lane == query.lane)
        and (query.task_id is None or row.id == query.task_id)
        and (query.dedupe_key is None or row.dedupe_key == query.dedupe_key)
        and found
        and (query.created_from is None or row.created_at >= query.created_from)
        and (query.created_until is None or row.created_at < query.created_until)
    )


def _retryable(row: BackgroundTaskRecord) -> bool:
    return row.status is TaskStatus.CANCELLED or (
        row.status is TaskStatus.FAILED and row.manual_retry_allowed
    )


def _cancellable(row: BackgroundTaskRecord) -> bool:
    return row.status is TaskStatus.PENDING or (
        row.status is TaskStatus.RUNNING and not row.cancel_requested
    )


def _minute(value: datetime) -> datetime:
    return value.replace(second=0, microsecond=0)


class InMemoryTaskAdminMixin:
    """Search, counts, lane overview, throughput and bulk actions over ``_rows``.

    Each method reads and writes without awaiting in between, so it is atomic on the
    event loop, like the database store's single transaction.
    """

    _rows: dict[int, BackgroundTaskRecord]
    _clock: Clock

    if TYPE_CHECKING:  # provided by the store this mixin is part of

        async def retry_task(
            self, task_id: int, *, run_at: datetime | None = None, force: bool = False
        ) -> BackgroundTaskRecord: ...

        async def cancel_task(self, task_id: int) -> TaskCancelOutcome: ...

        def _retry_row(self, task_id: int, *, run_at: datetime | None, force: bool) -> None: ...

        def _restore(self, task_ids: Sequence[int]) -> list[int]: ...

    def _newest_first(self, query: TaskQuery) -> list[BackgroundTaskRecord]:
        return [row for _, row in sorted(self._rows.items(), reverse=True) if matches(row, query)]

    async def search_tasks(
        self,
        query: TaskQuery,
        *,
        limit: int = 50,
        before_id: int | None = None,
        after_id: int | None = None,
    ) -> TaskSearchPage:
        """One page matching ``query``, newest first, keyset-paged both ways."""
        check_search_page_args(limit, before_id, after_id)
        rows = self._newest_first(query)
        window = [row for row in rows if before_id is None or row.id < before_id]
        if after_id is not None:
            items = [row for row in window if row.id > after_id][-limit:]
        else:
            items = window[:limit]
        if not items:
            return TaskSearchPage((), None, None)
        older = any(row.id < items[-1].id for row in rows)
        newer = any(row.id > items[0].id for row in rows)
        return TaskSearchPage(
            tuple(items), items[-1].id if older else None, items[0].id if newer else None
        )

    async def count_tasks(self, query: TaskQuery) -> Mapping[TaskStatus, int]:
        """Rows matching ``query`` (its status ignored) per status, zeros included."""
        counts = dict.fromkeys(TaskStatus, 0)
        for row in self._newest_first(query.without_status()):
            counts[row.status] += 1
        return counts

    async def lane_status_counts(self) -> Sequence[TaskLaneStatusCounts]:
        """Every lane with rows: counts by status and the oldest pending row, by lane."""
        now = self._clock.now()
        counts: dict[str, dict[TaskStatus, int]] = {}
        oldest: dict[str, datetime] = {}
        for row in self._rows.values():
            counts.setdefault(row.lane, dict.fromkeys(TaskStatus, 0))[row.status] += 1
            if row.status is TaskStatus.PENDING and (
                row.lane not in oldest or row.created_at < oldest[row.lane]
            ):
                oldest[row.lane] = row.created_at
        return [
            TaskLaneStatusCounts(lane, counts[lane], oldest.get(lane), now)
            for lane in sorted(counts)
        ]

    async def task_throughput(self, *, minutes: int = 60) -> Sequence[TaskThroughput]:
        """Outcomes per lane per minute over the last ``minutes`` of the clock."""
        check_throughput_minutes(minutes)
        start = _minute(self._clock.now()) - timedelta(minutes=minutes - 1)
        buckets: dict[tuple[datetime, str], list[int]] = {}
        for row in self._rows.values():
            if row.status in (TaskStatus.SUCCEEDED, TaskStatus.FAILED):
                at, column = row.finished_at, 0 if row.status is TaskStatus.SUCCEEDED else 1
            elif (
                row.status is TaskStatus.PENDING
                and row.attempt > 0
                and row.failure_reason in _RETRY_REASONS
            ):
                at, column = row.updated_at, 2
            else:
                continue
            if at is None or at < start:
                continue
            buckets.setdefault((_minute(at), row.lane), [0, 0, 0])[column] += 1
        return [
            TaskThroughput(lane, minute, *counts)
            for (minute, lane), counts in sorted(buckets.items())
        ]

    def _selected(self, query: TaskQuery, limit: int) -> list[BackgroundTaskRecord]:
        check_bulk_limit(limit)
        return self._newest_first(query)[:limit]

    async def retry_tasks(
        self, query: TaskQuery, *, limit: int, dry_run: bool = False
    ) -> TaskBulkResult:
        """Operator retry of up to ``limit`` matching rows (the single retry's rule)."""
        selected = self._selected(query, limit)
        eligible = [row.id for row in selected if _retryable(row)]
        if not dry_run:
            # Every row first, then their dependents, as the database store's one write.
            for task_id in eligible:
                self._retry_row(task_id, run_at=None, force=False)
            self._restore(eligible)
        return TaskBulkResult(len(selected), len(eligible), () if dry_run else tuple(eligible))

    async def cancel_tasks(
        self, query: TaskQuery, *, limit: int, dry_run: bool = False
    ) -> TaskBulkResult:
        """Operator cancel of up to ``limit`` matching rows (pending ends; running is flagged)."""
        selected = self._selected(query, limit)
        eligible = [row.id for row in selected if _cancellable(row)]
        if not dry_run:
            for task_id in eligible:
                await self.cancel_task(task_id)
        return TaskBulkResult(len(selected), len(eligible), () if dry_run else tuple(eligible))
