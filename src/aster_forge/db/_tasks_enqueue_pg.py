"""PostgreSQL enqueue in one statement: insert-or-get on the dedupe key, and the NOTIFY.

One task without a dedupe key (a web request's enqueue) takes a plain ``INSERT``: no
conflict can happen and no existing row can be read, so the server returns only what it
decides (the id and the times) and the record is built from the request. The batch
statement takes the batch as arrays (``unnest``; one row or 5,000, the same
prepared statement), inserts with ``ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT
NULL DO NOTHING`` (the key index is partial; the full one of an older table is inferred
alike), signals each lane that received a row with ``pg_notify`` (delivered by
PostgreSQL at commit, so a rolled-back transaction wakes nobody), and returns the
inserted rows plus the rows that already held a key. A key committed by a racing
transaction after the statement's snapshot is neither inserted nor returned; the caller
reads it in a second statement.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from ..runtime._internal import NEVER_EXPIRES
from ..tasks import NewTask
from ..tasks._internal import BackgroundTaskRecord, EnqueueResult, TaskStatus
from ._pg_driver import unless_all_null
from ._pg_records import PgRecordBuilder, UtcStamps, epoch_micros, returning_columns
from ._tables import CORE_COLUMNS
from ._tasks_sql import _SATURATING_DELTA
from .errors import DatabaseOperationError

__all__ = ["PgEnqueueStatement"]

_INPUT = (
    ("kind", "text", sa.Text()),
    ("lane", "text", sa.Text()),
    ("payload_json", "text", sa.Text()),
    ("steps_json", "text", sa.Text()),
    ("max_attempts", "integer", sa.Integer()),
    ("run_at", "timestamptz", sa.DateTime(timezone=True)),
    ("delay", "interval", sa.Interval()),
    ("priority", "integer", sa.Integer()),
    ("trace_context", "text", sa.Text()),
    ("partition_key", "text", sa.Text()),
    ("dedupe_key", "text", sa.Text()),
)

#: The columns a batch may send as one shared value (in the statement's order).
_SHARED = (
    "kind",
    "lane",
    "steps_json",
    "max_attempts",
    "run_at",
    "delay",
    "priority",
    "trace_context",
    "partition_key",
)

# ``waiting``: written true for a task not yet due (see ``background_tasks_table``).
_COLUMNS = """INSERT INTO {t} (kind, lane, status, payload_json, steps_json, attempt, max_attempts,
                     run_at, priority, dedupe_key, manual_retry_allowed, cancel_requested,
                     rescued, created_at, updated_at, waiting, trace_context,
                     partition_key)"""

# Shared by both statements: a dedupe hit inserts nothing and is read back instead.
_ON_CONFLICT = """
    ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING
    RETURNING {returning}
)"""

_SQL = """
WITH v AS (
    SELECT * FROM unnest({arrays}) WITH ORDINALITY AS v({names}, ord)
), ins AS (
    {columns}
    SELECT kind, lane, '{pending}', payload_json, steps_json, 0, max_attempts,
           COALESCE(run_at, now() + delay), priority, dedupe_key, true, false, false,
           now(), now(), COALESCE(run_at, now() + delay) > now(), trace_context,
           partition_key
    FROM v ORDER BY ord{on_conflict}{woke}
SELECT true AS created, ins.* FROM ins{woke_join}
UNION ALL
SELECT false AS created, {existing}
FROM unnest(CAST(:keys AS text[])) AS k(key) JOIN {t} AS e ON e.dedupe_key = k.key
"""

# One task (a web request's enqueue): plain parameters, no arrays to build or unnest,
# a plan PostgreSQL caches (the array statement costs more to plan than to run).
_SINGLE_SQL = """
WITH ins AS (
    {columns}
    VALUES ($1::text, $2::text, '{pending}', $3::text, $4::text, 0, $5::integer,
            COALESCE($6::timestamptz, now() + $7::interval), $8::integer, $11::text,
            true, false, false, now(), now(),
            COALESCE($6::timestamptz, now() + $7::interval) > now(),
            $9::text, $10::text){on_conflict}{woke}
SELECT true AS created, ins.* FROM ins{woke_join}
UNION ALL
SELECT false AS created, {existing} FROM {t} AS e WHERE e.dedupe_key = $11::text
"""

# Tasks without a key: nothing to resolve. The server returns what it decides; the
# first is one task's statement (no arrays), the second a batch's. created_at and
# updated_at are both now(): one value, sent once. run_at is sent only when it is not
# now() (a delay or a given time): each epoch conversion is numeric arithmetic the
# server would otherwise do for every row.
_DUE_LATER = f"CASE WHEN run_at = created_at THEN NULL ELSE {epoch_micros('run_at')} END AS run_at"
_UNKEYED_RETURNING = f"RETURNING id, {_DUE_LATER}, {epoch_micros('created_at')} AS created_at"

_UNKEYED_SQL = """{columns}
    VALUES ($1::text, $2::text, '{pending}', $3::text, $4::text, 0, $5::integer,
            COALESCE($6::timestamptz, now() + $7::interval), $8::integer, NULL,
            true, false, false, now(), now(),
            COALESCE($6::timestamptz, now() + $7::interval) > now(), $9::text, $10::text)
{returning}{notify}"""

# A column whose value every task of the batch shares (one kind, one lane, the kind's
# initial steps, no delay: the usual bulk enqueue) comes as that one value ($11 to $19)
# and an empty array (unnest pads it with NULLs); the payloads always come as an array,
# which gives the row count. The driver then checks and encodes one element per task,
# not five, and the server unnests one array.
_UNKEYED_MANY_SQL = """
WITH v AS (
    SELECT COALESCE(kind, $11::text) AS kind, COALESCE(lane, $12::text) AS lane,
           payload_json, COALESCE(steps_json, $13::text) AS steps_json,
           COALESCE(max_attempts, $14::integer) AS max_attempts,
           COALESCE(run_at, $15::timestamptz, now() + COALESCE(delay, $16::interval), now())
               AS run_at,
           COALESCE(priority, $17::integer, 0) AS priority,
           COALESCE(trace_context, $18::text) AS trace_context,
           COALESCE(partition_key, $19::text) AS partition_key, ord
    FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::integer[],
                $6::timestamptz[], $7::interval[], $8::integer[], $9::text[], $10::text[])
         WITH ORDINALITY AS v(kind, lane, payload_json, steps_json, max_attempts, run_at,
                              delay, priority, trace_context, partition_key, ord)
), ins AS (
    {columns}
    SELECT kind, lane, '{pending}', payload_json, steps_json, 0, max_attempts, run_at,
           priority, NULL, true, false, false, now(), now(), run_at > now(), trace_context,
           partition_key
    FROM v ORDER BY ord
    RETURNING id, {due_later}, lane
){woke}
SELECT array_agg(ins.id ORDER BY ins.id) AS ids,
       CASE WHEN count(ins.run_at) > 0 THEN array_agg(ins.run_at ORDER BY ins.id) END AS due,
       (SELECT {created}) AS created_at
FROM ins{woke_join}
"""
# A batch comes back as one row of arrays, in insert order (the ids follow ``ord``: the
# sort feeds the insert), the due times only when one is not now(): one row object, not
# one per task for the garbage collector to walk (the tasks, their results and the
# driver's rows cost a bulk enqueue about a fifth of its time in collections).

_WOKE = """, woke AS (
    SELECT count(pg_notify({channel}, l.lane)) AS n FROM (SELECT DISTINCT lane FROM ins) AS l
)"""

_BY_KEY_SQL = "SELECT {columns} FROM {t} WHERE dedupe_key = ANY($1::text[])"

# Keys of a dedupe window ($2 the statuses that hold, $3 the period; either NULL: no
# such limit) moved off holders whose window ended; run before the insert-or-get.
_RELEASE_SQL = """UPDATE {t} SET dedupe_key = NULL
WHERE dedupe_key = ANY($1::text[])
  AND (status <> ALL($2::text[]) OR created_at <= now() - $3::interval)"""


class PgEnqueueStatement:
    """The prebuilt enqueue statements of one table (with or without the NOTIFY).

    ``statement`` runs through SQLAlchemy (in the product's transaction); ``sql`` with
    :meth:`arguments` (any batch), ``single_sql`` with :meth:`single_arguments` (one
    task), :meth:`unkeyed` (tasks without a dedupe key, read by
    :meth:`unkeyed_results`) and ``by_key_sql`` run on the asyncpg
    connection itself, each prepared once and cached by asyncpg (the hot path: no
    per-call SQLAlchemy execution work), their rows read by :meth:`split` and
    :meth:`records`.
    """

    def __init__(self, table: sa.Table, dialect: Any, *, channel: str | None) -> None:
        prep = dialect.identifier_preparer
        quoted = [prep.quote(name) for name in CORE_COLUMNS]
        t = prep.format_table(table)

        def parts(returning: str, existing: str) -> dict[str, str]:
            return {
                "t": t,
                "columns": _COLUMNS.format(t=t),
                "pending": TaskStatus.PENDING.value,
                "on_conflict": _ON_CONFLICT.format(returning=returning),
                "existing": existing,
                "woke_join": " CROSS JOIN woke" if channel is not None else "",
            }

        # Through SQLAlchemy the rows are typed by the table's columns; on the driver
        # the timestamps come as epoch microseconds (see returning_columns).
        typed = parts(", ".join(quoted), ", ".join(f"e.{name}" for name in quoted))
        raw = parts(
            returning_columns(table, dialect, prep.quote(table.name)),
            returning_columns(table, dialect, "e"),
        )
        batch = {
            "arrays": ", ".join(f"CAST(:{name} AS {sql_type}[])" for name, sql_type, _ in _INPUT),
            "names": ", ".join(name for name, _, _ in _INPUT),
            "woke": _WOKE.format(channel=":channel") if channel is not None else "",
        }
        self.single_sql = _SINGLE_SQL.format(
            woke=_WOKE.format(channel="$12::text") if channel is not None else "", **raw
        )
        self._unkeyed_sql = _UNKEYED_SQL.format(
            returning=_UNKEYED_RETURNING,
            notify=", pg_notify($11::text, lane)" if channel is not None else "",
            **raw,
        )
        # A one-task insert whose NOTIFY another enqueue carries (see NotifyLimiter).
        self._unkeyed_quiet_sql = _UNKEYED_SQL.format(
            returning=_UNKEYED_RETURNING, notify="", **raw
        )
        self._unkeyed_many_sql = _UNKEYED_MANY_SQL.format(
            due_later=_DUE_LATER,
            created=epoch_micros("now()"),
            woke=_WOKE.format(channel="$20::text") if channel is not None else "",
            **raw,
        )
        self.by_key_sql = _BY_KEY_SQL.format(columns=returning_columns(table, dialect, t), t=t)
        self.release_sql = _RELEASE_SQL.format(t=t)
        params: list[sa.BindParameter[Any]] = [
            sa.bindparam(name, type_=postgresql.ARRAY(type_)) for name, _, type_ in _INPUT
        ]
        # The batch's keys without NULLs: an index lookup however long the batch is.
        params.append(sa.bindparam("keys", type_=postgresql.ARRAY(sa.Text())))
        if channel is not None:
            params.append(sa.bindparam("channel", value=channel, type_=sa.Text()))
        cols = [table.c[name] for name in CORE_COLUMNS]
        self.statement = (
            sa.text(_SQL.format(**batch, **typed))
            .bindparams(*params)
            .columns(sa.column("created", sa.Boolean()), *cols)
        )
        compiled = sa.text(_SQL.format(**batch, **raw)).bindparams(*params).compile(dialect=dialect)
        self.sql = str(compiled)
        self._order = list(compiled.positiontup or ())
        self._channel = channel
        self._builder = PgRecordBuilder(table)

    def split(
        self, rows: Sequence[Any]
    ) -> tuple[list[BackgroundTaskRecord], list[BackgroundTaskRecord]]:
        """The asyncpg rows of :attr:`sql` or :attr:`single_sql`: (inserted, already there)."""
        # Column 0 is ``created``; the core columns follow.
        build = self._builder.records
        return build((row for row in rows if row[0]), 1), build(
            (row for row in rows if not row[0]), 1
        )

    def records(self, rows: Sequence[Any]) -> list[BackgroundTaskRecord]:
        """The asyncpg rows of :attr:`by_key_sql` as records."""
        return self._builder.records(rows)

    def single_arguments(self, task: NewTask) -> list[Any]:
        """The positional arguments of :attr:`single_sql` for ``task``."""
        args = self._values(task)
        args.append(task.dedupe_key_text)
        if self._channel is not None:
            args.append(self._channel)
        return args

    def insert_one(self, task: NewTask, *, notify: bool = True) -> tuple[str, list[Any]]:
        """The statement and positional arguments for one ``task`` without a dedupe key.

        With ``notify=False`` the statement leaves the NOTIFY out.
        """
        args = self._values(task)
        if self._channel is None or not notify:
            return self._unkeyed_quiet_sql, args
        args.append(self._channel)
        return self._unkeyed_sql, args

    def unkeyed(self, tasks: Sequence[NewTask]) -> tuple[str, list[Any]]:
        """The statement and positional arguments for ``tasks``, none with a dedupe key."""
        if len(tasks) == 1:
            return self.insert_one(tasks[0])
        params = self.parameters(tasks)
        shared: list[Any] = []
        for name in _SHARED:
            values = params[name]
            if values and values.count(values[0]) == len(values):
                params[name] = []
                shared.append(values[0])
            else:
                shared.append(None)  # an array per task (or none, every one NULL)
        # $1 to $10 the arrays (all but the key), $11 to $19 the shared values.
        args: list[Any] = [*(params[name] for name, _, _ in _INPUT[:-1]), *shared]
        if self._channel is not None:
            args.append(self._channel)
        return self._unkeyed_many_sql, args

    def unkeyed_results(self, tasks: Sequence[NewTask], rows: Sequence[Any]) -> list[EnqueueResult]:
        """The results of :meth:`unkeyed` for ``tasks``, from its rows.

        The rows hold what the server decided (ids, due times unless they are the
        insert time, the insert time), in insert order; the rest is what the statement
        wrote, so each record equals its row read back. Each record is built when it is
        first read (:meth:`EnqueueResult.deferred_at`): most callers only enqueue.

        Raises:
            DatabaseOperationError: When the rows do not match the tasks one to one.
        """
        if len(tasks) == 1:
            return [self.inserted(tasks[0], rows)]
        ((ids, dues, created),) = rows
        ids = ids or []
        if len(ids) != len(tasks):
            raise _row_count_error(len(ids), len(tasks))
        batch = _UnkeyedBatch(tasks, ids, dues, created)
        deferred = EnqueueResult.deferred_at
        # created; the id is known without building the record
        return [deferred(batch, index, True, task_id=task_id) for index, task_id in enumerate(ids)]

    @staticmethod
    def inserted(task: NewTask, rows: Sequence[Any]) -> EnqueueResult:
        """The result of :meth:`insert_one` for ``task``, from its rows (see above).

        Raises:
            DatabaseOperationError: When not exactly one row came back.
        """
        if len(rows) != 1:
            raise _row_count_error(len(rows), 1)
        row = rows[0]  # id, run_at, created_at (and the NOTIFY's empty result)
        task_id, due, created = row[0], row[1], row[2]
        build = functools.partial(_unkeyed_record, task, task_id, due, created, UtcStamps())
        return EnqueueResult.deferred(build, True, task_id=task_id)

    @staticmethod
    def _values(task: NewTask) -> list[Any]:
        """The parameters both one-task statements start with ($1 to $10)."""
        run_at, delay = task.run_at, task.delay
        if run_at is None and delay >= _SATURATING_DELTA:
            # Saturate in Python: the server never computes an out-of-range timestamp.
            run_at, delay = NEVER_EXPIRES, timedelta(0)
        return [
            task.kind,
            task.lane,
            task.payload_json,
            task.steps_json,
            task.max_attempts,
            run_at,
            delay,
            task.priority,
            task.trace_context,
            task.partition,
        ]

    def arguments(self, tasks: Sequence[NewTask]) -> list[Any]:
        """The positional arguments of :attr:`sql` for ``tasks``."""
        values: dict[str, Any] = dict(self.parameters(tasks), channel=self._channel)
        return [values[name] for name in self._order]

    @staticmethod
    def parameters(tasks: Sequence[NewTask]) -> dict[str, list[Any]]:
        """The statement's array parameters for ``tasks`` (no ``extra`` columns)."""
        run_ats: list[datetime | None] = []
        delays: list[timedelta] = []
        for task in tasks:
            if task.run_at is None and task.delay >= _SATURATING_DELTA:
                # Saturate in Python: the server never computes an out-of-range timestamp.
                run_ats.append(NEVER_EXPIRES)
                delays.append(timedelta(0))
            else:
                run_ats.append(task.run_at)
                delays.append(task.delay)
        keys = [task.dedupe_key_text for task in tasks]
        return {
            "kind": [task.kind for task in tasks],
            "lane": [task.lane for task in tasks],
            "payload_json": [task.payload_json for task in tasks],
            "steps_json": unless_all_null([task.steps_json for task in tasks]),
            "max_attempts": [task.max_attempts for task in tasks],
            "run_at": unless_all_null(run_ats),
            "delay": delays,
            "priority": [task.priority for task in tasks],
            "trace_context": unless_all_null([task.trace_context for task in tasks]),
            "partition_key": unless_all_null([task.partition for task in tasks]),
            "dedupe_key": unless_all_null(keys),
            "keys": [key for key in keys if key is not None],
        }


def _row_count_error(rows: int, tasks: int) -> DatabaseOperationError:
    return DatabaseOperationError(
        f"enqueue tasks: {rows} rows came back for {tasks} tasks", operation="enqueue tasks"
    )


class _UnkeyedBatch:
    """Builds the record of any task of one plain batch insert, when its result is read.

    One per batch, shared by its results: a callable per result would be two objects
    more per task for the garbage collector to walk while the batch is in use.
    """

    __slots__ = ("_created", "_dues", "_ids", "_stamps", "_tasks")

    def __init__(
        self,
        tasks: Sequence[NewTask],
        ids: Sequence[int],
        dues: Sequence[int | None] | None,
        created: int,
    ) -> None:
        self._tasks = tasks  # the store's checked copy: a caller may reuse its own list
        self._ids = ids
        self._dues = dues
        self._created = created
        # One now() for the whole batch, and for every due-now task's run_at.
        self._stamps = UtcStamps()

    def __call__(self, index: int) -> BackgroundTaskRecord:
        due = self._dues[index] if self._dues is not None else None
        task, task_id = self._tasks[index], self._ids[index]
        return _unkeyed_record(task, task_id, due, self._created, self._stamps)


def _unkeyed_record(
    task: NewTask, task_id: int, due: int | None, created_micros: int, stamps: UtcStamps
) -> BackgroundTaskRecord:
    """The record the plain insert stored for ``task`` (times in epoch microseconds).

    ``due`` is ``None`` when the task's ``run_at`` is its insert time.
    """
    created = stamps[created_micros]
    # In CORE_COLUMNS order, the record's field order.
    return BackgroundTaskRecord.from_values(
        (
            task_id,
            task.kind,
            task.lane,
            TaskStatus.PENDING,
            task.payload_json,
            None,  # result_json
            task.steps_json,
            0,  # attempt
            task.max_attempts,
            created if due is None else stamps[due],  # run_at
            task.priority,
            None,  # processing_token
            None,  # lease_expires_at
            None,  # claimed_by
            None,  # dedupe_key
            None,  # last_error
            None,  # failure_reason
            True,  # manual_retry_allowed
            False,  # cancel_requested
            False,  # rescued
            created,  # created_at
            created,  # updated_at (the same now())
            None,  # started_at
            None,  # finished_at
            0,  # snooze_count
            None,  # last_traceback
            task.trace_context,
            False,  # dependents_waiting
            task.partition,
        )
    )
