"""One-line errors for the CLI: expected failures never print a traceback."""

from __future__ import annotations

import sys
from typing import NoReturn

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError, SQLAlchemyError

from aster_forge import TablesMissingError, TaskNotFoundError, TaskStateError
from aster_forge.db.errors import (
    AsterForgeDbError,
    DatabaseDriverMissingError,
    InvalidDatabaseUrlError,
    UnsupportedDatabaseBackendError,
)

__all__ = ["EXIT_FAILED", "EXIT_UNREACHABLE", "CliError", "database_error", "fail", "safe_url"]

EXIT_FAILED = 1
"""The operation failed (or the service is unhealthy)."""

EXIT_UNREACHABLE = 2
"""The database or the service could not be reached, or the input was unusable."""


class CliError(Exception):
    """Raised inside a command to end it with one ``error: ...`` line and an exit code."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


def fail(error: CliError) -> NoReturn:
    """Print ``error: <message>`` on stderr and exit with the error's code."""
    sys.stderr.write(f"error: {error.message}\n")
    sys.stderr.flush()
    raise SystemExit(error.exit_code)


def safe_url(url: str) -> str:
    """The URL with its password hidden (for messages)."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):
        return url


def _first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line[:200]


def _root_cause(exc: BaseException) -> BaseException:
    seen: set[int] = set()
    while id(exc) not in seen:
        seen.add(id(exc))
        nxt = exc.__cause__ or getattr(exc, "orig", None) or exc.__context__
        if nxt is None:
            break
        exc = nxt
    return exc


def database_error(exc: BaseException, url: str) -> CliError:
    """Translate an engine/driver/store error into a one-line :class:`CliError`."""
    shown = safe_url(url)
    if isinstance(exc, TaskNotFoundError | TaskStateError):
        return CliError(str(exc), EXIT_FAILED)
    if isinstance(exc, TablesMissingError):
        # Its own message says what to run; the driver's would not.
        return CliError(f"{exc} (database {shown})", EXIT_UNREACHABLE)
    if isinstance(
        exc, InvalidDatabaseUrlError | UnsupportedDatabaseBackendError | DatabaseDriverMissingError
    ):
        return CliError(f"cannot use the database URL {shown!r}: {exc}", EXIT_UNREACHABLE)
    if isinstance(exc, NoSuchModuleError):
        return CliError(
            f"no SQLAlchemy dialect or driver for {shown!r}: {_first_line(str(exc))}",
            EXIT_UNREACHABLE,
        )
    if isinstance(exc, ArgumentError | ValueError) and not isinstance(
        exc, SQLAlchemyError | OSError
    ):
        return CliError(
            f"invalid database URL {shown!r}: {_first_line(str(exc))}", EXIT_UNREACHABLE
        )
    if isinstance(exc, ArgumentError):
        return CliError(
            f"invalid database URL {shown!r}: {_first_line(str(exc))}", EXIT_UNREACHABLE
        )
    if isinstance(exc, OSError | DBAPIError | AsterForgeDbError | SQLAlchemyError | TimeoutError):
        cause = _root_cause(exc)
        reason = _first_line(str(cause)) or type(cause).__name__
        return CliError(f"cannot use the database at {shown}: {reason}", EXIT_UNREACHABLE)
    return CliError(f"{type(exc).__name__}: {_first_line(str(exc))}", EXIT_FAILED)
