"""The one place a store's database picks its :class:`~aster_forge.db._tasks_sql.BackendSql`."""

from __future__ import annotations

from ._mysql import MysqlSql
from ._postgres import PostgresSql
from ._sqlite import SqliteSql
from ._tasks_sql import BackendSql
from ._time import DatabaseBackend

__all__ = ["backend_sql_for"]

_BY_BACKEND: dict[DatabaseBackend, type[SqliteSql | MysqlSql | PostgresSql]] = {
    DatabaseBackend.SQLITE: SqliteSql,
    DatabaseBackend.MYSQL: MysqlSql,
    DatabaseBackend.POSTGRESQL: PostgresSql,
}


def backend_sql_for(backend: object) -> BackendSql:
    """The statements of ``backend`` (a name, dialect, engine or connection).

    Raises:
        UnsupportedDatabaseBackendError: For a database other than SQLite, PostgreSQL
            or MariaDB.
    """
    return _BY_BACKEND[DatabaseBackend.of(backend)]()
