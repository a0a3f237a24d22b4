"""The state every engine-backed store shares: engine, backend, clock and its table."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from ..runtime._internal import Clock, SystemClock
from ._backends import backend_sql_for
from ._tasks_sql import BackendSql
from ._time import DatabaseBackend

__all__ = ["EngineBackedStore"]


class EngineBackedStore:
    """Base of the stores that run on one async engine and one table.

    Subclasses define :meth:`_define_table`; the table is built on a private
    ``MetaData`` so stores never share (or mutate) the caller's metadata.

    Args:
        engine: The async engine (the table must exist).
        clock: Time source for SQLite (ignored where the server has a clock).

    Raises:
        UnsupportedDatabaseBackendError: When the engine is not SQLite, PostgreSQL or MariaDB.
    """

    def __init__(self, engine: AsyncEngine, *, clock: Clock | None = None) -> None:
        self._engine = engine
        self._backend_sql: BackendSql = backend_sql_for(engine)
        self._backend = self._backend_sql.backend
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._table = self._define_table(sa.MetaData())

    def _define_table(self, metadata: sa.MetaData) -> sa.Table:
        raise NotImplementedError

    @property
    def backend(self) -> DatabaseBackend:
        """The engine's backend."""
        return self._backend
