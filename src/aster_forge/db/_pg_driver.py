"""A SQLAlchemy statement compiled once for asyncpg and sent on the asyncpg connection.

SQLAlchemy's asyncpg execution path (execution context, cursor adapter, its own
prepared-statement cache, result rows with per-column processors) costs more client
CPU than a hot statement's round trip on a loopback server. A
:class:`PgDriverStatement` keeps what makes the statement SQLAlchemy's: the SQL text
is SQLAlchemy's compilation of the store's statement (``$n`` parameters with their
casts), each parameter goes through SQLAlchemy's bind processor, and a driver error
is wrapped exactly as SQLAlchemy wraps it (its asyncpg-to-DBAPI mapping, then
``DBAPIError.instance`` with the disconnect check), so retrying and translation
(:func:`~aster_forge.db._translate.retry_conflicts`) treat it like every other
statement. asyncpg prepares the text once per connection and caches it.

These statements do not pass through SQLAlchemy's cursor or ``handle_error`` events.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.pool import PoolProxiedConnection

from .._errors import AsterForgeError
from ._time import UtcDateTime

__all__ = ["PgDriverStatement", "reusable_after", "unless_all_null", "utc_decoder"]


class PgDriverStatement:
    """A statement compiled once by SQLAlchemy's asyncpg dialect, run on asyncpg itself.

    Args:
        statement: The SQLAlchemy statement (named bind parameters; defaults are kept).
        dialect: The engine's asyncpg dialect.
        hide_parameters: The engine's ``hide_parameters`` (kept out of error messages).
    """

    def __init__(self, statement: Any, dialect: Any, *, hide_parameters: bool = False) -> None:
        compiled = statement.compile(dialect=dialect)
        self.sql: str = compiled.string
        binds = compiled.binds
        self._positions = list(compiled.positiontup or ())
        self._defaults = {name: binds[name].value for name in self._positions}
        self._processors = [
            (name, binds[name].type.dialect_impl(dialect).bind_processor(dialect))
            for name in dict.fromkeys(self._positions)
        ]
        self._dialect = dialect
        self._hide_parameters = hide_parameters

    def arguments(self, values: Mapping[str, Any]) -> list[Any]:
        """The positional arguments for ``values`` (missing names take their defaults).

        Raises:
            sqlalchemy.exc.StatementError: A bind processor refused a value (as
                SQLAlchemy raises it when it processes the parameters itself).
        """
        processed: dict[str, Any] = {}
        try:
            for name, process in self._processors:
                value = values[name] if name in values else self._defaults[name]
                processed[name] = value if process is None or value is None else process(value)
        except Exception as exc:
            dbapi = self._dialect.loaded_dbapi
            raise sa.exc.DBAPIError.instance(
                self.sql,
                dict(values),
                exc,
                dbapi.Error,
                hide_parameters=self._hide_parameters,
                dialect=self._dialect,
            ) from exc
        return [processed[name] for name in self._positions]

    async def fetch(self, connection: PoolProxiedConnection, arguments: list[Any]) -> list[Any]:
        """Run on ``connection``'s asyncpg connection; its ``Record`` rows.

        Raises:
            sqlalchemy.exc.DBAPIError: The driver's error, wrapped as SQLAlchemy does
                (``connection_invalidated`` when the connection is gone).
        """
        adapted: Any = connection.dbapi_connection
        try:
            records: list[Any] = await adapted.driver_connection.fetch(self.sql, *arguments)
        except Exception as exc:
            dbapi = self._dialect.loaded_dbapi
            try:
                # SQLAlchemy's own asyncpg-to-DBAPI mapping: it raises the DBAPI error
                # (cause: the asyncpg one), or re-raises what it does not map.
                adapted._handle_exception(exc)
            except dbapi.Error as error:
                raise sa.exc.DBAPIError.instance(
                    self.sql,
                    arguments,
                    error,
                    dbapi.Error,
                    hide_parameters=self._hide_parameters,
                    connection_invalidated=self._dialect.is_disconnect(error, adapted, None),
                    dialect=self._dialect,
                ) from error
            raise  # pragma: no cover - the mapping always raises
        return records


def reusable_after(exc: BaseException) -> bool:
    """Whether the connection a driver-level statement failed on is idle and reusable.

    Only when the server answered with an error (asyncpg then synchronizes the
    session), whether SQLAlchemy wrapped the asyncpg error (a
    :class:`PgDriverStatement`) or the store translated it (an enqueue). asyncpg sends
    a new statement's ``Parse`` without a ``Sync``: when it then fails on the client
    (an argument it cannot encode), the server holds the statement's implicit
    transaction, and its locks, until the next message. A timeout, a cancellation or a
    lost connection leaves the session unknown too.
    """
    if isinstance(exc, sa.exc.DBAPIError):
        if exc.connection_invalidated:
            return False
        driver_error = None if exc.orig is None else exc.orig.__cause__
    elif isinstance(exc, AsterForgeError):
        driver_error = exc.__cause__
    else:
        return False
    return getattr(driver_error, "severity", None) is not None


def utc_decoder(dialect: Any) -> Any:
    """The result value of a :class:`UtcDateTime` column as SQLAlchemy returns it.

    asyncpg decodes ``timestamptz`` as an aware datetime in UTC already, which the
    column type returns unchanged; anything else (a custom codec) goes through the
    column type's own result processor.
    """
    process = UtcDateTime().dialect_impl(dialect).result_processor(dialect, None)

    def decode(value: datetime | None) -> datetime | None:
        if value is None or value.tzinfo is UTC or process is None:
            return value
        result: datetime | None = process(value)
        return result

    return decode


def unless_all_null(values: list[Any]) -> list[Any]:
    """``values``, or no values at all when every one is ``None`` (an ``unnest`` argument).

    A multi-argument ``unnest`` pads its shorter arrays with NULLs, so the rows are the
    same, and the driver has nothing to check and encode per element (as it does even
    for a NULL).
    """
    return [] if values.count(None) == len(values) else values
