"""Identifier, duration and settings checks shared by the stores and the configs.

The checks are the same everywhere; each caller names its own error type so a
runtime lease raises a runtime error and a scheduled task a tasks error. They live at
the top of the package, beside ``_errors`` and ``_json``, because both
:mod:`aster_forge.runtime` and :mod:`aster_forge.tasks` build on them and neither
should reach into the other's private modules for a helper that is not public API.
"""

from __future__ import annotations

from datetime import timedelta

__all__ = [
    "check_instance",
    "check_int_setting",
    "check_number_setting",
    "check_optional_duration",
    "check_stored_duration",
    "check_stored_identifier",
    "is_control_character",
]


def is_control_character(ch: str) -> bool:
    """Return whether ``ch`` is a C0 or C1 control character (or DEL)."""
    code = ord(ch)
    return code < 0x20 or 0x7F <= code < 0xA0


def check_stored_identifier(what: str, value: object, *, limit: int, error: type[Exception]) -> str:
    """Check an identifier stored in a database key column.

    Args:
        what: The argument's name, used in the error message.
        value: The candidate value.
        limit: The longest accepted length, in characters.
        error: The exception type to raise.

    Returns:
        ``value`` unchanged when valid.

    Raises:
        Exception: ``error``, when ``value`` is not a non-empty, trimmed ``str`` of at
            most ``limit`` characters without control characters.
    """
    if not isinstance(value, str):
        raise error(f"{what} must be a str, got {type(value).__name__}")
    if not value.strip():
        raise error(f"{what} must not be empty or blank")
    if value != value.strip():
        # MariaDB's PAD SPACE collations would make "a" and "a " the same key.
        raise error(f"{what} must not have leading or trailing whitespace")
    if len(value) > limit:
        raise error(f"{what} is {len(value)} characters long; the limit is {limit}")
    if any(is_control_character(ch) for ch in value):
        raise error(f"{what} must not contain control characters")
    return value


def check_stored_duration(
    what: str, value: object, *, allow_zero: bool, error: type[Exception]
) -> timedelta:
    """Check that a duration is a positive (or, with ``allow_zero``, non-negative) timedelta.

    Args:
        what: The argument's name, used in the error message.
        value: The candidate value.
        allow_zero: Whether a zero duration is accepted.
        error: The exception type to raise.

    Returns:
        ``value`` unchanged when valid.

    Raises:
        Exception: ``error``, when ``value`` is not such a ``timedelta``.
    """
    if not isinstance(value, timedelta):
        raise error(f"{what} must be a timedelta, got {type(value).__name__}")
    if value < timedelta(0) or (value == timedelta(0) and not allow_zero):
        raise error(f"{what} must be {'non-negative' if allow_zero else 'positive'}, got {value}")
    return value


def check_instance(
    what: str, value: object, expected: type, *, error: type[Exception], example: str = ""
) -> None:
    """Refuse a setting that is not an instance of ``expected``.

    The message names the setting, what to pass (``example``, e.g.
    ``"DispatchPollConfig(base_interval=timedelta(seconds=1))"``) and what was given.
    """
    if not isinstance(value, expected):
        given = type(value).__name__
        sample = f" such as {example}" if example else ""
        raise error(f"{what} must be a {expected.__name__}{sample}, got {given}: {value!r}")


def check_optional_duration(
    what: str, value: object, *, allow_zero: bool, error: type[Exception]
) -> None:
    """:func:`check_stored_duration` for a setting that may also be ``None``."""
    if value is not None:
        check_stored_duration(what, value, allow_zero=allow_zero, error=error)


def check_int_setting(what: str, value: object, *, minimum: int, error: type[Exception]) -> None:
    """Refuse a setting that is not an ``int`` (``bool`` is not one) of at least ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise error(f"{what} must be an int >= {minimum}, got {type(value).__name__}: {value!r}")
    if value < minimum:
        raise error(f"{what} must be an int >= {minimum}, got {value}")


def check_number_setting(what: str, value: object, *, error: type[Exception]) -> None:
    """Refuse a setting that is not a real number (``int`` or ``float``, not ``bool``)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise error(f"{what} must be a number, got {type(value).__name__}: {value!r}")
