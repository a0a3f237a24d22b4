"""The reference background-task row, its status, and enqueue requests/results.

These are what :class:`~aster_forge.tasks.BackgroundTaskStore` implementations
(:class:`aster_forge.db.BackgroundTaskDbStore`, :class:`aster_forge.testing.InMemoryTaskStore`)
store and return. A product with its own table keeps its own row type and only
implements the claim/heartbeat/execution protocols.
"""

from __future__ import annotations

import enum
import json
import json.scanner
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import FrozenInstanceError, dataclass, field, fields
from datetime import datetime, timedelta
from typing import Any, cast

from ._dedupe import TaskDedupeKey
from ._lease import TaskLease
from .errors import TaskEnqueueValueError, TaskInvalidValueError

__all__ = [
    "LEASE_EXPIRED_ERROR",
    "MAX_TASK_CLAIM_LIMIT",
    "MAX_TASK_ID",
    "MAX_TASK_KIND_LENGTH",
    "MAX_TASK_PAGE_SIZE",
    "MAX_TASK_PARTITION_LENGTH",
    "MAX_TASK_PRIORITY",
    "TOP_PARTITIONS_WAITING",
    "BackgroundTaskRecord",
    "EnqueueResult",
    "NewTask",
    "TaskCancelOutcome",
    "TaskCompletion",
    "TaskFailureReason",
    "TaskLaneCounts",
    "TaskPage",
    "TaskStatus",
    "check_claim_args",
    "check_list_tasks_args",
    "check_partition",
    "check_retry_delay",
    "check_run_at",
    "check_text",
    "check_ttl",
    "wire_value",
]

MAX_TASK_KIND_LENGTH = 64
"""The longest kind or lane wire value (characters).

It is the width of the ``kind`` and ``lane`` columns, which are indexed: every store
refuses a longer value the same way instead of letting one backend truncate it.
"""

MAX_TASK_ID = 2**63 - 1
"""Task ids are positive 64-bit signed integers (``BIGINT``): ``1..MAX_TASK_ID``.

The admin API, the CLI and every store refuse a larger id as bad input rather than
sending the database a value its id column cannot hold.
"""

MAX_TASK_PRIORITY = 2**31 - 1
"""Priorities are 32-bit signed integers (higher is claimed first)."""

MAX_TASK_CLAIM_LIMIT = 2**31 - 1
"""The largest ``limit`` a claim accepts (a 32-bit signed ``LIMIT`` on every backend)."""

LEASE_EXPIRED_ERROR = "lease expired while the task was running (worker lost or crashed)"
"""The ``last_error`` a store writes when it rescues (or fails) a task whose lease expired."""


class TaskStatus(enum.StrEnum):
    """The lifecycle status of a background task row (stored as its wire value)."""

    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def is_terminal(self) -> bool:
        """Whether nothing will run the task again without an operator retry."""
        return self in (TaskStatus.SUCCEEDED, TaskStatus.FAILED, TaskStatus.CANCELLED)


class TaskFailureReason(enum.StrEnum):
    """Why the last execution did not succeed (stored next to ``last_error``).

    ``PRODUCT_ERROR``: the product's code failed (retry or final failure written by the
    executor). ``LEASE_EXPIRED``: the worker stopped renewing (crash, SIGKILL, partition)
    and a later claim rescued or failed the task. ``CANCELLED``: an operator cancelled it.
    A shutdown release is not a failure and leaves the reason unchanged.
    """

    PRODUCT_ERROR = "product_error"
    LEASE_EXPIRED = "lease_expired"
    CANCELLED = "cancelled"


class TaskCancelOutcome(enum.StrEnum):
    """What :meth:`~aster_forge.tasks.BackgroundTaskStore.cancel_task` did.

    ``CANCELLED``: the task was pending and is now cancelled. ``CANCEL_REQUESTED``: the
    task is running; its owner's fence is untouched, and the owner's next retry or
    shutdown release (or a rescue after its lease expired) ends it ``CANCELLED`` instead
    of pending; a success or final failure is still recorded as such.
    ``ALREADY_FINISHED``: terminal already, nothing written. ``NOT_FOUND``: no such task.
    """

    CANCELLED = "cancelled"
    CANCEL_REQUESTED = "cancel_requested"
    ALREADY_FINISHED = "already_finished"
    NOT_FOUND = "not_found"


