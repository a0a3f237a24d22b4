"""Typed structured details attached to a component health report.

The JSON shape is stable so admin UIs can render by type::

    {"key": "latency", "value": {"type": "duration_millis", "value": 42}}
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final

from .errors import InvalidHealthDetailError

__all__ = [
    "HealthComponentDetail",
    "HealthComponentDetailKind",
    "HealthComponentDetailValue",
]

I64_MIN: Final = -(2**63)
I64_MAX: Final = 2**63 - 1
U64_MAX: Final = 2**64 - 1


class HealthComponentDetailKind(enum.StrEnum):
    """The type tag of a :class:`HealthComponentDetailValue` (its JSON ``"type"``)."""

    TEXT = "text"
    """Free text: backend, driver, region, mode."""
    INTEGER = "integer"
    """A signed 64-bit count or offset (may be negative)."""
    UNSIGNED = "unsigned"
    """An unsigned 64-bit count: queue depth, pending count, retry count."""
    BOOLEAN = "boolean"
    """A flag: a switch, "fallback active"."""
    DURATION_MILLIS = "duration_millis"
    """A duration in whole milliseconds: latency, lag, age, timeout."""


def _check_int(kind: HealthComponentDetailKind, value: object, low: int, high: int) -> int:
    # bool is an int subclass in Python; refusing it keeps True from becoming 1.
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidHealthDetailError(
            f"{kind.value} detail value must be an int, got {type(value).__name__}"
        )
    if not low <= value <= high:
        raise InvalidHealthDetailError(
            f"{kind.value} detail value {value} is outside the range [{low}, {high}]"
        )
    return value


@dataclass(frozen=True, slots=True)
class HealthComponentDetailValue:
    """A typed diagnostic value: text, integer, unsigned, boolean or duration (ms).

    Build values with the constructors (:meth:`text`, :meth:`integer`, :meth:`unsigned`,
    :meth:`boolean`, :meth:`duration_millis`, :meth:`duration`); they validate the
    range and Python type and raise :class:`InvalidHealthDetailError` on bad input.
    Render by type with ``match value.kind``; use :meth:`display_value` for text only.

    Attributes:
        kind: The type tag.
        value: The payload: ``str`` for TEXT, ``bool`` for BOOLEAN, ``int`` otherwise.
    """

    kind: HealthComponentDetailKind
    value: str | int | bool

    def __post_init__(self) -> None:
        kind = self.kind
        if not isinstance(kind, HealthComponentDetailKind):
            raise InvalidHealthDetailError(
                f"detail kind must be a HealthComponentDetailKind, got {kind!r}"
            )
        value = self.value
        if kind is HealthComponentDetailKind.TEXT:
            if not isinstance(value, str):
                raise InvalidHealthDetailError(
                    f"text detail value must be a str, got {type(value).__name__}"
                )
        elif kind is HealthComponentDetailKind.BOOLEAN:
            if not isinstance(value, bool):
                raise InvalidHealthDetailError(
                    f"boolean detail value must be a bool, got {type(value).__name__}"
                )
        elif kind is HealthComponentDetailKind.INTEGER:
            _check_int(kind, value, I64_MIN, I64_MAX)
        else:
            _check_int(kind, value, 0, U64_MAX)

    @classmethod
    def text(cls, value: str) -> HealthComponentDetailValue:
        """Return a TEXT value (backend, driver, region, mode ...)."""
        return cls(HealthComponentDetailKind.TEXT, value)

    @classmethod
    def integer(cls, value: int) -> HealthComponentDetailValue:
        """Return an INTEGER value; must fit a signed 64-bit integer."""
        return cls(HealthComponentDetailKind.INTEGER, value)

    @classmethod
    def unsigned(cls, value: int) -> HealthComponentDetailValue:
        """Return an UNSIGNED value; must be in ``[0, 2**64 - 1]``."""
        return cls(HealthComponentDetailKind.UNSIGNED, value)

    @classmethod
    def boolean(cls, value: bool) -> HealthComponentDetailValue:
        """Return a BOOLEAN value; only ``True``/``False`` are accepted."""
        return cls(HealthComponentDetailKind.BOOLEAN, value)

    @classmethod
    def duration_millis(cls, millis: int) -> HealthComponentDetailValue:
        """Return a DURATION_MILLIS value from whole milliseconds (``[0, 2**64 - 1]``)."""
        return cls(HealthComponentDetailKind.DURATION_MILLIS, millis)

    @classmethod
    def duration(cls, value: timedelta) -> HealthComponentDetailValue:
        """Return a DURATION_MILLIS value from a ``timedelta``.

        The schema's unit is the millisecond: a sub-millisecond remainder is dropped
        (``1.9 ms`` becomes ``1``). Negative durations raise.

        Raises:
            InvalidHealthDetailError: ``value`` is not a timedelta or is negative.
        """
        if not isinstance(value, timedelta):
            raise InvalidHealthDetailError(
                f"duration detail value must be a timedelta, got {type(value).__name__}"
            )
        if value < timedelta(0):
            raise InvalidHealthDetailError(f"duration detail value {value} is negative")
        return cls.duration_millis(value // timedelta(milliseconds=1))

    def display_value(self) -> str:
        """Return a human-readable rendering (``redis``, ``12``, ``true``, ``42ms``)."""
        kind = self.kind
        if kind is HealthComponentDetailKind.BOOLEAN:
            return "true" if self.value else "false"
        if kind is HealthComponentDetailKind.DURATION_MILLIS:
            return f"{self.value}ms"
        return str(self.value)

    def as_timedelta(self) -> timedelta | None:
        """Return a DURATION_MILLIS value as a ``timedelta``; ``None`` for other kinds."""
        if self.kind is HealthComponentDetailKind.DURATION_MILLIS:
            return timedelta(milliseconds=int(self.value))
        return None

    def to_json_dict(self) -> dict[str, Any]:
        """Return ``{"type": <kind>, "value": <value>}``."""
        return {"type": self.kind.value, "value": self.value}

    @classmethod
    def from_json_dict(cls, data: object) -> HealthComponentDetailValue:
        """Parse ``{"type": ..., "value": ...}`` strictly.

        Raises:
            InvalidHealthDetailError: ``data`` is not an object with exactly ``type`` and
                ``value``, the type tag is unknown, or the value is invalid for it.
        """
        if not isinstance(data, Mapping):
            raise InvalidHealthDetailError(
                f"detail value must be a JSON object, got {type(data).__name__}"
            )
        if set(data) != {"type", "value"}:
            raise InvalidHealthDetailError(
                f"detail value must have exactly the keys 'type' and 'value', got {sorted(data)}"
            )
        tag = data["type"]
        try:
            kind = HealthComponentDetailKind(tag)
        except ValueError:
            known = ", ".join(k.value for k in HealthComponentDetailKind)
            raise InvalidHealthDetailError(
                f"unknown detail value type {tag!r} (expected one of: {known})"
            ) from None
        return cls(kind, data["value"])


@dataclass(frozen=True, slots=True)
class HealthComponentDetail:
    """One keyed diagnostic value on a component report.

    Attributes:
        key: A short, stable key (``backend``, ``queue_depth``, ``latency``).
        value: The typed value.
    """

    key: str
    value: HealthComponentDetailValue

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or not self.key:
            raise InvalidHealthDetailError(f"detail key must be a non-empty str, got {self.key!r}")
        if not isinstance(self.value, HealthComponentDetailValue):
            raise InvalidHealthDetailError(
                f"detail {self.key!r} value must be a HealthComponentDetailValue, "
                f"got {type(self.value).__name__}"
            )

    def to_json_dict(self) -> dict[str, Any]:
        """Return ``{"key": ..., "value": {"type": ..., "value": ...}}``."""
        return {"key": self.key, "value": self.value.to_json_dict()}

    @classmethod
    def from_json_dict(cls, data: object) -> HealthComponentDetail:
        """Parse the JSON object produced by :meth:`to_json_dict`.

        Raises:
            InvalidHealthDetailError: The object is malformed or its value invalid.
        """
        if not isinstance(data, Mapping):
            raise InvalidHealthDetailError(
                f"detail must be a JSON object, got {type(data).__name__}"
            )
        if set(data) != {"key", "value"}:
            raise InvalidHealthDetailError(
                f"detail must have exactly the keys 'key' and 'value', got {sorted(data)}"
            )
        return cls(data["key"], HealthComponentDetailValue.from_json_dict(data["value"]))
