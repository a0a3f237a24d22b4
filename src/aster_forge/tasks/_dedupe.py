"""Dedupe keys: one logical firing or request maps to at most one task row."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import ClassVar

from .errors import TaskDedupeKeyError

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

    Attributes:
        value: The key text: non-empty, at most :data:`MAX_TASK_DEDUPE_KEY_LENGTH`
            characters, without control characters.

    Raises:
        TaskDedupeKeyError: When ``value`` violates those rules.

    Example:
        >>> str(TaskDedupeKey("import:order-42"))
        'import:order-42'
    """

    MAX_LENGTH: ClassVar[int] = MAX_TASK_DEDUPE_KEY_LENGTH
    """The longest key in characters (fits a ``VARCHAR(255)`` unique column)."""

    value: str

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

    def as_str(self) -> str:
        """Return the key text (what the ``dedupe_key`` column stores)."""
        return self.value

    def __str__(self) -> str:
        return self.value


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