# Control characters (Unicode category Cc): the same rule the admin API's schema states.
_CONTROL_CHARACTER = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _storable_problem(text: str) -> str | None:
    """Why ``text`` cannot be stored the same way on every backend, or ``None``."""
    if "\x00" in text:
        # PostgreSQL text cannot hold NUL; SQLite and MariaDB would store it.
        return "contains a NUL character"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "contains a lone surrogate (not valid UTF-8)"
    return None


MAX_TASK_PARTITION_LENGTH = 255
"""The longest partition key (characters); it fits a ``VARCHAR(255)`` column."""

TOP_PARTITIONS_WAITING = 3
"""How many partitions :class:`TaskLaneCounts` names by their due tasks."""


def check_partition(value: object) -> str:
    """Refuse a partition key no store keeps alike; return it.

    Raises:
        TaskEnqueueValueError: When it is not a non-empty ``str`` of at most
            :data:`MAX_TASK_PARTITION_LENGTH` characters without NUL or lone surrogates.
    """
    if not isinstance(value, str):
        raise TaskEnqueueValueError(f"partition must be a str or None, got {type(value).__name__}")
    if not value or len(value) > MAX_TASK_PARTITION_LENGTH:
        raise TaskEnqueueValueError(
            f"partition must be 1 to {MAX_TASK_PARTITION_LENGTH} characters long, got {len(value)}"
        )
    return check_text(value, "partition")


def check_text(value: str, what: str, error: type[Exception] = TaskEnqueueValueError) -> str:
    """Refuse text no backend can store alike (NUL, lone surrogates); return it.

    The message names ``what`` and the problem, never the text.

    Raises:
        TaskEnqueueValueError: (or ``error``) When the text contains a NUL character or a
            lone surrogate.
    """
    problem = _storable_problem(value)
    if problem is not None:
        raise error(f"{what} {problem}")
    return value


# Text already found valid (kinds, lanes, a registry's steps), so building a task of a
# known kind does not re-check them: str is immutable. Bounded: emptied when full.
_KNOWN_GOOD: dict[tuple[str, str], None] = {}
_KNOWN_GOOD_LIMIT = 4096
_KNOWN_GOOD_TEXT_LENGTH = 4096


def _remember_good(what: str, text: str) -> None:
    if len(text) <= _KNOWN_GOOD_TEXT_LENGTH:
        if len(_KNOWN_GOOD) >= _KNOWN_GOOD_LIMIT:
            _KNOWN_GOOD.clear()
        _KNOWN_GOOD[what, text] = None


def wire_value(value: object, what: str) -> str:
    """Return the wire value of a kind/lane (a ``str`` or a str-valued enum member).

    Raises:
        TaskEnqueueValueError: When it is not text, empty/blank, longer than
            :data:`MAX_TASK_KIND_LENGTH`, has surrounding whitespace, control
            characters or a lone surrogate.
    """
    # _value_ is what Enum.value returns, without the property's call (twice per task).
    raw = value._value_ if isinstance(value, enum.Enum) else value
    if not isinstance(raw, str):
        raise TaskEnqueueValueError(f"task {what} must be a str, got {type(raw).__name__}")
    if (what, raw) in _KNOWN_GOOD:
        return raw
    if not raw.strip() or raw != raw.strip():
        raise TaskEnqueueValueError(f"task {what} must be non-empty without surrounding whitespace")
    if len(raw) > MAX_TASK_KIND_LENGTH:
        raise TaskEnqueueValueError(
            f"task {what} is {len(raw)} characters long; the limit is {MAX_TASK_KIND_LENGTH}"
        )
    check_text(raw, f"task {what}")
    if _CONTROL_CHARACTER.search(raw) is not None:
        raise TaskEnqueueValueError(f"task {what} must not contain control characters")
    _remember_good(what, raw)
    return raw


def _refuse_constant(name: str) -> object:
    raise ValueError(name)


