"""Backends, UTC timestamp columns and the per-dialect "now" used by the stores."""

from __future__ import annotations

import enum
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql, postgresql
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.types import TypeEngine

from ..runtime._internal import NEVER_EXPIRES, saturating_expiry
from .errors import UnsupportedDatabaseBackendError

__all__ = [
    "NEVER_EXPIRES",
    "DatabaseBackend",
    "UtcDateTime",
    "saturating_expiry",
]


class DatabaseBackend(enum.StrEnum):
    """The database backends :mod:`aster_forge.db` supports (SQLAlchemy dialect names)."""

    SQLITE = "sqlite"
    POSTGRESQL = "postgresql"
    MYSQL = "mysql"

    @property
    def has_server_clock(self) -> bool:
        """Whether expiry is computed with the server's ``now()`` (not the injected clock)."""
        return self is not DatabaseBackend.SQLITE

    @classmethod
    def of(cls, backend: object) -> DatabaseBackend:
        """Normalize a backend name, dialect, engine or connection.

        Args:
            backend: ``"sqlite"``/``"postgresql"``/``"postgres"``/``"mysql"``/``"mariadb"``,
                a :class:`DatabaseBackend`, a SQLAlchemy ``Dialect``, an (async) engine or
                connection.

        Raises:
            UnsupportedDatabaseBackendError: For anything else.
        """
        if isinstance(backend, DatabaseBackend):
            return backend
        name: object = backend
        if isinstance(backend, AsyncEngine | AsyncConnection | sa.Engine | sa.Connection):
            name = backend.dialect.name
        elif isinstance(backend, Dialect):
            name = backend.name
        if isinstance(name, str):
            lowered = name.lower()
            aliases = {"postgres": "postgresql", "mariadb": "mysql"}
            lowered = aliases.get(lowered, lowered)
            for member in cls:
                if member.value == lowered:
                    return member
        raise UnsupportedDatabaseBackendError(
            f"unsupported database backend {backend!r}; expected sqlite, postgresql or mysql"
        )


_IMPORTING_MODULE = "__import__('aster_forge.db').db"
"""What a revision reads as the module of :class:`UtcDateTime` (see its ``__init__``)."""


class UtcDateTime(sa.types.TypeDecorator[datetime]):
    """Aware-UTC datetimes: ``TIMESTAMP WITH TIME ZONE`` on PostgreSQL, naive-UTC
    ``DATETIME(6)`` on MariaDB/MySQL and naive-UTC text on SQLite.

    Binding a naive datetime raises ``ValueError`` (no silent local-time guess);
    results are always aware UTC.

    ``alembic revision --autogenerate`` with nothing but ``target_metadata`` in
    ``env.py`` writes it as ``__import__('aster_forge.db').db.UtcDateTime()``, which runs
    in any revision as generated and creates the same column on every backend as
    ``create_all``. With :func:`aster_forge.db.alembic_render_item` configured it is
    ``aster_forge.db.UtcDateTime()`` and the revision gets ``import aster_forge.db``.
    """

    # The public path, so rendered migrations and pickles never name the private module.
    __module__ = "aster_forge.db"

    impl = sa.DateTime
    cache_ok = True

    def __init__(self) -> None:
        super().__init__()
        # Alembic writes a type of a module of its own as "<type.__module__>.<repr>", and
        # a revision imports only sqlalchemy: the instance names its module by an
        # expression that imports it, so the revision needs no hook (the class keeps
        # its real module for everything else).
        self.__dict__["__module__"] = _IMPORTING_MODULE

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        """Pick the column type per dialect."""
        if dialect.name == "postgresql":
            return dialect.type_descriptor(postgresql.TIMESTAMP(timezone=True))
        # SQLAlchemy names the dialect "mariadb" for mariadb:// URLs.
        if dialect.name in ("mysql", "mariadb"):
            return dialect.type_descriptor(mysql.DATETIME(fsp=6))
        return dialect.type_descriptor(sa.DateTime())

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        """Convert to UTC; strip the zone where the column is naive."""
        if value is None:
            return None
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError("aster_forge.db timestamps must be timezone-aware")
        utc = value.astimezone(UTC)
        return utc if dialect.name == "postgresql" else utc.replace(tzinfo=None)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        """Return aware UTC."""
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)
