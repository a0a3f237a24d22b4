"""Operator queries over the task table: search, counts, throughput, bulk retry/cancel.

An optional store capability (:class:`TaskAdminStore`) beside
:class:`~aster_forge.tasks.BackgroundTaskStore`: the admin API and dashboard use it
when the store has it (the reference database store and the in-memory store do).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Protocol, runtime_checkable

from .._validation import is_control_character
from ._dedupe import MAX_TASK_DEDUPE_KEY_LENGTH
from ._records import MAX_TASK_ID, MAX_TASK_PAGE_SIZE, BackgroundTaskRecord, TaskStatus, wire_value
from .errors import TaskInvalidValueError

__all__ = [
    "MAX_TASK_ERROR_SEARCH_LENGTH",
    "MAX_THROUGHPUT_MINUTES",
    "TaskAdminStore",
    "TaskBulkResult",
    "TaskLaneStatusCounts",
    "TaskQuery",
    "TaskSearchPage",
    "TaskThroughput",
    "check_bulk_limit",
    "check_search_page_args",
    "check_throughput_minutes",
]

MAX_TASK_ERROR_SEARCH_LENGTH = 200
"""The longest ``error_contains`` text a search accepts (characters)."""

MAX_THROUGHPUT_MINUTES = 24 * 60
"""The longest throughput window (minutes)."""


# Every backend stores timestamps in this range (MariaDB's DATETIME is the narrowest);
# a bound outside it selects the same rows as the range's end, so it is clamped.
_EARLIEST = datetime(1000, 1, 1, tzinfo=UTC)
_LATEST = datetime(9999, 12, 31, tzinfo=UTC)


def _utc_bound(what: str, value: object) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise TaskInvalidValueError(f"{what} must be a timezone-aware datetime")
    try:
        utc = value.astimezone(UTC)
    except OverflowError:
        # Beyond datetime's range once converted: before year 1 or after 9999.
        return _EARLIEST if value.year < 5000 else _LATEST
    return min(max(utc, _EARLIEST), _LATEST)


@dataclass(frozen=True, slots=True)
class TaskQuery:
    """Filters of an operator's task search; set fields combine with AND.

    Attributes:
        status: Only this status.
        kind: Only this kind (wire value).
        lane: Only this lane (wire value).
        task_id: Only this id.
        dedupe_key: Only the task with this dedupe key.
        error_contains: ``last_error`` contains this text (case-insensitive).
        created_from: Created at or after this instant (stored in UTC, clamped to
            the years 1000..9999 every backend can hold).
        created_until: Created before this instant (likewise).

    Raises:
        TaskInvalidValueError: A value no row could have (a blank or overlong kind,
            an id outside ``1..MAX_TASK_ID``, a naive datetime, control characters).
    """

    status: TaskStatus | None = None
    kind: str | None = None
    lane: str | None = None
    task_id: int | None = None
    dedupe_key: str | None = None
    error_contains: str | None = None
    created_from: datetime | None = None
    created_until: datetime | None = None

    def __post_init__(self) -> None:
        if self.status is not None and not isinstance(self.status, TaskStatus):
            raise TaskInvalidValueError("status must be a TaskStatus")
        try:
            if self.kind is not None:
                wire_value(self.kind, "kind")
            if self.lane is not None:
                wire_value(self.lane, "lane")
        except ValueError as exc:
            raise TaskInvalidValueError(str(exc)) from None
        if self.task_id is not None and (
            isinstance(self.task_id, bool)
            or not isinstance(self.task_id, int)
            or not 1 <= self.task_id <= MAX_TASK_ID
        ):
            raise TaskInvalidValueError(f"task_id must be an int in 1..{MAX_TASK_ID}")
        for what, text, limit in (
            ("dedupe_key", self.dedupe_key, MAX_TASK_DEDUPE_KEY_LENGTH),
            ("error_contains", self.error_contains, MAX_TASK_ERROR_SEARCH_LENGTH),
        ):
            if text is None:
                continue
            if not isinstance(text, str) or not text:
                raise TaskInvalidValueError(f"{what} must be a non-empty str")
            if len(text) > limit or any(is_control_character(ch) for ch in text):
                raise TaskInvalidValueError(
                    f"{what} must be at most {limit} characters without control characters"
                )
        object.__setattr__(self, "created_from", _utc_bound("created_from", self.created_from))
        object.__setattr__(self, "created_until", _utc_bound("created_until", self.created_until))

    def without_status(self) -> TaskQuery:
        """The same filters for every status (what the status tabs count)."""
        return replace(self, status=None)


@dataclass(frozen=True, slots=True)
class TaskSearchPage:
    """One page of a search, newest (highest id) first.

    Attributes:
        items: The rows.
        next_before_id: Pass as ``before_id`` for the older page (``None``: none).
        prev_after_id: Pass as ``after_id`` for the newer page (``None``: none).
    """

    items: tuple[BackgroundTaskRecord, ...]
    next_before_id: int | None
    prev_after_id: int | None


@dataclass(frozen=True, slots=True)
class TaskBulkResult:
    """What a bulk retry or cancel did (or, on a dry run, would do).

    Attributes:
        matched: Rows the query selected (at most the limit).
        changed: Ids of the rows the action applied to (allowed by the action's rule
            at the moment of the conditional write); empty on a dry run.
        eligible: Rows among ``matched`` the action's rule allowed.
    """

    matched: int
    eligible: int
    changed: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TaskLaneStatusCounts:
    """Every status's count of one lane, and its oldest pending task.

    Attributes:
        lane: The lane's wire value.
        counts: Rows per status (every status present, zeros included).
        oldest_pending_created_at: ``created_at`` of the oldest pending row.
        now: The store's clock when counted.
    """

    lane: str
    counts: Mapping[TaskStatus, int]
    oldest_pending_created_at: datetime | None
    now: datetime


@dataclass(frozen=True, slots=True)
class TaskThroughput:
    """Outcomes of one lane in one minute.

    Attributes:
        lane: The lane's wire value.
        minute: Start of the minute (UTC).
        succeeded: Rows that finished ``succeeded`` in the minute.
        failed: Rows that finished ``failed`` in the minute.
        retried: Rows sent back for a retry in the minute and still waiting for it
            (the table keeps one row per task, not a log of attempts).
    """

    lane: str
    minute: datetime
    succeeded: int
    failed: int
    retried: int


def check_search_page_args(limit: object, before_id: object, after_id: object) -> None:
    """Validate the limit and cursors of :meth:`TaskAdminStore.search_tasks` (store input check).

    Raises:
        TaskInvalidValueError: A limit outside ``1..MAX_TASK_PAGE_SIZE`` or a cursor
            outside ``1..MAX_TASK_ID``.
    """
    if (
        isinstance(limit, bool)
        or not isinstance(limit, int)
        or not 1 <= limit <= MAX_TASK_PAGE_SIZE
    ):
        raise TaskInvalidValueError(f"limit must be an int in 1..{MAX_TASK_PAGE_SIZE}")
    for what, value in (("before_id", before_id), ("after_id", after_id)):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_TASK_ID
        ):
            raise TaskInvalidValueError(f"{what} must be an int in 1..{MAX_TASK_ID}")


def check_throughput_minutes(minutes: object) -> int:
    """Validate the window of :meth:`TaskAdminStore.task_throughput` (store input check).

    Returns:
        ``minutes`` unchanged.

    Raises:
        TaskInvalidValueError: Not an int in ``1..MAX_THROUGHPUT_MINUTES``.
    """
    if (
        isinstance(minutes, bool)
        or not isinstance(minutes, int)
        or not 1 <= minutes <= MAX_THROUGHPUT_MINUTES
    ):
        raise TaskInvalidValueError(f"minutes must be an int in 1..{MAX_THROUGHPUT_MINUTES}")
    return minutes


def check_bulk_limit(limit: object) -> int:
    """Validate how many rows a bulk action may change (store input check).

    Used by :meth:`TaskAdminStore.retry_tasks` and :meth:`TaskAdminStore.cancel_tasks`.

    Returns:
        ``limit`` unchanged.

    Raises:
        TaskInvalidValueError: Not an int in ``1..MAX_TASK_PAGE_SIZE``.
    """
    if (
        isinstance(limit, bool)
        or not isinstance(limit, int)
        or not 1 <= limit <= MAX_TASK_PAGE_SIZE
    ):
        raise TaskInvalidValueError(f"limit must be an int in 1..{MAX_TASK_PAGE_SIZE}")
    return limit


@runtime_checkable
class TaskAdminStore(Protocol):
    """Operator queries a task store may offer (the admin API uses them when present)."""

    async def search_tasks(
        self,
        query: TaskQuery,
        *,
        limit: int = 50,
        before_id: int | None = None,
        after_id: int | None = None,
    ) -> TaskSearchPage:
        """One page matching ``query``, newest first, keyset-paged both ways.

        ``before_id`` gives the page of rows older than it; ``after_id`` the page of
        rows just newer than it (still listed newest first); both: rows between them,
        the page next to ``after_id``.

        Raises:
            TaskInvalidValueError: Bad limit or cursors (see :func:`check_search_page_args`).
        """
        ...

    async def count_tasks(self, query: TaskQuery) -> Mapping[TaskStatus, int]:
        """Rows matching ``query`` (its status ignored) per status, zeros included."""
        ...

    async def lane_status_counts(self) -> Sequence[TaskLaneStatusCounts]:
        """Every lane with rows: counts by status and the oldest pending row, by lane."""
        ...

    async def task_throughput(self, *, minutes: int = 60) -> Sequence[TaskThroughput]:
        """Outcomes per lane per minute over the last ``minutes`` of the store's clock.

        Only non-empty minutes are returned, ordered by minute then lane.

        Raises:
            TaskInvalidValueError: ``minutes`` outside ``1..MAX_THROUGHPUT_MINUTES``.
        """
        ...

    async def retry_tasks(
        self, query: TaskQuery, *, limit: int, dry_run: bool = False
    ) -> TaskBulkResult:
        """Operator retry of up to ``limit`` matching rows (newest first).

        Each row is retried by the rule of
        :meth:`~aster_forge.tasks.BackgroundTaskStore.retry_task` without ``force``
        (cancelled, or failed with manual retry allowed), in one conditional write.
        """
        ...

    async def cancel_tasks(
        self, query: TaskQuery, *, limit: int, dry_run: bool = False
    ) -> TaskBulkResult:
        """Operator cancel of up to ``limit`` matching rows (newest first).

        Pending rows end cancelled; running ones get ``cancel_requested`` (their
        processing token is never touched), like
        :meth:`~aster_forge.tasks.BackgroundTaskStore.cancel_task`.
        """
        ...