# One decoder for every check: json.loads would build a new one per call.
_STRICT_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)
# The decoder's scanner (the one ``decode`` runs): read from the first character, it
# takes a document without surrounding whitespace in one call, a fifth of ``decode``'s
# time (which matches whitespace before and after in Python); anything else goes
# through ``decode``, with its error messages. (typeshed types the context as a
# scanner; a decoder is what ``json`` itself passes.)
_SCAN = json.scanner.make_scanner(cast(Any, _STRICT_DECODER))


def _check_json(what: str, value: object, *, optional: bool, remember: bool = False) -> None:
    """Strict JSON (RFC 8259: no ``NaN``/``Infinity``), storable on every backend.

    ``remember``: text that recurs (a kind's initial steps) is checked once.
    Errors are raised ``from None``: the decoder's exception holds the whole document.
    """
    if value is None and optional:
        return
    if not isinstance(value, str):
        raise TaskEnqueueValueError(f"{what} must be JSON text, got {type(value).__name__}")
    if remember and (what, value) in _KNOWN_GOOD:
        return
    check_text(value, what)
    try:
        try:
            end = _SCAN(value, 0)[1]
        except StopIteration:
            end = -1  # no value at the first character: decode() says why
        if end != len(value):
            _STRICT_DECODER.decode(value)
    except RecursionError:
        raise TaskEnqueueValueError(f"{what} is nested too deeply to decode") from None
    except json.JSONDecodeError as exc:
        raise TaskEnqueueValueError(
            f"{what} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except ValueError as exc:
        raise TaskEnqueueValueError(
            f"{what} is not standard JSON: {exc.args[0]} is not a JSON value"
        ) from None
    if remember:
        _remember_good(what, value)


_DEFAULT_MAX_ATTEMPTS = 5


@dataclass(frozen=True, slots=True)
class NewTask:
    """A request to enqueue one task.

    Attributes:
        kind: The kind's wire value (or a str-valued enum member).
        lane: The lane whose dispatcher claims it (wire value or enum member).
        payload_json: The encoded payload (JSON text; ``spec.encode_payload(...)``).
        steps_json: The initial step list (JSON text), or ``None``.
        run_at: When it becomes due (aware); ``None`` means now (plus ``delay``).
        delay: Added to "now" when ``run_at`` is ``None`` (store clock / server clock).
        priority: Higher is claimed first within a lane (32-bit signed).
        max_attempts: Counted attempts allowed (>= 1).
        dedupe_key: A :class:`TaskDedupeKey` (or its text); a second enqueue with the
            same key returns the existing row instead of inserting. The key's
            ``held_while`` / ``held_for`` / ``replace`` say how long the existing row
            holds it and whether a hit rewrites a pending row.
        extra: Values for columns a product added to the table (DB store only).
        trace_context: The enqueuing side's trace context (the propagator's carrier as
            JSON text), stored with the task so each attempt links to it; ``None``
            stores none. :meth:`TaskRegistry.new_task` fills it in while tracing is on.
        partition: The partition the task belongs to (a tenant, an account, a file:
            up to :data:`MAX_TASK_PARTITION_LENGTH` characters), or ``None``. A lane
            with a ``partition_limit`` runs at most that many tasks of one partition
            at once across the cluster and takes partitions in turn.

    Raises:
        TaskEnqueueValueError: When a field is invalid (checked at construction).
    """

    kind: str
    lane: str
    payload_json: str = "null"
    steps_json: str | None = None
    run_at: datetime | None = None
    delay: timedelta = timedelta(0)
    priority: int = 0
    max_attempts: int = _DEFAULT_MAX_ATTEMPTS
    dedupe_key: TaskDedupeKey | str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    trace_context: str | None = None
    partition: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", wire_value(self.kind, "kind"))
        object.__setattr__(self, "lane", wire_value(self.lane, "lane"))
        _check_json("payload_json", self.payload_json, optional=False)
        _check_json("steps_json", self.steps_json, optional=True, remember=True)
        self._check_options()

    def _check_options(self) -> None:
        """Check (and normalise) the fields after the kind, lane, payload and steps."""
        if self.run_at is not None and (
            not isinstance(self.run_at, datetime) or self.run_at.utcoffset() is None
        ):
            raise TaskEnqueueValueError("run_at must be a timezone-aware datetime")
        if not isinstance(self.delay, timedelta) or self.delay < _NO_DELAY:
            raise TaskEnqueueValueError("delay must be a non-negative timedelta")
        if isinstance(self.priority, bool) or not isinstance(self.priority, int):
            raise TaskEnqueueValueError("priority must be an int")
        if not -MAX_TASK_PRIORITY - 1 <= self.priority <= MAX_TASK_PRIORITY:
            raise TaskEnqueueValueError("priority must fit a 32-bit signed integer")
        if (
            isinstance(self.max_attempts, bool)
            or not isinstance(self.max_attempts, int)
            or not 1 <= self.max_attempts <= MAX_TASK_PRIORITY
        ):
            raise TaskEnqueueValueError("max_attempts must be an int >= 1")
        if self.dedupe_key is not None and not isinstance(self.dedupe_key, TaskDedupeKey):
            object.__setattr__(self, "dedupe_key", TaskDedupeKey(self.dedupe_key))
        if self.trace_context is not None:
            if not isinstance(self.trace_context, str):
                raise TaskEnqueueValueError(
                    "trace_context must be JSON text or None, got "
                    f"{type(self.trace_context).__name__}"
                )
            check_text(self.trace_context, "trace_context")
        if self.partition is not None:
            check_partition(self.partition)

    @property
    def windowed_dedupe_key(self) -> TaskDedupeKey | None:
        """The dedupe key when it has a window or replaces (else ``None``)."""
        key = self.dedupe_key
        return key if isinstance(key, TaskDedupeKey) and key.has_window else None

    @property
    def dedupe_key_text(self) -> str | None:
        """The dedupe key as stored (``None`` when there is none)."""
        key = self.dedupe_key
        return key.value if isinstance(key, TaskDedupeKey) else key


def dedupe_window_holds(key: TaskDedupeKey, holder: BackgroundTaskRecord, now: datetime) -> bool:
    """Whether ``holder`` still holds ``key`` under the key's window at ``now``.

    The database stores say the same in SQL (a holder's key is released where this is
    false); the in-memory store calls this.
    """
    statuses = key.held_while
    if statuses is not None and holder.status not in statuses:
        return False
    period = key.held_for
    return period is None or now - period < holder.created_at


_NO_DELAY = timedelta(0)
# Records and requests built field by field skip their frozen __init__ (see the users).
_new_record = object.__new__
_SLOT_SETTERS = {spec.name: getattr(NewTask, spec.name).__set__ for spec in fields(NewTask)}
_set_kind = _SLOT_SETTERS["kind"]
_set_lane = _SLOT_SETTERS["lane"]
_set_payload_json = _SLOT_SETTERS["payload_json"]
_set_steps_json = _SLOT_SETTERS["steps_json"]
_set_run_at = _SLOT_SETTERS["run_at"]
_set_delay = _SLOT_SETTERS["delay"]
_set_priority = _SLOT_SETTERS["priority"]
_set_max_attempts = _SLOT_SETTERS["max_attempts"]
_set_dedupe_key = _SLOT_SETTERS["dedupe_key"]
_set_extra = _SLOT_SETTERS["extra"]
_set_trace_context = _SLOT_SETTERS["trace_context"]
_set_partition = _SLOT_SETTERS["partition"]


def encoded_new_task(
    kind: str,
    lane: str,
    payload_json: str,
    steps_json: str | None,
    *,
    run_at: datetime | None,
    delay: timedelta,
    priority: int,
    max_attempts: int,
    dedupe_key: TaskDedupeKey | str | None,
    extra: Mapping[str, Any],
    trace_context: str | None = None,
    partition: str | None = None,
) -> NewTask:
    """A :class:`NewTask` whose kind, lane, payload and steps a registry produced.

    A registered kind's and lane's wire values, a codec's output and a spec's step list
    passed their checks already; the other fields are checked as :class:`NewTask`
    checks them. The task is built without its ``__init__`` (about half the time of a
    frozen ten-field one).

    Raises:
        TaskEnqueueValueError: When another field is invalid.
    """
    task = _new_record(NewTask)
    # One slot setter call per field (cheaper than a loop over them).
    _set_kind(task, kind)
    _set_lane(task, lane)
    _set_payload_json(task, payload_json)
    _set_steps_json(task, steps_json)
    _set_run_at(task, run_at)
    _set_delay(task, delay)
    _set_priority(task, priority)
    _set_max_attempts(task, max_attempts)
    _set_dedupe_key(task, dedupe_key)
    _set_extra(task, extra)
    _set_trace_context(task, trace_context)
    _set_partition(task, partition)
    task._check_options()
    return task


@dataclass(frozen=True, slots=True)
class BackgroundTaskRecord:
    """One row of the reference ``background_tasks`` table.

    Satisfies :class:`~aster_forge.tasks.ClaimableTaskRecord` and
    :class:`~aster_forge.tasks.ExecutableTaskRecord` with ``kind`` as its wire value.

    Attributes:
        id: Database identifier.
        kind: The kind's wire value.
        lane: The lane's wire value.
        status: Lifecycle status.
        payload_json: The payload (JSON text).
        result_json: The result once succeeded (JSON text) or ``None``.
        steps_json: The step list (JSON text) or ``None``.
        attempt: Counted attempts so far (failed or lease-expired executions).
        max_attempts: Counted attempts allowed.
        run_at: When the task is (or was) due.
        priority: Claim order within a lane, higher first.
        processing_token: The live claim's token, ``None`` unless running.
        lease_expires_at: The live claim's expiry, ``None`` unless running.
        claimed_by: The owner that made the latest claim (diagnostics).
        dedupe_key: The dedupe key, or ``None``.
        last_error: The latest failure's text: ``Type: message`` of an unexpected
            exception, the product's chosen message, or the store's (lease expired).
        failure_reason: Why the latest execution did not succeed, if it did not.
        manual_retry_allowed: Whether an operator may retry a failed task by hand.
        cancel_requested: An operator asked to cancel while it was running.
        rescued: The latest claim took over the expired lease of a lost worker (kept
            when the task ends, so a finished row shows it; cleared when it goes back
            to pending).
        created_at: Insert time.
        updated_at: Last write time.
        started_at: When the latest claim started it.
        finished_at: When it reached a terminal status.
        snooze_count: How many times the body snoozed it (``TaskSnooze``); not attempts.
        last_traceback: The bounded traceback of the failure ``last_error`` describes,
            when the worker stored one (an unexpected exception); ``None`` otherwise.
        trace_context: The enqueuing side's trace context (:attr:`NewTask.trace_context`),
            or ``None``.
        dependents_waiting: Tasks of a workflow wait for this one's outcome and have
            not yet been told it (see :class:`~aster_forge.tasks.TaskDependency`).
        partition_key: The task's partition (:attr:`NewTask.partition`), or ``None``.
    """

    id: int
    kind: str
    lane: str
    status: TaskStatus
    payload_json: str
    result_json: str | None
    steps_json: str | None
    attempt: int
    max_attempts: int
    run_at: datetime
    priority: int
    processing_token: str | None
    lease_expires_at: datetime | None
    claimed_by: str | None
    dedupe_key: str | None
    last_error: str | None
    failure_reason: TaskFailureReason | None
    manual_retry_allowed: bool
    cancel_requested: bool
    rescued: bool
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    snooze_count: int = 0
    last_traceback: str | None = None
    trace_context: str | None = None
    dependents_waiting: bool = False
    partition_key: str | None = None

    @staticmethod
    def from_values(values: Sequence[Any]) -> BackgroundTaskRecord:
        """A record from its field values in field order, as a row of the table holds them.

        Equal to ``BackgroundTaskRecord(*values)``, built in about two thirds of the
        time (stores build one per claimed or enqueued task): the record has no
        ``__post_init__``, so its slots are set directly instead of through the frozen
        ``__init__``'s ``object.__setattr__`` per field.

        Raises:
            TypeError: When ``values`` does not hold exactly one value per field.
        """
        if len(values) != len(_RECORD_SLOTS):
            raise TypeError(
                f"a task record has {len(_RECORD_SLOTS)} fields, got {len(values)} values"
            )
        record = _new_record(BackgroundTaskRecord)
        for set_slot, value in zip(_RECORD_SLOTS, values, strict=True):
            set_slot(record, value)
        return record


# The slot setters of every record field, in field order (see from_values).
_RECORD_SLOTS = tuple(
    getattr(BackgroundTaskRecord, spec.name).__set__ for spec in fields(BackgroundTaskRecord)
)


class EnqueueResult:
    """What an enqueue returned: an immutable value, equal by its record and flag.

    A store may leave the record to be built when it is first read (:meth:`deferred`,
    :meth:`deferred_at`): a caller that only enqueues, or reads only :attr:`task_id`,
    pays no decoding for it. Read, it is the same record either way.

    Args:
        record: The stored row (the existing one on a dedupe hit).
        created: ``False`` when the dedupe key matched an existing row.
    """

    __slots__ = ("_build", "_created", "_key", "_record", "_task_id")
    __match_args__ = ("record", "created")

    _record: BackgroundTaskRecord | None
    _build: Callable[..., BackgroundTaskRecord] | None
    _key: int | None
    _created: bool
    _task_id: int | None

    def __init__(self, record: BackgroundTaskRecord, created: bool) -> None:
        _set = object.__setattr__
        _set(self, "_record", record)
        _set(self, "_build", None)
        _set(self, "_key", None)
        _set(self, "_created", created)
        _set(self, "_task_id", record.id)

    @classmethod
    def deferred(
        cls,
        build: Callable[[], BackgroundTaskRecord],
        created: bool,
        *,
        task_id: int | None = None,
    ) -> EnqueueResult:
        """A result whose record ``build()`` makes when :attr:`record` is first read.

        Args:
            build: Makes the record (called at most once).
            created: ``False`` when the dedupe key matched an existing row.
            task_id: The record's id, when the store knows it without building the
                record (:attr:`task_id` then builds nothing).
        """
        result = cls.__new__(cls)
        _set = object.__setattr__
        _set(result, "_record", None)
        _set(result, "_build", build)
        _set(result, "_key", None)
        _set(result, "_created", created)
        _set(result, "_task_id", task_id)
        return result

    @classmethod
    def deferred_at(
        cls,
        rows: Callable[[int], BackgroundTaskRecord],
        index: int,
        created: bool,
        *,
        task_id: int,
    ) -> EnqueueResult:
        """A result whose record ``rows(index)`` makes when :attr:`record` is first read.

        One ``rows`` serves every result of a batch, so a batch of results holds one
        object per task rather than a callable per task (objects the garbage collector
        walks while the batch is alive). An unread result keeps ``rows`` alive.

        Args:
            rows: Makes the record of the batch's ``index``-th task (called at most
                once per result).
            index: This result's position in the batch.
            created: ``False`` when the dedupe key matched an existing row.
            task_id: The record's id.
        """
        result = cls.__new__(cls)
        _set = object.__setattr__
        _set(result, "_record", None)
        _set(result, "_build", rows)
        _set(result, "_key", index)
        _set(result, "_created", created)
        _set(result, "_task_id", task_id)
        return result

    @property
    def created(self) -> bool:
        """``False`` when the dedupe key matched an existing row."""
        return self._created

    @property
    def task_id(self) -> int:
        """The task's id (``record.id``), without building a deferred record."""
        task_id = self._task_id
        return self.record.id if task_id is None else task_id

    @property
    def record(self) -> BackgroundTaskRecord:
        """The stored row (the existing one on a dedupe hit)."""
        record = self._record
        if record is None:
            build, key = self._build, self._key
            assert build is not None  # one of the two is always set
            record = build() if key is None else build(key)
            object.__setattr__(self, "_record", record)
            object.__setattr__(self, "_build", None)  # the row it was built from goes
        return record

    def __setattr__(self, name: str, value: object) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, EnqueueResult)
        return self.created == other.created and self.record == other.record

    def __hash__(self) -> int:
        return hash((self.record, self.created))

    def __repr__(self) -> str:
        return f"EnqueueResult(record={self.record!r}, created={self.created!r})"

    def __reduce__(self) -> tuple[type[EnqueueResult], tuple[BackgroundTaskRecord, bool]]:
        # Pickled and copied as the record it holds, never as what would build it.
        return EnqueueResult, (self.record, self.created)


