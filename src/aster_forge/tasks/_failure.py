"""What a failed attempt stores and logs about its exception: type, message, traceback.

Only the failure path calls these: a success never formats anything.
"""

from __future__ import annotations

import traceback

__all__ = [
    "MAX_TASK_ERROR_LENGTH",
    "MAX_TASK_TRACEBACK_FRAMES",
    "MAX_TASK_TRACEBACK_LENGTH",
    "describe_exception",
    "exception_type_name",
    "format_task_traceback",
]

MAX_TASK_ERROR_LENGTH = 2000
"""The longest stored error text (``Type: message``), in characters."""

MAX_TASK_TRACEBACK_LENGTH = 8192
"""The longest stored traceback, in characters (the newest lines are kept)."""

MAX_TASK_TRACEBACK_FRAMES = 30
"""Frames kept per exception of a traceback's chain (the innermost ones)."""

#: How many members of an exception group the error text names.
_GROUP_MEMBERS = 3

_ELLIPSIS = "…"
_CUT_TRACEBACK = "[older lines cut]\n"


def exception_type_name(exc: BaseException) -> str:
    """The exception's type as a traceback names it (``module.Qualname``; builtins bare)."""
    cls = type(exc)
    module = cls.__module__
    if module in ("builtins", "__main__"):
        return cls.__qualname__
    return f"{module}.{cls.__qualname__}"


def describe_exception(
    exc: BaseException, *, redact: bool = False, limit: int = MAX_TASK_ERROR_LENGTH
) -> str:
    """``Type: message`` for storing and logging, at most ``limit`` characters.

    The message is the exception's own text (the product's words); an exception group
    also names its first members. With ``redact`` (or an empty message) only the type.
    The text is made storable on every backend (NUL and lone surrogates escaped).
    """
    name = exception_type_name(exc)
    if redact:
        return name
    message = _message(exc)
    if isinstance(exc, BaseExceptionGroup):
        members = "; ".join(
            describe_exception(member, limit=limit) for member in exc.exceptions[:_GROUP_MEMBERS]
        )
        message = f"{message}: {members}" if message else members
    text = f"{name}: {message}" if message else name
    return _bounded_head(_storable(text), limit)


def format_task_traceback(exc: BaseException, *, limit: int = MAX_TASK_TRACEBACK_LENGTH) -> str:
    """The traceback Python would print for ``exc`` (its chain too), bounded.

    Each exception of the chain keeps its innermost :data:`MAX_TASK_TRACEBACK_FRAMES`
    frames; past ``limit`` characters the oldest lines are cut, so the raising frame and
    the final exception line always remain.
    """
    try:
        lines = traceback.format_exception(exc, limit=-MAX_TASK_TRACEBACK_FRAMES)
    except Exception:  # a broken __str__ deep in a chain must not lose the failure
        lines = [f"{exception_type_name(exc)} (its traceback could not be formatted)\n"]
    text = _storable("".join(lines))
    if len(text) <= limit:
        return text
    keep = text[-(limit - len(_CUT_TRACEBACK)) :]
    # Start at a whole line, so the text reads as a traceback.
    newline = keep.find("\n")
    if 0 <= newline < len(keep) - 1:
        keep = keep[newline + 1 :]
    return _CUT_TRACEBACK + keep


def _message(exc: BaseException) -> str:
    try:
        return str(exc).strip()
    except Exception:
        return "<the exception's str() failed>"


def _storable(text: str) -> str:
    """``text`` as every backend stores it alike: no NUL, no lone surrogate."""
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def _bounded_head(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[: limit - len(_ELLIPSIS)] + _ELLIPSIS
