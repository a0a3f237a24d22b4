"""The running task's id, kind, lane and attempt on every log record its body emits."""

from __future__ import annotations

import logging
from contextvars import ContextVar, Token

__all__ = ["TaskLogContextFilter", "enter_task_log_context", "leave_task_log_context"]

# (task_id, task_kind, task_lane, task_attempt) while a body runs; a plain tuple, set
# once per execution. Context variables follow the body into awaited code, tasks it
# creates and the worker thread of a plain ``def`` body (``asyncio.to_thread``).
_CURRENT: ContextVar[tuple[int, str, str | None, int] | None] = ContextVar(
    "aster_forge_task_log_context", default=None
)
_NAMES = ("task_id", "task_kind", "task_lane", "task_attempt")


def enter_task_log_context(
    task_id: int, kind: str, lane: str | None, attempt: int
) -> Token[tuple[int, str, str | None, int] | None]:
    """Mark the current context as running the given attempt (undo with the token)."""
    return _CURRENT.set((task_id, kind, lane, attempt))


def leave_task_log_context(token: Token[tuple[int, str, str | None, int] | None]) -> None:
    """Undo :func:`enter_task_log_context`."""
    _CURRENT.reset(token)


class TaskLogContextFilter(logging.Filter):
    """Adds ``task_id``, ``task_kind``, ``task_lane`` and ``task_attempt`` to log records
    emitted while a task body runs (any logger, a plain ``def`` body's thread included).

    Install it on a handler (``handler.addFilter(TaskLogContextFilter())``): a handler's
    filters see every record that reaches it, a logger's only that logger's own. The
    worker command installs it on the handler it sets up. A record that already has one
    of the fields (``extra=``) keeps its own value. It never drops a record.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        current = _CURRENT.get()
        if current is not None:
            fields = record.__dict__
            for name, value in zip(_NAMES, current, strict=True):
                if name not in fields:
                    fields[name] = value
        return True