@dataclass(frozen=True, slots=True)
class TaskCompletion:
    """One entry of a batched, fenced success write (``mark_tasks_succeeded_many``).

    Attributes:
        lease: The claim that ran the task.
        result_json: The encoded result or ``None``.
        steps_json: The final step list or ``None`` to keep the stored one.
    """

    lease: TaskLease
    result_json: str | None = None
    steps_json: str | None = None


@dataclass(frozen=True, slots=True)
class TaskLaneCounts:
    """Queue figures of one lane, measured in one read.

    Attributes:
        lane: The lane's wire value.
        pending: Pending tasks (due or not).
        due: Pending tasks whose ``run_at`` has passed.
        running: Running tasks (live or expired leases).
        expired: Running tasks whose lease has expired (rescue candidates).
        oldest_due_run_at: ``run_at`` of the oldest due pending task, or ``None``.
        measured_at: The store's "now" for this read (server clock where there is one).
        partitions_waiting: How many partitions have due pending tasks (a store
            without partitions answers 0).
        top_partitions_waiting: The (up to three) partitions with the most due pending
            tasks, as ``(partition, due tasks)`` by count descending, then partition.
    """

    lane: str
    pending: int
    due: int
    running: int
    expired: int
    oldest_due_run_at: datetime | None
    measured_at: datetime
    partitions_waiting: int = 0
    top_partitions_waiting: tuple[tuple[str, int], ...] = ()

    @property
    def queue_lag(self) -> timedelta:
        """How long the oldest due task has waited (zero when nothing is due)."""
        if self.oldest_due_run_at is None:
            return timedelta(0)
        return max(timedelta(0), self.measured_at - self.oldest_due_run_at)

    @property
    def queue_lag_seconds(self) -> float:
        """:attr:`queue_lag` in seconds, for metrics."""
        return self.queue_lag.total_seconds()


