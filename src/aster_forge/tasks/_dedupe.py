"""Dedupe keys: one logical firing or request maps to at most one task row."""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, ClassVar

from .errors import TaskDedupeKeyError

if TYPE_CHECKING:
    from ._records import TaskStatus

__all__ = [
    "MAX_TASK_DEDUPE_KEY_LENGTH",
    "TaskDedupeKey",
    "scheduled_task_dedupe_key",
]

MAX_TASK_DEDUPE_KEY_LENGTH = 255
"""The longest dedupe key (characters); it fits a ``VARCHAR(255)`` unique column.

A key is checked against it when it is built, so an over-long key is the same
:class:`~aster_forge.tasks.TaskDedupeKeyError` on every backend instead of a truncation
on one and a database error on another.
"""

# Far beyond any window a product needs, and "now - held_for" stays a valid timestamp.
_MAX_HELD_FOR = timedelta(days=36500)
_MAX_NAMESPACE = 64
_MAX_NAME = 128
_PREFIX = "scheduled"


def _has_control(value: str) -> bool:
    # Lone surrogates count too: no backend can store them (they are not UTF-8).
    return any(
        ord(ch) < 0x20 or 0x7F <= ord(ch) < 0xA0 or 0xD800 <= ord(ch) < 0xE000 for ch in value
    )


@dataclass(frozen=True, slots=True)
class TaskDedupeKey:
    """A validated value for a task table's nullable unique ``dedupe_key`` column.

    Manual tasks use no key (``NULL``); scheduled firings use
    :func:`scheduled_task_dedupe_key`; external idempotent requests use the product's
    own stable key wrapped in this type. After a unique conflict the product's store
    returns the existing row for the key.

    By default the row holds its key for ever. A window limits that: once the row
    holding the key is in a status outside ``held_while``, or was enqueued
    ``held_for`` ago or more, an enqueue with this key takes the key from it (the old
    row keeps its status, its ``dedupe_key`` becomes ``NULL``) and inserts a new task.
    The window is the enqueue's own: it decides whatever window the holder was
    enqueued with.

    Attributes:
        value: The key text: non-empty, at most :data:`MAX_TASK_DEDUPE_KEY_LENGTH`
            characters, without control characters.
        held_while: The statuses in which the holder keeps the key (a set of
            ``TaskStatus``, with ``PENDING``; e.g. ``{PENDING, RUNNING}``: until it
            finishes); ``None``: any status.
        held_for: How long after its enqueue the holder keeps the key (above zero, at
            most 36,500 days); ``None``: no time limit. Both limits apply when given.
        replace: On a hit whose holder is still pending and of the same kind, write
            this enqueue's payload and run time into it (``created`` stays false; the
            updated row is returned). A running or finished holder is left as it is.

    Raises:
        TaskDedupeKeyError: When a field violates those rules.

    Example:
        >>> str(TaskDedupeKey("import:order-42"))
        'import:order-42'
        >>> from datetime import timedelta
        >>> TaskDedupeKey("nightly-report", held_for=timedelta(hours=20)).has_window
        True
    """

    MAX_LENGTH: ClassVar[int] = MAX_TASK_DEDUPE_KEY_LENGTH
    """The longest key in characters (fits a ``VARCHAR(255)`` unique column)."""

    value: str
    held_while: AbstractSet[TaskStatus] | None = None
    held_for: timedelta | None = None
    replace: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.value, str):
            raise TaskDedupeKeyError(f"dedupe key must be a str, got {type(self.value).__name__}")
        if not self.value.strip():
            raise TaskDedupeKeyError("dedupe key must not be empty or blank")
        if self.value != self.value.strip():
            raise TaskDedupeKeyError("dedupe key must not have leading or trailing whitespace")
        if len(self.value) > MAX_TASK_DEDUPE_KEY_LENGTH:
            raise TaskDedupeKeyError(
                f"dedupe key is {len(self.value)} characters long; "
                f"the limit is {MAX_TASK_DEDUPE_KEY_LENGTH}"
            )
        if _has_control(self.value):
            raise TaskDedupeKeyError(
                "dedupe key must not contain control characters or lone surrogates"
            )
        if self.held_while is not None:
            object.__setattr__(self, "held_while", _statuses(self.held_while))
        held_for = self.held_for
        if held_for is not None and (
            not isinstance(held_for, timedelta) or not timedelta(0) < held_for <= _MAX_HELD_FOR
        ):
            raise TaskDedupeKeyError(
                f"held_for must be a timedelta above zero and at most {_MAX_HELD_FOR.days} "
                "days, or None (no time limit)"
            )
        if not isinstance(self.replace, bool):
            raise TaskDedupeKeyError(f"replace must be a bool, got {type(self.replace).__name__}")

    @property
    def has_window(self) -> bool:
        """Whether the key limits how long its holder keeps it, or replaces a pending one."""
        return self.held_while is not None or self.held_for is not None or self.replace

    def as_str(self) -> str:
        """Return the key text (what the ``dedupe_key`` column stores)."""
        return self.value

    def __str__(self) -> str:
        return self.value


