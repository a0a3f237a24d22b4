"""SQLite hot-path statements of the task store, built once per store.

On SQLite (through aiosqlite) every statement is several hops to the driver's thread
and SQLAlchemy's per-call construction and cache-key work is most of the claim's CPU.
So the claim folds the lane's lease rescue into one prebuilt ``WITH ... UPDATE ...
FROM ... RETURNING`` (SQLite 3.35+) with the same semantics as the portable
rescue-then-claim pair (and as the PostgreSQL claim): expired leases are rescued
(attempt counted; cancelled or exhausted ones end), a rescued task may be claimed
right away when it ranks among the first ``limit`` due tasks, and a paused lane is
rescued but nothing in it is claimed. The CTEs are ``MATERIALIZED`` so the candidate
sets are fixed before the rows change. "Now" and the expiry are bound values (SQLite
has no shared clock; the store's clock says).

The hot statements run as :class:`DriverStatement`: compiled by SQLAlchemy once, with
SQLAlchemy's own bind and result processors, then sent on the aiosqlite connection
in one hop each (SQLAlchemy's adapter takes three or four: cursor, execute, fetch,
close). Driver errors are wrapped as SQLAlchemy's ``DBAPIError`` exactly as SQLAlchemy
does, so they are retried and translated like every other statement. These
statements do not pass through SQLAlchemy's cursor events.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from ..tasks._internal import (
    LEASE_EXPIRED_ERROR,
    BackgroundTaskRecord,
    TaskFailureReason,
    TaskStatus,
)
from ._tables import CORE_COLUMNS, record_from_values
from ._tasks_sql import driver_connection
from ._time import UtcDateTime

__all__ = ["DriverStatement", "SqliteTaskStatements"]

_RESCUE_BATCH = 500

_CLAIM = """
WITH exp AS MATERIALIZED (
    SELECT id FROM {t}
    WHERE lane = :lane AND status = '{running}' AND lease_expires_at <= :now
    ORDER BY lease_expires_at LIMIT {rescue}
), open_lane AS MATERIALIZED (
    SELECT NOT EXISTS (SELECT 1 FROM {lanes} WHERE lane = :lane AND paused) AS open
), due AS MATERIALIZED (
    SELECT id, priority, run_at FROM {t}
    WHERE lane = :lane AND status = '{pending}' AND run_at <= :now
      AND (SELECT open FROM open_lane)
    ORDER BY priority DESC, run_at, id LIMIT :lim
), cand AS MATERIALIZED (
    SELECT c.id FROM (
        SELECT id, priority, run_at FROM due
        UNION ALL
        SELECT x.id, x.priority, x.run_at FROM {t} x JOIN exp ON x.id = exp.id
        WHERE NOT (x.cancel_requested OR x.attempt + 1 >= x.max_attempts)
          AND (SELECT open FROM open_lane)
    ) c ORDER BY c.priority DESC, c.run_at, c.id LIMIT {cand_limit}
), target AS MATERIALIZED (
    SELECT id, 1 AS claim FROM cand
    UNION ALL
    SELECT id, 0 AS claim FROM exp WHERE id NOT IN (SELECT id FROM cand)
)
UPDATE {t} AS t SET
    status = CASE WHEN target.claim THEN '{running}'
                  WHEN t.cancel_requested THEN '{cancelled}'
                  WHEN t.attempt + 1 >= t.max_attempts THEN '{failed}'
                  ELSE '{pending}' END,
    failure_reason = CASE WHEN t.status = '{running}' THEN
                         CASE WHEN t.cancel_requested THEN '{reason_cancelled}'
                              ELSE '{reason_expired}' END
                     ELSE t.failure_reason END,
    rescued = CASE WHEN t.status = '{running}'
                   THEN NOT (t.cancel_requested OR t.attempt + 1 >= t.max_attempts)
                   ELSE t.rescued END,
    finished_at = CASE WHEN t.status <> '{running}' THEN t.finished_at
                       WHEN t.cancel_requested OR t.attempt + 1 >= t.max_attempts THEN :now
                       ELSE NULL END,
    last_error = CASE WHEN t.status = '{running}' THEN :lease_error ELSE t.last_error END,
    last_traceback = CASE WHEN t.status = '{running}' THEN NULL ELSE t.last_traceback END,
    attempt = CASE WHEN t.status = '{running}' THEN t.attempt + 1 ELSE t.attempt END,
    processing_token = CASE WHEN target.claim THEN :prefix || CAST(t.id AS TEXT) ELSE NULL END,
    lease_expires_at = CASE WHEN target.claim THEN :expires ELSE NULL END,
    claimed_by = CASE WHEN target.claim THEN :owner ELSE t.claimed_by END,
    started_at = CASE WHEN target.claim THEN :now ELSE t.started_at END,
    updated_at = :now