@dataclass(frozen=True, slots=True)
class TaskPage:
    """One page of :meth:`~aster_forge.tasks.BackgroundTaskStore.list_tasks` (newest first).

    Attributes:
        items: The rows, ordered by id descending.
        next_before_id: Pass as ``before_id`` for the next page; ``None`` on the last.
    """

    items: Sequence[BackgroundTaskRecord]
    next_before_id: int | None


MAX_TASK_PAGE_SIZE = 1000
"""The largest ``limit`` :meth:`~aster_forge.tasks.BackgroundTaskStore.list_tasks` accepts.

It bounds one page of rows (and one bulk action), so a single request cannot load or
change an unbounded number of rows.
"""


def check_ttl(lease_ttl: object) -> None:
    """Reject a lease TTL that is not a positive ``timedelta``.

    A store input check, like the other ``check_*`` functions: every task store (the
    database stores, the in-memory stores, a product's own) calls it before touching
    its rows, so bad input raises the same error on every backend.

    Raises:
        TaskInvalidValueError: When ``lease_ttl`` is not a positive ``timedelta``.
    """
    if not isinstance(lease_ttl, timedelta) or lease_ttl <= timedelta(0):
        raise TaskInvalidValueError("lease_ttl must be a positive timedelta")


def check_claim_args(
    lane: object,
    owner: object,
    lease_ttl: object,
    limit: object,
    cluster_limit: object = None,
    partition_limit: object = None,
) -> str:
    """Validate :meth:`~aster_forge.tasks.TaskClaimStore.claim_due_for_lane` arguments.

    Returns:
        The lane's wire value.

    Raises:
        TaskInvalidValueError: When the lane is not a wire value, the owner is blank,
            too long or not storable, the limit is not an int in
            ``0..MAX_TASK_CLAIM_LIMIT`` (a non-positive limit claims nothing), the
            TTL is not a positive ``timedelta``, or ``cluster_limit`` is neither
            ``None`` nor an int in ``1..MAX_TASK_CLAIM_LIMIT`` (nor ``partition_limit``).
    """
    lane_value = wire_value(lane, "lane")
    if not isinstance(owner, str) or not owner.strip() or len(owner) > 255:
        raise TaskInvalidValueError("claim owner must be a non-empty str of at most 255 chars")
    check_text(owner, "claim owner", TaskInvalidValueError)
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise TaskInvalidValueError("claim limit must be an int")
    if limit > MAX_TASK_CLAIM_LIMIT:
        # Beyond 32 bits PostgreSQL's LIMIT parameter overflows in the driver.
        raise TaskInvalidValueError(f"claim limit must be at most {MAX_TASK_CLAIM_LIMIT}")
    check_ttl(lease_ttl)
    if cluster_limit is not None and (
        isinstance(cluster_limit, bool)
        or not isinstance(cluster_limit, int)
        or not 1 <= cluster_limit <= MAX_TASK_CLAIM_LIMIT
    ):
        raise TaskInvalidValueError(
            f"cluster_limit must be None or an int in 1..{MAX_TASK_CLAIM_LIMIT}: {cluster_limit!r}"
        )
    if partition_limit is not None and (
        isinstance(partition_limit, bool)
        or not isinstance(partition_limit, int)
        or not 1 <= partition_limit <= MAX_TASK_CLAIM_LIMIT
    ):
        raise TaskInvalidValueError(
            "partition_limit must be None or an int in "
            f"1..{MAX_TASK_CLAIM_LIMIT}: {partition_limit!r}"
        )
    return lane_value


