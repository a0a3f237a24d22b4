"""The worker process's log lines: UTC time and level on each, as text or JSON."""

from __future__ import annotations

import enum
import json
import logging
import sys
import time
from typing import IO, Any

from ..tasks._internal import TaskLogContextFilter

__all__ = ["JsonLogFormatter", "LogFormat", "TextLogFormatter", "configure_worker_logging"]

#: What every LogRecord carries; anything else on a record is an ``extra=`` field.
_STANDARD = frozenset(
    vars(logging.LogRecord("", logging.INFO, "", 0, "", None, None)).keys()
    | {"message", "asctime", "taskName"}
)


class LogFormat(enum.StrEnum):
    """The worker command's ``--log-format``."""

    TEXT = "text"
    """``2026-05-09T07:35:25.123Z INFO aster_forge.worker: message`` (a traceback follows)."""
    JSON = "json"
    """One JSON object per line: ``time``, ``level``, ``logger``, ``message``, the record's
    extra fields (``task_id``, ``task_kind`` ...; a task body's records carry
    ``task_id``, ``task_kind``, ``task_lane`` and ``task_attempt``) and ``exc_info``
    (the traceback text)."""


def _utc_time(record: logging.LogRecord) -> str:
    """``2026-05-09T07:35:25.123Z``: the record's time in UTC, to the millisecond."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
    return f"{stamp}.{int(record.msecs):03d}Z"


class TextLogFormatter(logging.Formatter):
    """``<UTC time> <LEVEL> <logger>: <message>``, the traceback on the following lines."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return _utc_time(record)


class JsonLogFormatter(logging.Formatter):
    """One JSON object per record, for log shippers."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": _utc_time(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        line.update(
            (key, value)
            for key, value in vars(record).items()
            if key not in _STANDARD and not key.startswith("_")
        )
        if record.exc_info:
            line["exc_info"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exc_info"] = record.exc_text
        return json.dumps(line, default=str, ensure_ascii=False)


def configure_worker_logging(
    log_format: LogFormat, *, level: str = "info", stream: IO[str] | None = None
) -> bool:
    """Send ``level`` and above to stderr in ``log_format``, unless logging is set up.

    A product that configured the root logger (at import, before this runs) keeps its
    own handlers, format and level. Returns whether a handler was installed.
    """
    root = logging.getLogger()
    if root.handlers:
        return False
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonLogFormatter() if log_format is LogFormat.JSON else TextLogFormatter())
    # A running task's id, kind, lane and attempt on every record its body emits.
    handler.addFilter(TaskLogContextFilter())
    root.addHandler(handler)
    root.setLevel(level.upper())
    return True
