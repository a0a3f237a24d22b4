"""Task records built positionally from asyncpg ``Record`` rows.

The statements that run on the asyncpg connection itself (the claim family, the
enqueue) return :data:`~aster_forge.db._tasks_table.CORE_COLUMNS` in order, which is
:class:`~aster_forge.tasks.BackgroundTaskRecord`'s field order, so a record is the
row's values with the few that need it converted: no name lookups and no per-column
result processors. A test guards that the two orders agree.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC
from typing import Any

import sqlalchemy as sa

from ..tasks import BackgroundTaskRecord, TaskFailureReason, TaskStatus
from ._pg_driver import utc_decoder
from ._tasks_table import CORE_COLUMNS
from ._time import UtcDateTime

__all__ = ["PgRecordBuilder"]

_STATUS = CORE_COLUMNS.index("status")
_REASON = CORE_COLUMNS.index("failure_reason")
# A dict lookup per row instead of the enum's call machinery; an unknown value still
# goes through the enum and raises its ValueError.
_STATUSES = {status.value: status for status in TaskStatus}


class PgRecordBuilder:
    """Builds :class:`BackgroundTaskRecord` from asyncpg rows, as ``record_from_row`` maps them.

    asyncpg already returns ``int``/``bool``/``str``; the status and failure reason
    become their enums, and each :class:`UtcDateTime` column's value is what the
    column type returns (see :func:`~aster_forge.db._pg_driver.utc_decoder`).

    Args:
        table: The task table (its core columns' types decide which are datetimes).
        dialect: The engine's asyncpg dialect.
    """

    def __init__(self, table: sa.Table, dialect: Any) -> None:
        self._utc = utc_decoder(dialect)
        self._times = tuple(
            index
            for index, name in enumerate(CORE_COLUMNS)
            if isinstance(table.c[name].type, UtcDateTime)
        )

    def records(self, rows: Iterable[Any], offset: int = 0) -> list[BackgroundTaskRecord]:
        """The records of ``rows`` (core columns from ``offset``), in order."""
        utc, times, statuses = self._utc, self._times, _STATUSES
        out: list[BackgroundTaskRecord] = []
        for row in rows:
            values = list(row[offset:] if offset else row)
            status = values[_STATUS]
            values[_STATUS] = statuses.get(status) or TaskStatus(status)
            reason = values[_REASON]
            if reason is not None:
                values[_REASON] = TaskFailureReason(reason)
            for index in times:
                value = values[index]
                # asyncpg's own codec gives UTC already: skip the call for those.
                if value is not None and value.tzinfo is not UTC:
                    values[index] = utc(value)
            out.append(BackgroundTaskRecord.from_values(values))
        return out
