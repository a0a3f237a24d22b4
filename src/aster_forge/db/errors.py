"""Exceptions raised by :mod:`aster_forge.db`; driver errors are translated here."""

from __future__ import annotations

from collections.abc import Sequence

from .._errors import AsterForgeError


class AsterForgeDbError(AsterForgeError):
    """Raised as the base class of every :mod:`aster_forge.db` error."""


# --- runtime leases, scheduled tasks, components ---


class UnsupportedDatabaseBackendError(AsterForgeDbError, ValueError):
    """Raised when a backend name, dialect or engine is not SQLite, PostgreSQL or MariaDB/MySQL."""


class InvalidDatabaseUrlError(AsterForgeDbError, ValueError):
    """Raised when a database URL cannot be parsed or names a driver aster-forge cannot use.

    A synchronous driver (``postgresql+psycopg2://``, ``mysql+pymysql://``,
    ``sqlite+pysqlite://``) is refused: every aster-forge store is asyncio.
    """


class DatabaseDriverMissingError(AsterForgeDbError, ImportError):
    """Raised when the async driver a database URL needs is not installed.

    Attributes:
        driver: The driver module that could not be imported, e.g. ``"asyncpg"``.
        extra: The aster-forge extra that installs it (``"postgres"``, ``"mysql"``), or
            ``None`` when no extra does.
    """

    def __init__(self, message: str, *, driver: str, extra: str | None) -> None:
        super().__init__(message)
        self.driver = driver
        self.extra = extra


class DatabaseOperationError(AsterForgeDbError):
    """Raised when a database statement failed; the driver error is the ``__cause__``.

    Attributes:
        operation: What the store was doing, e.g. ``"acquire runtime lease"``.
    """

    def __init__(self, message: str, *, operation: str) -> None:
        super().__init__(message)
        self.operation = operation


class TablesMissingError(DatabaseOperationError):
    """Raised when a table aster-forge needs does not exist: the database is not migrated.

    The same error on SQLite, PostgreSQL and MariaDB, whichever statement met the
    missing table. The message names the tables and how to create them.

    Attributes:
        tables: The missing tables' names (empty when the driver did not name one).
    """

    def __init__(self, tables: Sequence[str], *, operation: str) -> None:
        names = ", ".join(repr(name) for name in tables)
        what = (
            "a table aster-forge needs does not exist"
            if not tables
            else f"table {names} does not exist"
            if len(tables) == 1
            else f"tables {names} do not exist"
        )
        super().__init__(
            f"{operation} failed: {what}; create the tables with "
            "'aster-forge migrate MODULE:FORGE' or your Alembic migration "
            "('alembic upgrade head')",
            operation=operation,
        )
        self.tables = tuple(tables)


class DatabaseUnavailableError(DatabaseOperationError, ConnectionError):
    """Raised when the database could not be reached or the connection broke mid-statement."""


class DatabaseTimeoutError(DatabaseOperationError, TimeoutError):
    """Raised when a statement or connection checkout timed out."""


class DatabaseConflictError(DatabaseOperationError):
    """Raised when a statement lost a deadlock or serialization conflict after retries."""


class DatabaseIntegrityError(DatabaseOperationError):
    """Raised when a statement violated a constraint the store did not expect to hit."""


class DatabaseDataError(DatabaseOperationError, ValueError):
    """Raised when the database rejected a value (out of range, bad encoding, too long)."""
