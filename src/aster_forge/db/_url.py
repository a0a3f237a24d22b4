"""Database URL normalisation: every engine aster-forge creates from a URL goes through here."""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from .errors import (
    DatabaseDriverMissingError,
    InvalidDatabaseUrlError,
    UnsupportedDatabaseBackendError,
)

__all__ = ["normalize_database_url"]


@dataclass(frozen=True, slots=True)
class _Backend:
    """One supported backend: its async drivers, the default one and the extra that installs it."""

    dialect: str
    default_driver: str
    async_drivers: frozenset[str]
    extra: str | None


_POSTGRESQL = _Backend("postgresql", "asyncpg", frozenset({"asyncpg"}), "postgres")
_MYSQL = _Backend("mysql", "aiomysql", frozenset({"aiomysql", "asyncmy"}), "mysql")
_SQLITE = _Backend("sqlite", "aiosqlite", frozenset({"aiosqlite"}), None)

# "postgres" is what Heroku-style URLs say; "mariadb" selects SQLAlchemy's separate
# mariadb dialect, whose name the tables' MariaDB/MySQL column variants do not match.
_BACKENDS = {
    "postgresql": _POSTGRESQL,
    "postgres": _POSTGRESQL,
    "mysql": _MYSQL,
    "mariadb": _MYSQL,
    "sqlite": _SQLITE,
}

# The extra does not install asyncmy; name the package itself.
_DRIVER_PACKAGES = {"asyncmy": "asyncmy"}


def _check_driver_installed(backend: _Backend, driver: str) -> None:
    try:
        importlib.import_module(driver)
    except ModuleNotFoundError as exc:
        # Only a module that is absent (the driver or one it needs, e.g. aiomysql's
        # pymysql) means "install it"; any other import failure propagates as it is.
        missing = (exc.name or driver).partition(".")[0]
        package = _DRIVER_PACKAGES.get(driver)
        if package is None and backend.extra is not None:
            hint = f"install the extra: pip install 'aster-forge[{backend.extra}]'"
        else:
            hint = f"install it: pip install {package or driver}"
        what = repr(driver) if missing == driver else f"{driver!r} (it needs {missing!r})"
        raise DatabaseDriverMissingError(
            f"the {backend.dialect} driver {what} is not installed; {hint}",
            driver=driver,
            extra=None if package is not None else backend.extra,
        ) from None


def normalize_database_url(url: str) -> str:
    """Return the async SQLAlchemy URL aster-forge uses for ``url``.

    ``postgresql://`` and ``postgres://`` become ``postgresql+asyncpg://``;
    ``mysql://`` and ``mariadb://`` become ``mysql+aiomysql://`` (``mariadb+aiomysql://``
    becomes ``mysql+aiomysql://``); ``sqlite://`` becomes ``sqlite+aiosqlite://``. A URL
    that already names a supported async driver (``asyncpg``, ``aiomysql``, ``asyncmy``,
    ``aiosqlite``) is returned unchanged. Only the scheme is rewritten: user, password,
    host, database and query stay byte for byte.

    Args:
        url: A SQLAlchemy database URL.

    Returns:
        The URL with an async driver.

    Raises:
        InvalidDatabaseUrlError: The URL cannot be parsed, or it names a driver
            aster-forge cannot use (a synchronous one such as ``psycopg2`` or ``pymysql``).
        UnsupportedDatabaseBackendError: The backend is not PostgreSQL, MariaDB/MySQL or
            SQLite.
        DatabaseDriverMissingError: The async driver the URL needs is not installed
            (the message names the extra to install).
    """
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError) as exc:
        raise InvalidDatabaseUrlError(
            "invalid database URL: expected dialect[+driver]://user:password@host/database"
        ) from exc
    dialect, _plus, driver = parsed.drivername.partition("+")
    backend = _BACKENDS.get(dialect.lower())
    if backend is None:
        raise UnsupportedDatabaseBackendError(
            f"unsupported database backend {dialect!r}; expected postgresql, mysql, "
            "mariadb or sqlite"
        )
    driver = driver.lower() or backend.default_driver
    if driver not in backend.async_drivers:
        choices = ", ".join(
            f"{backend.dialect}+{name}://" for name in sorted(backend.async_drivers)
        )
        raise InvalidDatabaseUrlError(
            f"database driver {driver!r} is not an asyncio driver aster-forge supports; "
            f"use {choices} (or {dialect}:// for the default)"
        )
    _check_driver_installed(backend, driver)
    scheme = f"{backend.dialect}+{driver}"
    if parsed.drivername == scheme:
        return url
    _old_scheme, sep, rest = url.partition(":")
    return scheme + sep + rest