def _statuses(value: object) -> frozenset[TaskStatus]:
    from ._records import TaskStatus  # the records module imports this one

    if not isinstance(value, AbstractSet):
        raise TaskDedupeKeyError(
            f"held_while must be a set of TaskStatus, got {type(value).__name__}"
        )
    try:
        statuses = frozenset(TaskStatus(status) for status in value)
    except ValueError:
        raise TaskDedupeKeyError(
            "held_while holds a value that is not a TaskStatus; use "
            + ", ".join(f"TaskStatus.{status.name}" for status in TaskStatus)
        ) from None
    if TaskStatus.PENDING not in statuses:
        raise TaskDedupeKeyError(
            "held_while must include TaskStatus.PENDING: a key holds at least while its "
            "task waits to run"
        )
    return statuses


def _part(what: str, value: object, limit: int) -> str:
    if not isinstance(value, str):
        raise TaskDedupeKeyError(f"{what} must be a str, got {type(value).__name__}")
    if not value.strip():
        raise TaskDedupeKeyError(f"{what} must not be empty or blank")
    if value != value.strip():
        # MariaDB's PAD SPACE collations would make "a" and "a " the same key.
        raise TaskDedupeKeyError(f"{what} must not have leading or trailing whitespace")
    if len(value) > limit:
        raise TaskDedupeKeyError(f"{what} is {len(value)} characters long; the limit is {limit}")
    if _has_control(value):
        raise TaskDedupeKeyError(f"{what} must not contain control characters or lone surrogates")
    # Escape the separator so distinct (namespace, name) pairs never share a key.
    return value.replace("%", "%25").replace(":", "%3A")


def scheduled_task_dedupe_key(namespace: str, name: str, scheduled_at: datetime) -> TaskDedupeKey:
    """Return the dedupe key of one scheduled firing.

    The key is ``"scheduled:<namespace>:<name>:<scheduled_at as UTC ISO-8601 with
    microseconds>Z"``, with ``%`` and ``:`` in the parts percent-escaped, so it is
    deterministic (same inputs, same key, on every instance) and injective.

    Args:
        namespace: The product namespace (at most 64 characters).
        name: The scheduled task name (at most 128 characters).
        scheduled_at: The firing time (timezone-aware; converted to UTC), e.g.
            :attr:`~aster_forge.tasks.ScheduledTaskClaim.scheduled_at`.

    Returns:
        The key.

    Raises:
        TaskDedupeKeyError: When a part is empty, too long or has control characters,
            when ``scheduled_at`` is naive, or when the escaped key exceeds
            :data:`MAX_TASK_DEDUPE_KEY_LENGTH` characters.

    Example:
        >>> from datetime import UTC, datetime
        >>> scheduled_task_dedupe_key("shop", "audit-cleanup", datetime(2030, 1, 1, tzinfo=UTC))
        TaskDedupeKey(value='scheduled:shop:audit-cleanup:2030-01-01T00:00:00.000000Z')
    """
    ns = _part("namespace", namespace, _MAX_NAMESPACE)
    nm = _part("name", name, _MAX_NAME)
    if not isinstance(scheduled_at, datetime):
        raise TaskDedupeKeyError(
            f"scheduled_at must be a datetime, got {type(scheduled_at).__name__}"
        )
    if scheduled_at.tzinfo is None or scheduled_at.utcoffset() is None:
        raise TaskDedupeKeyError("scheduled_at must be timezone-aware")
    try:
        utc = scheduled_at.astimezone(UTC)
    except OverflowError as exc:
        raise TaskDedupeKeyError("scheduled_at is out of range in UTC") from exc
    stamp = utc.replace(tzinfo=None).isoformat(timespec="microseconds")
    key = f"{_PREFIX}:{ns}:{nm}:{stamp}Z"
    if len(key) > MAX_TASK_DEDUPE_KEY_LENGTH:
        raise TaskDedupeKeyError(
            f"scheduled dedupe key is {len(key)} characters long after escaping; "
            f"the limit is {MAX_TASK_DEDUPE_KEY_LENGTH}"
        )
    return TaskDedupeKey(key)
