"""An ERROR-record catcher the tests wait on (an event, no polling, no sleeps)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from contextlib import contextmanager


class ErrorSeen(logging.Handler):
    """Sets ``seen`` on the first ERROR record of its logger and keeps every one."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.seen = asyncio.Event()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        self.seen.set()


@contextmanager
def errors_of(logger: str) -> Iterator[ErrorSeen]:
    """Catch the ERROR records of ``logger`` (and its children) meanwhile."""
    handler = ErrorSeen()
    log = logging.getLogger(logger)
    log.addHandler(handler)
    try:
        yield handler
    finally:
        log.removeHandler(handler)
