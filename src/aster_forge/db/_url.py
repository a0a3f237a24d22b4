"""One database URL normalisation: plain ``postgresql://`` / ``mysql://`` / ``sqlite://`` URLs
get the async driver aster-forge uses."""

from __future__ import annotations

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from .errors import UnsupportedDatabaseBackendError

__all__ = ["normalize_database_url"]

# The async driver for each driverless scheme (what Heroku-style URLs carry).
_ASYNC_DRIVERS = {
    "sqlite": "sqlite+aiosqlite",
    "postgresql": "postgresql+asyncpg",
    "postgres": "postgresql+asyncpg",
    "mysql": "mysql+aiomysql",
    "mariadb": "mysql+aiomysql",
}


def normalize_database_url(url: str | URL) -> str:
    """Return ``url`` with the async driver aster-forge uses for its backend.

    ``sqlite://`` becomes ``sqlite+aiosqlite://``, ``postgresql://`` and
    ``postgres://`` become ``postgresql+asyncpg://``, ``mysql://`` and ``mariadb://``
    become ``mysql+aiomysql://``. A URL that already names a driver is returned as is.

    Example:
        >>> normalize_database_url("postgres://app@db/shop")
        'postgresql+asyncpg://app@db/shop'

    Raises:
        UnsupportedDatabaseBackendError: When the URL does not parse or its backend is not
            SQLite, PostgreSQL or MariaDB/MySQL.
    """
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise UnsupportedDatabaseBackendError(f"cannot parse the database URL: {exc}") from None
    if "+" in parsed.drivername:
        backend = parsed.drivername.split("+", 1)[0]
        if backend not in _ASYNC_DRIVERS:
            raise UnsupportedDatabaseBackendError(f"unsupported database backend {backend!r}")
        return parsed.render_as_string(hide_password=False)
    driver = _ASYNC_DRIVERS.get(parsed.drivername)
    if driver is None:
        raise UnsupportedDatabaseBackendError(
            f"unsupported database backend {parsed.drivername!r} "
            "(expected sqlite://, postgresql:// or mysql://)"
        )
    return parsed.set(drivername=driver).render_as_string(hide_password=False)