FROM target
WHERE t.id = target.id
RETURNING {returning}
"""

# Under a cluster-wide limit: the room left, counting the lane's running rows less the
# ones this statement rescues (the transaction is the database's only writer).
_CLUSTER_LIMIT = """MIN(:lim, MAX(0, :cap - (
        SELECT count(*) FROM {t} WHERE lane = :lane AND status = '{running}'
    ) + (SELECT count(*) FROM exp)))"""


class DriverStatement:
    """A statement compiled once, run on the aiosqlite connection in one hop.

    Args:
        statement: The SQLAlchemy statement (named bind parameters).
        dialect: The engine's SQLite dialect.
        columns: The columns it returns, in order (their types process the values).
    """

    def __init__(self, statement: Any, dialect: Any, columns: Sequence[sa.Column[Any]] = ()):
        compiled = statement.compile(dialect=dialect)
        self.sql = compiled.string
        binds = compiled.binds
        self._defaults = {name: bind.value for name, bind in binds.items()}
        # Each named parameter is processed once, then placed at its positions.
        self._positions = list(compiled.positiontup or ())
        self._processors = {
            name: binds[name].type.dialect_impl(dialect).bind_processor(dialect)
            for name in dict.fromkeys(self._positions)
        }
        processors = [
            column.type.dialect_impl(dialect).result_processor(dialect, None) for column in columns
        ]
        # Only the columns that need it are processed: (index, processor, is a timestamp).
        self._processed = [
            (index, process, isinstance(columns[index].type, UtcDateTime))
            for index, process in enumerate(processors)
            if process is not None
        ]
        self._dialect = dialect

    def _params_processed(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """``values`` (named parameters of this statement) through their bind processors."""
        processed = {}
        for name, value in values.items():
            process = self._processors[name]
            processed[name] = value if process is None or value is None else process(value)
        return processed

    def _params(
        self, values: Mapping[str, Any], shared: Mapping[str, Any] | None = None
    ) -> tuple[Any, ...]:
        # ``shared``: processed already (the values every row of an executemany has).
        processed = dict(shared) if shared else {}
        for name, process in self._processors.items():
            if name not in processed:
                value = values[name] if name in values else self._defaults[name]
                processed[name] = value if process is None or value is None else process(value)
        return tuple([processed[name] for name in self._positions])

    def _error(self, exc: Exception, params: Any) -> sa.exc.StatementError:
        dbapi_error = self._dialect.loaded_dbapi.Error
        return sa.exc.DBAPIError.instance(self.sql, params, exc, dbapi_error, dialect=self._dialect)

    async def records(
        self, conn: AsyncConnection, values: Mapping[str, Any]
    ) -> list[BackgroundTaskRecord]:
        """Run once with ``values``; a record per row (the statement returns ``CORE_COLUMNS``).

        Each value goes through its column's result processor, as SQLAlchemy would; a
        timestamp repeated within the result (one claim's ``now`` is every row's
        ``started_at`` and ``updated_at``) is processed once.
        """
        params = self._params(values)
        driver = await driver_connection(conn)
        try:
            rows = await driver.execute_fetchall(self.sql, params)
        except self._dialect.loaded_dbapi.Error as exc:
            raise self._error(exc, params) from exc
        processed = self._processed
        seen: dict[Any, Any] = {}
        records = []
        for row in rows:
            out = list(row)
            for index, process, stamp in processed:
                value = out[index]
                if value is None:
                    continue
                if stamp:
                    done = seen.get(value)
                    if done is None:
                        done = seen[value] = process(value)
                    out[index] = done
                else:
                    out[index] = process(value)
            records.append(record_from_values(out))
        return records

    async def executemany(
        self,
        conn: AsyncConnection,
        rows: Sequence[Mapping[str, Any]],
        shared: Mapping[str, Any] | None = None,
    ) -> int:
        """Run once per entry of ``rows``; the number of rows changed in all.

        ``shared`` holds the values every entry has (processed once, not per entry).
        """
        same = self._params_processed(shared or {})
        params = [self._params(values, same) for values in rows]
        driver = await driver_connection(conn)
        try:
            cursor = await driver.executemany(self.sql, params)
        except self._dialect.loaded_dbapi.Error as exc:
            raise self._error(exc, params) from exc
        return int(cursor.rowcount)


class SqliteTaskStatements:
    """The prebuilt rescue-and-claim statement for one table on SQLite.

    Args:
        table: The task table.
        lanes: Its lane state table.
        dialect: The engine's SQLite dialect (for quoting).
    """

    def __init__(self, table: sa.Table, lanes: sa.Table, dialect: Any) -> None:
        self.dialect = dialect
        self.claim = self._claim(table, lanes, capped=False)
        #: The claim under a cluster-wide limit (the ``cap`` parameter).
        self.claim_capped = self._claim(table, lanes, capped=True)

    def _claim(self, table: sa.Table, lanes: sa.Table, *, capped: bool) -> DriverStatement:
        dialect = self.dialect
        quote = dialect.identifier_preparer.format_table
        cols = [table.c[name] for name in CORE_COLUMNS]
        running = TaskStatus.RUNNING.value
        cand_limit = _CLUSTER_LIMIT.format(t=quote(table), running=running) if capped else ":lim"
        sql = _CLAIM.format(
            cand_limit=cand_limit,
            t=quote(table),
            lanes=quote(lanes),
            rescue=_RESCUE_BATCH,
            running=running,
            pending=TaskStatus.PENDING.value,
            cancelled=TaskStatus.CANCELLED.value,
            failed=TaskStatus.FAILED.value,
            reason_cancelled=TaskFailureReason.CANCELLED.value,
            reason_expired=TaskFailureReason.LEASE_EXPIRED.value,
            # RETURNING names only the updated table's columns (SQLite refuses the alias).
            returning=", ".join(dialect.identifier_preparer.quote(n) for n in CORE_COLUMNS),
        )
        claim = (
            sa.text(sql)
            .bindparams(
                sa.bindparam("lane", type_=sa.Text()),
                sa.bindparam("now", type_=UtcDateTime()),
                sa.bindparam("lim", type_=sa.Integer()),
                sa.bindparam("lease_error", value=LEASE_EXPIRED_ERROR, type_=sa.Text()),
                sa.bindparam("prefix", type_=sa.Text()),
                sa.bindparam("expires", type_=UtcDateTime()),
                sa.bindparam("owner", type_=sa.Text()),
                *([sa.bindparam("cap", type_=sa.Integer())] if capped else []),
            )
            .columns(*cols)
        )
        return DriverStatement(claim, dialect, cols)
