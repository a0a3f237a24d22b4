"""Run a store operation in a transaction; retry lost conflicts; translate driver errors."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import TypeVar

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from .._errors import AsterForgeError
from .errors import (
    DatabaseConflictError,
    DatabaseDataError,
    DatabaseIntegrityError,
    DatabaseOperationError,
    DatabaseTimeoutError,
    DatabaseUnavailableError,
    TablesMissingError,
)

__all__ = [
    "is_driver_connection_error",
    "is_transient_conflict",
    "retry_conflicts",
    "run_transaction",
    "translate_db_error",
    "translate_driver_error",
]

logger = logging.getLogger("aster_forge.db")

T = TypeVar("T")

_CONFLICT_ATTEMPTS = 4
_PG_CONFLICT_STATES = {"40001", "40P01", "55P03"}
_MYSQL_CONFLICT_CODES = {1205, 1213}
_PG_UNDEFINED_TABLE = "42P01"
_MYSQL_NO_SUCH_TABLE = 1146
# Where each driver names the missing table: PostgreSQL 'relation "t" does not exist',
# MariaDB "Table 'db.t' doesn't exist", SQLite "no such table: t".
_MISSING_TABLE_NAME = re.compile(
    r'relation "(?P<pg>[^"]+)" does not exist'
    r"|Table '(?P<mysql>[^']+)' doesn't exist"
    r"|no such table: (?P<sqlite>\S+)"
)


def _sqlstate(exc: BaseException) -> str | None:
    for candidate in (exc, getattr(exc, "__cause__", None)):
        code = getattr(candidate, "sqlstate", None) or getattr(candidate, "pgcode", None)
        if isinstance(code, str):
            return code
    return None


def _mysql_code(exc: BaseException) -> int | None:
    args = getattr(exc, "args", ())
    if args and isinstance(args[0], int):
        return args[0]
    return None


def _caused_by(exc: BaseException, kind: type[BaseException]) -> bool:
    # Drivers wrap their encoding errors (asyncpg: DataError from UnicodeEncodeError),
    # and SQLAlchemy wraps the driver's: look a few links down the chain.
    current: BaseException | None = exc
    for _ in range(6):
        if current is None:
            return False
        if isinstance(current, kind):
            return True
        current = getattr(current, "orig", None) or current.__cause__ or current.__context__
    return False


def _missing_tables(exc: BaseException) -> tuple[str, ...] | None:
    """The table a "no such table" error names (``()`` when it names none), or ``None``
    when ``exc`` is another error. By SQLSTATE on PostgreSQL, error code on MariaDB and
    the message on SQLite, whose driver has no code for it."""
    orig = getattr(exc, "orig", None) or exc
    text = str(orig)
    if (
        _sqlstate(orig) != _PG_UNDEFINED_TABLE
        and _mysql_code(orig) != _MYSQL_NO_SUCH_TABLE
        and "no such table" not in text
    ):
        return None
    match = _MISSING_TABLE_NAME.search(text)
    if match is None:
        return ()
    name = next(group for group in match.groups() if group is not None)
    # The schema (PostgreSQL) or database (MariaDB) prefix is not part of the table's name.
    return (name.rpartition(".")[2],)


def is_transient_conflict(exc: sa.exc.DBAPIError) -> bool:
    """Whether ``exc`` is a deadlock, serialization failure or busy lock worth retrying."""
    orig = exc.orig
    if orig is None:
        return False
    if _sqlstate(orig) in _PG_CONFLICT_STATES:
        return True
    if _mysql_code(orig) in _MYSQL_CONFLICT_CODES:
        return True
    text = str(orig).lower()
    return "database is locked" in text or "database table is locked" in text


def translate_db_error(exc: Exception, operation: str) -> DatabaseOperationError:
    """Map a SQLAlchemy/driver exception to the typed :mod:`aster_forge.db` error.

    The caller raises the result ``from exc`` so the driver error stays the cause.
    The message names the operation and the error class, never parameter values.
    """
    orig = getattr(exc, "orig", None)
    kind = type(orig or exc).__name__
    message = f"{operation} failed ({kind})"
    if _caused_by(exc, UnicodeError):
        # Text the driver cannot encode (a lone surrogate): bad input, not an outage.
        return DatabaseDataError(message, operation=operation)
    if isinstance(exc, sa.exc.TimeoutError | TimeoutError):
        return DatabaseTimeoutError(message, operation=operation)
    if isinstance(exc, sa.exc.DBAPIError):
        missing = _missing_tables(exc)
        if missing is not None:
            # Before the class checks: SQLite reports it as an OperationalError.
            return TablesMissingError(missing, operation=operation)
        if exc.connection_invalidated or isinstance(
            exc, sa.exc.InterfaceError | sa.exc.OperationalError
        ):
            if is_transient_conflict(exc):
                return DatabaseConflictError(message, operation=operation)
            return DatabaseUnavailableError(message, operation=operation)
        if isinstance(exc, sa.exc.IntegrityError):
            return DatabaseIntegrityError(message, operation=operation)
        if isinstance(exc, sa.exc.DataError):
            return DatabaseDataError(message, operation=operation)
        if is_transient_conflict(exc):
            return DatabaseConflictError(message, operation=operation)
    if isinstance(exc, OSError):
        return DatabaseUnavailableError(message, operation=operation)
    return DatabaseOperationError(message, operation=operation)


def is_driver_connection_error(exc: BaseException) -> bool:
    """Whether a raw driver error means the connection itself is unusable."""
    if isinstance(exc, OSError | ConnectionError):
        return True
    name = type(exc).__name__
    state = _sqlstate(exc) or ""
    return state.startswith(("08", "57P")) or name in {
        "InterfaceError",
        "ConnectionDoesNotExistError",
        "InternalClientError",
    }


def translate_driver_error(exc: Exception, operation: str) -> DatabaseOperationError:
    """Map an error raised by the driver itself (used without SQLAlchemy) to the typed one.

    By SQLSTATE class, the way :func:`translate_db_error` maps SQLAlchemy's wrappers:
    ``23`` integrity, ``22`` data, deadlock/serialization conflicts, connection loss.
    """
    message = f"{operation} failed ({type(exc).__name__})"
    state = _sqlstate(exc) or ""
    if _caused_by(exc, UnicodeError) or state.startswith("22") or type(exc).__name__ == "DataError":
        return DatabaseDataError(message, operation=operation)
    if state.startswith("23"):
        return DatabaseIntegrityError(message, operation=operation)
    if state in _PG_CONFLICT_STATES:
        return DatabaseConflictError(message, operation=operation)
    missing = _missing_tables(exc)
    if missing is not None:
        return TablesMissingError(missing, operation=operation)
    if isinstance(exc, TimeoutError):
        return DatabaseTimeoutError(message, operation=operation)
    if is_driver_connection_error(exc):
        return DatabaseUnavailableError(message, operation=operation)
    return DatabaseOperationError(message, operation=operation)


async def run_transaction(
    engine: AsyncEngine,
    operation: str,
    body: Callable[[AsyncConnection], Awaitable[T]],
    *,
    transaction: Callable[[], AbstractAsyncContextManager[AsyncConnection]] | None = None,
    attempts: int = _CONFLICT_ATTEMPTS,
) -> T:
    """Run ``body`` in one transaction; retry deadlocks/serialization failures; translate errors.

    Retrying is safe because a conflict rolls the whole transaction back before
    commit. Bad input must be rejected before this is called.

    Args:
        engine: The engine whose ``begin()`` opens the transaction by default.
        operation: What is being done, for logs and error messages.
        body: The work, given the transaction's connection.
        transaction: Opens the connection/transaction instead of ``engine.begin``
            (e.g. SQLite ``BEGIN IMMEDIATE`` or autocommit for a single statement).
        attempts: How many times a transient conflict is tried in all.

    Raises:
        DatabaseOperationError: (or a subclass) for any driver/SQLAlchemy failure.
    """
    opened = transaction or engine.begin

    async def once() -> T:
        async with opened() as conn:
            return await body(conn)

    return await retry_conflicts(operation, once, attempts=attempts)


async def retry_conflicts(
    operation: str, once: Callable[[], Awaitable[T]], *, attempts: int = _CONFLICT_ATTEMPTS
) -> T:
    """Call ``once`` until it does not lose a transient conflict; translate errors.

    The retry loop of :func:`run_transaction`, for work that raises SQLAlchemy's
    ``DBAPIError`` wrappers without a SQLAlchemy connection (driver-level statements
    wrap their driver's errors the way SQLAlchemy does). Each call must be atomic:
    a lost conflict must have changed nothing.

    Args:
        operation: What is being done, for logs and error messages.
        once: One attempt.
        attempts: How many times a transient conflict is tried in all.

    Raises:
        DatabaseOperationError: (or a subclass) for any driver/SQLAlchemy failure.
    """
    attempt = 0
    while True:
        attempt += 1
        try:
            return await once()
        except asyncio.CancelledError:
            raise
        except AsterForgeError:
            raise
        except sa.exc.DBAPIError as exc:
            if is_transient_conflict(exc) and attempt < attempts:
                logger.debug("%s: transient conflict, retrying (attempt %d)", operation, attempt)
                await asyncio.sleep(0.005 * attempt)
                continue
            raise translate_db_error(exc, operation) from exc
        except (sa.exc.SQLAlchemyError, OSError, TimeoutError, UnicodeError) as exc:
            raise translate_db_error(exc, operation) from exc