def check_retry_delay(delay: object) -> None:
    """Reject a retry delay that is not a non-negative ``timedelta`` (store input check).

    Raises:
        TaskInvalidValueError: When ``delay`` is not a non-negative ``timedelta``.
    """
    if not isinstance(delay, timedelta) or delay < timedelta(0):
        raise TaskInvalidValueError("retry delay must be a non-negative timedelta")


def check_run_at(run_at: object) -> None:
    """Reject a ``run_at`` that is not ``None`` or an aware datetime (store input check).

    Raises:
        TaskInvalidValueError: When ``run_at`` is a naive datetime or not a datetime.
    """
    if run_at is not None and (not isinstance(run_at, datetime) or run_at.utcoffset() is None):
        raise TaskInvalidValueError("run_at must be a timezone-aware datetime")


def check_list_tasks_args(
    status: object, kind: object, lane: object, limit: object, before_id: object
) -> tuple[TaskStatus | None, str | None, str | None]:
    """Validate :meth:`~aster_forge.tasks.BackgroundTaskStore.list_tasks` filters.

    Returns:
        The normalized ``(status, kind, lane)``: a :class:`TaskStatus` and wire values.

    Raises:
        TaskInvalidValueError: An unknown status, a kind or lane that is not a wire
            value, a limit outside ``1..MAX_TASK_PAGE_SIZE`` or a ``before_id`` outside
            ``1..MAX_TASK_ID``.
    """
    status_value: TaskStatus | None = None
    if status is not None:
        try:
            status_value = TaskStatus(str(status))
        except ValueError as exc:
            raise TaskInvalidValueError(f"unknown task status {status!r}") from exc
    if (
        isinstance(limit, bool)
        or not isinstance(limit, int)
        or not 1 <= limit <= MAX_TASK_PAGE_SIZE
    ):
        raise TaskInvalidValueError(f"limit must be an int in 1..{MAX_TASK_PAGE_SIZE}")
    if before_id is not None and (
        isinstance(before_id, bool)
        or not isinstance(before_id, int)
        or not 1 <= before_id <= MAX_TASK_ID
    ):
        # Beyond 64 bits the value would reach the driver (OverflowError, or a
        # misleading database error), so it is refused here as bad input.
        raise TaskInvalidValueError(f"before_id must be an int in 1..{MAX_TASK_ID}")
    return (
        status_value,
        None if kind is None else wire_value(kind, "kind"),
        None if lane is None else wire_value(lane, "lane"),
    )
