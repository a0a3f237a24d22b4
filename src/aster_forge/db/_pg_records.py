"""Task records built positionally from the rows of the PostgreSQL hot statements.

The statements that run on the asyncpg connection itself (the claim family, the
enqueue) return :data:`~aster_forge.db._tables.CORE_COLUMNS` in order, which is
:class:`~aster_forge.tasks.BackgroundTaskRecord`'s field order, so a record is the
row's values with the few that need it converted: no name lookups and no per-column
result processors. A test guards that the two orders agree.

Their timestamps travel as microseconds since the Unix epoch (:func:`epoch_micros`),
not as ``timestamptz``: asyncpg decodes a ``timestamptz`` through a ``timedelta`` built
from keyword arguments, which cost about a third of a claimed row's decoding. A row's
stamps repeat (one statement's ``now()`` is its ``updated_at``, ``started_at`` and the
base of every lease; a batch enqueued together shares ``created_at``), so each distinct
value of one call becomes a :class:`datetime` once.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from ..tasks._internal import BackgroundTaskRecord
from ._tables import CORE_COLUMNS, record_from_values
from ._time import UtcDateTime

__all__ = ["PgRecordBuilder", "UtcStamps", "epoch_micros", "returning_columns", "utc_from_micros"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# asyncpg reads 'infinity' as datetime.max and '-infinity' as datetime.min, which the
# column type makes UTC (NEVER_EXPIRES is datetime.max: asyncpg writes it as 'infinity').
_LAST = (datetime.max.replace(tzinfo=UTC) - _EPOCH) // timedelta(microseconds=1)
_FIRST = (datetime.min.replace(tzinfo=UTC) - _EPOCH) // timedelta(microseconds=1)


def epoch_micros(expression: str) -> str:
    """SQL for the ``timestamptz`` ``expression`` as whole microseconds since the epoch.

    ``EXTRACT`` returns an exact ``numeric`` (PostgreSQL 14 and later), so the cast
    loses nothing. ``'infinity'`` and ``'-infinity'`` become the microseconds of the
    datetimes asyncpg reads them as; ``NULL`` stays ``NULL``.
    """
    x = expression
    return (
        f"CAST(CASE WHEN isfinite({x}) THEN EXTRACT(EPOCH FROM {x}) * 1000000"
        f" WHEN {x} > 'epoch' THEN {_LAST} WHEN {x} < 'epoch' THEN {_FIRST} END AS BIGINT)"
    )


def utc_from_micros(micros: int) -> datetime:
    """The aware UTC datetime ``micros`` microseconds after the Unix epoch."""
    return _EPOCH + timedelta(0, 0, micros)


class UtcStamps(dict[int, datetime]):
    """Epoch microseconds to aware UTC datetimes, each distinct value converted once.

    One per call: ``stamps[micros]`` is a dict lookup, :func:`utc_from_micros` only for
    a value not seen before.
    """

    __slots__ = ()

    def __missing__(self, micros: int) -> datetime:
        stamp = self[micros] = utc_from_micros(micros)
        return stamp


def returning_columns(table: sa.Table, dialect: Any, prefix: str) -> str:
    """The core columns of ``prefix`` (a table alias) as the hot statements return them.

    Every :class:`UtcDateTime` column comes as :func:`epoch_micros`, named as itself.
    """
    quote = dialect.identifier_preparer.quote
    out = []
    for name in CORE_COLUMNS:
        column = f"{prefix}.{quote(name)}"
        if isinstance(table.c[name].type, UtcDateTime):
            column = f"{epoch_micros(column)} AS {quote(name)}"
        out.append(column)
    return ", ".join(out)


class PgRecordBuilder:
    """Builds :class:`BackgroundTaskRecord` from rows of :func:`returning_columns`.

    The row values are ``int``/``bool``/``str`` already; the status and failure reason
    become their enums, and each :class:`UtcDateTime` column's microseconds an aware
    UTC datetime (:func:`utc_from_micros`), as ``record_from_row`` reads the row.

    Args:
        table: The task table (its core columns' types decide which are datetimes).
    """

    def __init__(self, table: sa.Table) -> None:
        self._times = tuple(
            index
            for index, name in enumerate(CORE_COLUMNS)
            if isinstance(table.c[name].type, UtcDateTime)
        )

    def records(self, rows: Iterable[Any], offset: int = 0) -> list[BackgroundTaskRecord]:
        """The records of ``rows`` (core columns from ``offset``), in order."""
        times = self._times
        stamps = UtcStamps()
        out: list[BackgroundTaskRecord] = []
        for row in rows:
            values = list(row[offset:] if offset else row)
            for index in times:
                micros = values[index]
                if micros is not None:
                    values[index] = stamps[micros]
            out.append(record_from_values(values))
        return out
