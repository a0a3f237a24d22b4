"""The PostgreSQL backend: :class:`PostgresSql` and the task store's hot statements.

Its raw SQL is in ``sql/postgresql.sql``; the statements are built from it once per
store and, on asyncpg, sent on the driver connection, where asyncpg's statement cache
keeps them prepared. Four parts, in this order: the records built from their rows,
the claim and success statements, the enqueue statement, and the runner with
:class:`PostgresSql`.
"""

from __future__ import annotations

import asyncio
import functools
import uuid
import weakref
from collections.abc import Callable, Iterable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ..runtime._internal import NEVER_EXPIRES, Clock
from ..tasks import NewTask, TaskLease
from ..tasks._internal import (
    LEASE_EXPIRED_ERROR,
    MAX_TASK_CLAIM_LIMIT,
    BackgroundTaskRecord,
    EnqueueResult,
    TaskCompletion,
    TaskFailureReason,
    TaskRateLimit,
    TaskStatus,
)
from ._driver_hold import HeldDriverConnection
from ._pg_driver import PgDriverStatement, unless_all_null, utc_decoder
from ._queries import POSTGRESQL
from ._returning import ReturningSql
from ._tables import CORE_COLUMNS, partition_rates_table, record_from_values
from ._tasks_results import notifying
from ._tasks_sql import (
    _SATURATING_DELTA,
    DbNow,
    HotPaths,
    TaskSql,
    Transaction,
    begin_plain,
    plain_transaction,
)
from ._time import DatabaseBackend, UtcDateTime
from .errors import DatabaseOperationError

__all__ = [
    "LITERAL_LIMITS",
    "NOTIFY_SQL",
    "PgEnqueueStatement",
    "PgRecordBuilder",
    "PgTaskRunner",
    "PgTaskStatements",
    "PostgresSql",
    "UtcStamps",
    "claim_params",
    "epoch_micros",
    "limit_key",
    "returning_columns",
    "success_params",
    "utc_from_micros",
]

#: A lane's NOTIFY on its own (after enqueues that inserted without one).
NOTIFY_SQL = POSTGRESQL["notify"]


# -- records -----------------------------------------------------------------------------
# Task records built positionally from the rows of the PostgreSQL hot statements.
#
# The statements that run on the asyncpg connection itself (the claim family, the
# enqueue) return :data:`~aster_forge.db._tables.CORE_COLUMNS` in order, which is
# :class:`~aster_forge.tasks.BackgroundTaskRecord`'s field order, so a record is the
# row's values with the few that need it converted: no name lookups and no per-column
# result processors. A test guards that the two orders agree.
#
# Their timestamps travel as microseconds since the Unix epoch (:func:`epoch_micros`),
# not as ``timestamptz``: asyncpg decodes a ``timestamptz`` through a ``timedelta`` built
# from keyword arguments, which cost about a third of a claimed row's decoding. A row's
# stamps repeat (one statement's ``now()`` is its ``updated_at``, ``started_at`` and the
# base of every lease; a batch enqueued together shares ``created_at``), so each distinct
# value of one call becomes a :class:`datetime` once.

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# asyncpg reads 'infinity' as datetime.max and '-infinity' as datetime.min, which the
# column type makes UTC (NEVER_EXPIRES is datetime.max: asyncpg writes it as 'infinity').
_LAST = (datetime.max.replace(tzinfo=UTC) - _EPOCH) // timedelta(microseconds=1)
_FIRST = (datetime.min.replace(tzinfo=UTC) - _EPOCH) // timedelta(microseconds=1)


def epoch_micros(expression: str) -> str:
    """SQL for the ``timestamptz`` ``expression`` as whole microseconds since the epoch.

    ``EXTRACT`` returns an exact ``numeric`` (PostgreSQL 14 and later), so the cast
    loses nothing. ``'infinity'`` and ``'-infinity'`` become the microseconds of the
    datetimes asyncpg reads them as; ``NULL`` stays ``NULL``.
    """
    x = expression
    return (
        f"CAST(CASE WHEN isfinite({x}) THEN EXTRACT(EPOCH FROM {x}) * 1000000"
        f" WHEN {x} > 'epoch' THEN {_LAST} WHEN {x} < 'epoch' THEN {_FIRST} END AS BIGINT)"
    )


def utc_from_micros(micros: int) -> datetime:
    """The aware UTC datetime ``micros`` microseconds after the Unix epoch."""
    return _EPOCH + timedelta(0, 0, micros)


class UtcStamps(dict[int, datetime]):
    """Epoch microseconds to aware UTC datetimes, each distinct value converted once.

    One per call: ``stamps[micros]`` is a dict lookup, :func:`utc_from_micros` only for
    a value not seen before.
    """

    __slots__ = ()

    def __missing__(self, micros: int) -> datetime:
        stamp = self[micros] = utc_from_micros(micros)
        return stamp


def returning_columns(table: sa.Table, dialect: Any, prefix: str) -> str:
    """The core columns of ``prefix`` (a table alias) as the hot statements return them.

    Every :class:`UtcDateTime` column comes as :func:`epoch_micros`, named as itself.
    """
    quote = dialect.identifier_preparer.quote
    out = []
    for name in CORE_COLUMNS:
        column = f"{prefix}.{quote(name)}"
        if isinstance(table.c[name].type, UtcDateTime):
            column = f"{epoch_micros(column)} AS {quote(name)}"
        out.append(column)
    return ", ".join(out)


class PgRecordBuilder:
    """Builds :class:`BackgroundTaskRecord` from rows of :func:`returning_columns`.

    The row values are ``int``/``bool``/``str`` already; the status and failure reason
    become their enums, and each :class:`UtcDateTime` column's microseconds an aware
    UTC datetime (:func:`utc_from_micros`), as ``record_from_row`` reads the row.

    Args:
        table: The task table (its core columns' types decide which are datetimes).
    """

    def __init__(self, table: sa.Table) -> None:
        self._times = tuple(
            index
            for index, name in enumerate(CORE_COLUMNS)
            if isinstance(table.c[name].type, UtcDateTime)
        )

    def records(self, rows: Iterable[Any], offset: int = 0) -> list[BackgroundTaskRecord]:
        """The records of ``rows`` (core columns from ``offset``), in order."""
        times = self._times
        stamps = UtcStamps()
        out: list[BackgroundTaskRecord] = []
        for row in rows:
            values = list(row[offset:] if offset else row)
            for index in times:
                micros = values[index]
                if micros is not None:
                    values[index] = stamps[micros]
            out.append(record_from_values(values))
        return out


# -- claim and success statements --------------------------------------------------------
# PostgreSQL hot-path statements of the task store, built once per store.
#
# Built once, the statements skip SQLAlchemy's per-call construction and cache-key work
# and hit asyncpg's prepared-statement cache. The claim folds the lane's lease rescue
# into the same statement (one round trip instead of two) with the same semantics as
# the portable rescue-then-claim pair: expired leases are rescued (attempt counted;
# cancelled or exhausted ones end, an awaited one notified as every ending is, see
# _tasks_results), and a rescued task may be claimed right away when it ranks among the
# first ``limit`` due tasks. A paused lane (a row in the lane table) is rescued but
# nothing in it is claimed.

_RESCUE_BATCH = 500

#: Claims of up to this many tasks carry their limit as a literal, one statement per
#: limit: PostgreSQL then caches a generic plan for each. With the limit a parameter,
#: its generic plan assumes a tenth of the lane is taken, costs more than a fresh plan,
#: and PostgreSQL plans every call anew (planning is then a large share of the
#: statement's server time). Larger claims share one statement with the limit as a
#: parameter.
LITERAL_LIMITS = 64

_LATE = POSTGRESQL["late"]
_LATE_UNION = "\n        " + POSTGRESQL["late_union"]

_CLAIM = "\n" + POSTGRESQL["claim"] + "\n"


_PICK = POSTGRESQL["pick"]

_FAIR_PICK = POSTGRESQL["fair_pick"]
_RUNNING_IN = POSTGRESQL["running_in"]
_RUNNING_JOIN = " " + POSTGRESQL["running_join"]
_RUNNING_CAP = POSTGRESQL["running_cap"]
_BUDGET_JOIN = " " + POSTGRESQL["budget_join"]
_BUDGET_CAP = POSTGRESQL["budget_cap"]

_DONE = "\n" + POSTGRESQL["done"]
_NOT_DONE = "\n      " + POSTGRESQL["not_done"]
_DONE_RESULT = "\n" + POSTGRESQL["done_result"] + "\n"

_GATE = POSTGRESQL["gate"]
_CLUSTER_LIMIT = POSTGRESQL["cluster_limit"]
_COUNTED_DONE = " " + POSTGRESQL["counted_done"]
_FRESH = POSTGRESQL["fresh"] + "\n       "
_GATED_RESULT = "\n" + POSTGRESQL["gated_result"] + "\n"
_NOTIFIED_DONE = POSTGRESQL["notified"].format(written="done", ended="")
_RESCUE_TOLD = POSTGRESQL["notified"].format(written="exp", ended=POSTGRESQL["rescue_ended"])
_RATE_GATE = POSTGRESQL["rate_gate"]
_MADE = POSTGRESQL["made"]
_RATE_LEFT = POSTGRESQL["rate_left"]
_RATE_LIMIT = POSTGRESQL["rate_limit"]
_RATED = POSTGRESQL["rated"]
_PARTITION_RATE_GATE = POSTGRESQL["partition_rate_gate"]
_FRESH_LIMIT = POSTGRESQL["fresh_limit"]
_PARTITION_RATED = POSTGRESQL["partition_rated"]
_TOUCHED = POSTGRESQL["touched"]


#: A partition-rate-limited claim's statement: its limit key (see ``limit_key``), and
#: whether it counts the lane's rate, is capped, is fair, writes successes first.
PartitionRatedKey = tuple[int | None, bool, bool, bool, bool]


def _succeed_and_claim_sql(
    done: str, claim: str, *, capped: bool = False, counted: str = ""
) -> str:
    """``done`` in front of ``claim``, whose final UPDATE becomes the ``claimed`` CTE
    (``capped``: with the ``fresh`` column before the claimed rows; ``counted``: the
    CTEs that count the claimed rows, after it)."""
    ctes, _, update = claim.strip().removeprefix("WITH ").partition("\nUPDATE ")
    result = _DONE_RESULT.replace("c.*", _FRESH + "c.*") if capped else _DONE_RESULT
    return f"{done}, {ctes}, claimed AS (\nUPDATE {update}\n){counted}{result}"


def _gated_claim_sql(claim: str, rated: str = "") -> str:
    """``claim``'s final UPDATE as the ``claimed`` CTE (then ``rated``, the rate count's
    update, when given), after the ``fresh`` column."""
    ctes, _, update = claim.strip().partition("\nUPDATE ")
    return f"{ctes}, claimed AS (\nUPDATE {update}\n){rated}{_GATED_RESULT}"


class PgTaskStatements:
    """The prebuilt claim, batched success and batched renewal statements for one table.

    :meth:`claim` and :meth:`succeed_and_claim` build their statement once per limit
    up to :data:`LITERAL_LIMITS` (the limit a literal), and once for every larger limit
    (the ``lim`` parameter).
    """

    def __init__(self, table: sa.Table, lanes: sa.Table, dialect: Any) -> None:
        quote = dialect.identifier_preparer.format_table
        # The timestamps come as epoch microseconds (see returning_columns).
        self._cols = [
            sa.column(name, sa.BigInteger())
            if isinstance(table.c[name].type, UtcDateTime)
            else table.c[name]
            for name in CORE_COLUMNS
        ]
        names = {"t": quote(table), "running": TaskStatus.RUNNING.value}
        self._table_sql = names["t"]
        self._claim_sql = functools.partial(
            _CLAIM.format,
            **names,
            lanes=quote(lanes),
            rescue=_RESCUE_BATCH,
            rescue_told=_RESCUE_TOLD,
            pending=TaskStatus.PENDING.value,
            cancelled=TaskStatus.CANCELLED.value,
            failed=TaskStatus.FAILED.value,
            reason_cancelled=TaskFailureReason.CANCELLED.value,
            reason_expired=TaskFailureReason.LEASE_EXPIRED.value,
            returning=returning_columns(table, dialect, "t"),
        )
        self._done_sql = _DONE.format(
            **names, succeeded=TaskStatus.SUCCEEDED.value, told=_NOTIFIED_DONE
        )
        self._gate = _GATE.format(lanes=quote(lanes))
        made = _MADE.format(lanes=quote(lanes))
        self._rate_gate = _RATE_GATE.format(lanes=quote(lanes), made=made) + _RATE_LEFT
        self._rated = _RATED.format(lanes=quote(lanes), running=TaskStatus.RUNNING.value)
        self._rated_claims: dict[int | None, Any] = {}
        rates = quote(partition_rates_table(table))
        self._partition_rate_gate = _PARTITION_RATE_GATE.format(
            lanes=quote(lanes), rates=rates, made=made
        )
        self._partition_rated = _PARTITION_RATED.format(
            rates=rates, running=TaskStatus.RUNNING.value
        )
        self._touched = _TOUCHED.format(lanes=quote(lanes), running=TaskStatus.RUNNING.value)
        self._partition_rated_claims: dict[PartitionRatedKey, Any] = {}
        self._claims: dict[tuple[int | None, bool, bool], Any] = {}
        self._succeed_and_claims: dict[tuple[int | None, bool, bool], Any] = {}
        t = table
        running = TaskStatus.RUNNING.value
        done = (
            sa.func.unnest(
                sa.bindparam("ids", type_=postgresql.ARRAY(sa.BigInteger())),
                sa.bindparam("tokens", type_=postgresql.ARRAY(sa.Text())),
                sa.bindparam("results", type_=postgresql.ARRAY(sa.Text())),
                sa.bindparam("steps", type_=postgresql.ARRAY(sa.Text())),
            )
            .table_valued("id", "token", "result_json", "steps_json")
            .render_derived(name="v")
        )
        # As in ``done`` (sql/postgresql.sql): the ids as an array too, and the status
        # against a scalar subquery, so the plan reaches the rows by primary key instead
        # of hashing every running row (as a plan made from stale statistics did).
        ids = sa.bindparam("ids", type_=postgresql.ARRAY(sa.BigInteger()))
        running_by_id = (
            t.c.id == sa.func.any(ids),
            t.c.status == sa.select(sa.literal(running)).scalar_subquery(),
        )
        written = (
            sa.update(t)
            .where(t.c.id == done.c.id, t.c.processing_token == done.c.token, *running_by_id)
            .values(
                status=TaskStatus.SUCCEEDED.value,
                result_json=done.c.result_json,
                steps_json=sa.func.coalesce(done.c.steps_json, t.c.steps_json),
                failure_reason=None,
                processing_token=None,
                lease_expires_at=None,
                finished_at=sa.func.now(),
                updated_at=sa.func.now(),
            )
            .returning(t.c.id, done.c.token, t.c.result_awaited)
            .cte("done")
        )
        # The awaited successes notify (see _tasks_results) in a filter of the result.
        told = sa.select(sa.func.count()).select_from(
            sa.text(POSTGRESQL["told"].format(notified_done=_NOTIFIED_DONE))
        )
        self.succeed_many = sa.select(written.c.id, written.c.token).where(
            told.scalar_subquery() >= 0
        )
        leases = (
            sa.func.unnest(
                sa.bindparam("ids", type_=postgresql.ARRAY(sa.BigInteger())),
                sa.bindparam("tokens", type_=postgresql.ARRAY(sa.Text())),
            )
            .table_valued("id", "token")
            .render_derived(name="v")
        )
        self.renew_many = (
            sa.update(t)
            .where(t.c.id == leases.c.id, t.c.processing_token == leases.c.token, *running_by_id)
            .values(
                lease_expires_at=sa.func.now() + sa.bindparam("ttl", type_=sa.Interval()),
                updated_at=sa.func.now(),
            )
            .returning(t.c.id, t.c.processing_token, t.c.lease_expires_at, t.c.cancel_requested)
        )

    def _cand_limit(self, limit_sql: str, capped: bool, counted: str) -> str:
        if not capped:
            return limit_sql
        return _CLUSTER_LIMIT.format(
            limit=limit_sql, t=self._table_sql, running=TaskStatus.RUNNING.value, counted=counted
        )

    def _fair_pick(self, cand_limit: str, counted: str, *, running: bool, budget: bool) -> str:
        """``fair_pick``, capped per partition by its running rows (``running``: the
        ``plim`` parameter) and by its partition rate budget (``budget``)."""
        joins = (_RUNNING_JOIN if running else "") + (_BUDGET_JOIN if budget else "")
        caps = [cap for on, cap in ((running, _RUNNING_CAP), (budget, _BUDGET_CAP)) if on]
        running_in = (
            _RUNNING_IN.format(t=self._table_sql, running=TaskStatus.RUNNING.value, counted=counted)
            if running
            else ""
        )
        return _FAIR_PICK.format(
            t=self._table_sql,
            running_in=running_in,
            joins=joins,
            caps=" AND ".join(caps),
            cand_limit=cand_limit,
        )

    def _pick(self, limit_sql: str, capped: bool, fair: bool, counted: str, late: bool) -> str:
        cand_limit = self._cand_limit(limit_sql, capped, counted)
        if fair:
            return self._fair_pick(cand_limit, counted, running=True, budget=False)
        return _PICK.format(
            t=self._table_sql,
            limit=limit_sql,
            cand_limit=cand_limit,
            late=_LATE.format(t=self._table_sql, limit=limit_sql) if late else "",
            late_union=_LATE_UNION if late else "",
        )

    def claim(self, limit: int, *, capped: bool = False, fair: bool = False) -> Any:
        """The lane's rescue-and-claim for claims of ``limit`` tasks.

        ``capped``: the variant under a cluster-wide limit (the ``cap`` parameter); its
        rows start with ``fresh`` (see ``gate`` in sql/postgresql.sql), then the claimed
        columns, and come as one all-null row past ``fresh`` when it claims and rescues
        nothing.
        ``fair`` (with ``capped``): a partitioned lane's, see ``fair_pick`` (the
        ``plim`` parameter).
        """
        key = limit_key(limit)
        statement = self._claims.get((key, capped, fair))
        if statement is None:
            limit_sql = _limit_sql(key)
            sql = self._claim_sql(
                exclude="",
                gate=self._gate if capped else "",
                pick=self._pick(limit_sql, capped, fair, "", late=True),
            )
            text = sa.text(_gated_claim_sql(sql) if capped else sql)
            fresh = [sa.column("fresh", sa.Boolean())] if capped else []
            statement = self._claims[key, capped, fair] = text.bindparams(
                *_claim_params(key, capped, fair)
            ).columns(*fresh, *self._cols)
        return statement

    def rated_claim(self, limit: int) -> Any:
        """The rescue-and-claim of a lane with a rate limit alone (see ``rate_gate`` in
        sql/postgresql.sql; the ``rate_count`` and ``rate_us`` parameters), shaped as
        :meth:`claim`'s capped one: ``fresh``, then the claimed columns."""
        key = limit_key(limit)
        statement = self._rated_claims.get(key)
        if statement is None:
            limit_sql = _limit_sql(key)
            pick = _PICK.format(
                t=self._table_sql,
                limit=limit_sql,
                cand_limit=_RATE_LIMIT.format(limit=limit_sql),
                late=_LATE.format(t=self._table_sql, limit=limit_sql),
                late_union=_LATE_UNION,
            )
            sql = self._claim_sql(exclude="", gate=self._rate_gate, pick=pick)
            params = [
                *_claim_params(key, False, False),
                sa.bindparam("rate_count", type_=sa.Integer()),
                sa.bindparam("rate_us", type_=sa.BigInteger()),
            ]
            statement = self._rated_claims[key] = (
                sa.text(_gated_claim_sql(sql, self._rated))
                .bindparams(*params)
                .columns(sa.column("fresh", sa.Boolean()), *self._cols)
            )
        return statement

    def partition_rated_claim(
        self, limit: int, *, rated: bool, capped: bool, fair: bool, success: bool = False
    ) -> Any:
        """The rescue-and-claim of a lane with a partition rate limit (see
        ``partition_rate_gate`` in sql/postgresql.sql; the ``part_count`` and ``part_us``
        parameters), with the lane's own rate (``rated``: as :meth:`rated_claim`), its
        cluster-wide limit (``capped``) and its partition limit (``fair``), shaped as
        :meth:`claim`'s capped one; ``success``: after the successes, shaped as
        :meth:`succeed_and_claim`'s capped one."""
        key = limit_key(limit)
        statement = self._partition_rated_claims.get((key, rated, capped, fair, success))
        if statement is None:
            counted = _COUNTED_DONE if success else ""
            cand_limit = _limit_sql(key)
            if rated:
                cand_limit = _RATE_LIMIT.format(limit=cand_limit)
            cand_limit = _FRESH_LIMIT.format(limit=self._cand_limit(cand_limit, capped, counted))
            claim = self._claim_sql(
                exclude=_NOT_DONE if success else "",
                gate=self._partition_rate_gate + (_RATE_LEFT if rated else ""),
                pick=self._fair_pick(cand_limit, counted, running=fair, budget=True),
            )
            after = (self._rated if rated else self._touched) + self._partition_rated
            params = [
                *_claim_params(key, capped, fair),
                sa.bindparam("part_count", type_=sa.Integer()),
                sa.bindparam("part_us", type_=sa.BigInteger()),
            ]
            if rated:
                params.append(sa.bindparam("rate_count", type_=sa.Integer()))
                params.append(sa.bindparam("rate_us", type_=sa.BigInteger()))
            done: list[Any] = []
            if success:
                sql = _succeed_and_claim_sql(self._done_sql, claim, capped=True, counted=after)
                params += _success_bindparams()
                done = [
                    sa.column("done_ids", postgresql.ARRAY(sa.BigInteger())),
                    sa.column("done_tokens", postgresql.ARRAY(sa.Text())),
                ]
            else:
                sql = _gated_claim_sql(claim, after)
            statement = self._partition_rated_claims[key, rated, capped, fair, success] = (
                sa.text(sql)
                .bindparams(*params)
                .columns(*done, sa.column("fresh", sa.Boolean()), *self._cols)
            )
        return statement

    def succeed_and_claim(self, limit: int, *, capped: bool = False, fair: bool = False) -> Any:
        """Successes written and up to ``limit`` tasks claimed, in one statement
        (``capped``, ``fair``: as for :meth:`claim`)."""
        key = limit_key(limit)
        statement = self._succeed_and_claims.get((key, capped, fair))
        if statement is None:
            limit_sql = _limit_sql(key)
            claim = self._claim_sql(
                exclude=_NOT_DONE,
                gate=self._gate if capped else "",
                pick=self._pick(limit_sql, capped, fair, _COUNTED_DONE, late=False),
            )
            fresh = [sa.column("fresh", sa.Boolean())] if capped else []
            statement = self._succeed_and_claims[key, capped, fair] = (
                sa.text(_succeed_and_claim_sql(self._done_sql, claim, capped=capped))
                .bindparams(*_claim_params(key, capped, fair), *_success_bindparams())
                .columns(
                    sa.column("done_ids", postgresql.ARRAY(sa.BigInteger())),
                    sa.column("done_tokens", postgresql.ARRAY(sa.Text())),
                    *fresh,
                    *self._cols,
                )
            )
        return statement


def limit_key(limit: int) -> int | None:
    """The statement a claim of ``limit`` tasks uses: its literal limit, or ``None``."""
    return limit if 0 < limit <= LITERAL_LIMITS else None


def _limit_sql(key: int | None) -> str:
    # An int from limit_key, never text from outside: safe to write into the SQL.
    return ":lim" if key is None else str(int(key))


def _success_bindparams() -> list[sa.BindParameter[Any]]:
    """The success-and-claim's array parameters (see ``success_params``)."""
    return [
        sa.bindparam("ids", type_=postgresql.ARRAY(sa.BigInteger())),
        sa.bindparam("tokens", type_=postgresql.ARRAY(sa.Text())),
        sa.bindparam("results", type_=postgresql.ARRAY(sa.Text())),
        sa.bindparam("steps", type_=postgresql.ARRAY(sa.Text())),
    ]


def _claim_params(key: int | None, capped: bool, fair: bool) -> list[sa.BindParameter[Any]]:
    params: list[sa.BindParameter[Any]] = [
        sa.bindparam("lane", type_=sa.Text()),
        sa.bindparam("lease_error", value=LEASE_EXPIRED_ERROR, type_=sa.Text()),
        sa.bindparam("prefix", type_=sa.Text()),
        sa.bindparam("ttl", type_=sa.Interval()),
        sa.bindparam("owner", type_=sa.Text()),
    ]
    if key is None:
        params.append(sa.bindparam("lim", type_=sa.Integer()))
    if capped:
        params.append(sa.bindparam("cap", type_=sa.Integer()))
    if fair:
        params.append(sa.bindparam("plim", type_=sa.Integer()))
    return params


# -- enqueue -----------------------------------------------------------------------------
# PostgreSQL enqueue in one statement: insert-or-get on the dedupe key, and the NOTIFY.
#
# One task without a dedupe key (a web request's enqueue) takes a plain ``INSERT``: no
# conflict can happen and no existing row can be read, so the server returns only what it
# decides (the id and the times) and the record is built from the request. The batch
# statement takes the batch as arrays (``unnest``; one row or 5,000, the same
# prepared statement), inserts with ``ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT
# NULL DO NOTHING`` (the key index is partial; the full one of an older table is inferred
# alike), signals each lane that received a row with ``pg_notify`` (delivered by
# PostgreSQL at commit, so a rolled-back transaction wakes nobody), and returns the
# inserted rows plus the rows that already held a key. A key committed by a racing
# transaction after the statement's snapshot is neither inserted nor returned; the caller
# reads it in a second statement.

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

_COLUMNS = POSTGRESQL["insert_columns"]

_ON_CONFLICT = "\n    " + POSTGRESQL["on_conflict"]

_SQL = "\n" + POSTGRESQL["enqueue"] + "\n"

_SINGLE_SQL = "\n" + POSTGRESQL["enqueue_one"] + "\n"

# Tasks without a key: nothing to resolve. The server returns what it decides; the
# first is one task's statement (no arrays), the second a batch's. created_at and
# updated_at are both now(): one value, sent once. run_at is sent only when it is not
# now() (a delay or a given time): each epoch conversion is numeric arithmetic the
# server would otherwise do for every row.
_DUE_LATER = f"CASE WHEN run_at = created_at THEN NULL ELSE {epoch_micros('run_at')} END AS run_at"
_UNKEYED_RETURNING = f"RETURNING id, {_DUE_LATER}, {epoch_micros('created_at')} AS created_at"

_UNKEYED_SQL = POSTGRESQL["insert_unkeyed"]

_UNKEYED_MANY_SQL = "\n" + POSTGRESQL["insert_unkeyed_many"] + "\n"
# A batch comes back as one row of arrays, in insert order (the ids follow ``ord``: the
# sort feeds the insert), the due times only when one is not now(): one row object, not
# one per task for the garbage collector to walk (the tasks, their results and the
# driver's rows cost a bulk enqueue about a fifth of its time in collections).

_WOKE = POSTGRESQL["woke"]

_BY_KEY_SQL = POSTGRESQL["by_key"]

_RELEASE_SQL = POSTGRESQL["release_keys"]


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


# -- runner ------------------------------------------------------------------------------
# Running the task store's hot PostgreSQL statements: on asyncpg itself, or via SQLAlchemy.
#
# A busy worker sends the lane claim, the success-and-claim, the batched success and
# the heartbeat's batched renewal for every batch. With the asyncpg driver each runs
# as a :class:`~aster_forge.db._pg_driver.PgDriverStatement` on a pooled connection
# held across a burst of calls (:class:`~aster_forge.db._driver_hold.HeldDriverConnection`,
# as the enqueue does), in autocommit (each is one atomic statement), its ``Record``
# rows decoded straight into :class:`~aster_forge.tasks.BackgroundTaskRecord`. Lost
# conflicts are retried and errors translated exactly as on the SQLAlchemy path, which
# other PostgreSQL drivers keep.

_RUNNING = TaskStatus.RUNNING.value
_STATUS = CORE_COLUMNS.index("status")
# How many times a capped claim runs whose snapshot missed another claim (each time
# after that claim committed, so the cluster moved on meanwhile).
_FRESH_ATTEMPTS = 8

# A statement as SQLAlchemy runs it, and compiled for the driver.
_Statement = tuple[Any, PgDriverStatement]


class PgTaskRunner:
    """The claim, success-and-claim, batched success and batched renewal on PostgreSQL.

    Args:
        statements: The store's prebuilt statements.
        engine: The store's engine (asyncpg: the statements run on the driver).
        sql: The store's :class:`TaskSql` (retry policy, SQLAlchemy transactions).
        hold: The store's held driver connection (shared with its enqueue).
        driver: Run on the asyncpg connection; ``None``: when the engine uses asyncpg.

    Attributes:
        driver: Whether the statements run on the asyncpg connection (else SQLAlchemy).
    """

    def __init__(
        self,
        statements: PgTaskStatements,
        engine: AsyncEngine,
        sql: TaskSql,
        hold: HeldDriverConnection,
        *,
        driver: bool | None = None,
    ) -> None:
        dialect = engine.dialect
        self._sql = sql
        self._hold = hold
        self.driver = dialect.driver == "asyncpg" if driver is None else driver
        self._dialect = dialect
        self._hide = engine.sync_engine.hide_parameters
        self._statements = statements
        # One compiled statement per limit the store was asked for (see LITERAL_LIMITS),
        # per whether it claims under a cluster-wide limit, and whether by partitions.
        self._claims: dict[tuple[int | None, bool, bool], _Statement] = {}
        self._succeed_and_claims: dict[tuple[int | None, bool, bool], _Statement] = {}
        self._rated_claims: dict[int | None, _Statement] = {}
        self._partition_rated_claims: dict[PartitionRatedKey, _Statement] = {}
        self._succeed_many = self._both(statements.succeed_many)
        self._renew_many = self._both(statements.renew_many)
        self._utc = utc_decoder(dialect)
        self._builder = PgRecordBuilder(sql.table)
        # Capped claims of one lane from this store take turns in the process: in the
        # database they would wait on the lane's row anyway, holding a connection, and
        # the one behind would then often find its snapshot stale and run again.
        self._turns: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, dict[str, asyncio.Lock]
        ] = weakref.WeakKeyDictionary()

    def _both(self, statement: Any) -> _Statement:
        driver = PgDriverStatement(statement, self._dialect, hide_parameters=self._hide)
        return statement, driver

    def _for_limit(
        self,
        cache: dict[tuple[int | None, bool, bool], _Statement],
        build: Callable[..., Any],
        limit: int,
        capped: bool,
        fair: bool = False,
    ) -> _Statement:
        key = limit_key(limit), capped, fair  # larger limits share one statement
        statement = cache.get(key)
        if statement is None:
            statement = cache[key] = self._both(build(limit, capped=capped, fair=fair))
        return statement

    async def claim(
        self,
        lane: str,
        limit: int,
        owner: str,
        lease_ttl: timedelta,
        cluster_limit: int | None = None,
        partition_limit: int | None = None,
        rate: TaskRateLimit | None = None,
        partition_rate: TaskRateLimit | None = None,
    ) -> tuple[list[BackgroundTaskRecord], list[TaskStatus]]:
        """The lane's rescue-and-claim (under ``cluster_limit`` or ``partition_limit``:
        locked, see :meth:`PgTaskStatements.claim`; under ``rate`` alone: counted, see
        :meth:`PgTaskStatements.rated_claim`; under ``partition_rate``, with any of the
        others: see :meth:`PgTaskStatements.partition_rated_claim`).

        Returns:
            The claimed records in claim order, and the status of each row the
            rescue left unclaimed (pending again, failed or cancelled).
        """
        if partition_rate is not None:
            limits = _Limits(cluster_limit, partition_limit, rate, partition_rate)
            async with self._turn(lane):
                return await self._claim_partition_rated(lane, limit, owner, lease_ttl, limits)
        if rate is not None:
            async with self._turn(lane):
                return await self._claim_rated(lane, limit, owner, lease_ttl, rate)
        if cluster_limit is not None or partition_limit is not None:
            async with self._turn(lane):
                return await self._claim_fresh(
                    lane, limit, owner, lease_ttl, cluster_limit, partition_limit
                )
        statement = self._for_limit(self._claims, self._statements.claim, limit, False)
        params = claim_params(lane, limit, owner, lease_ttl)
        rows = await self._rows("claim tasks", statement, params)
        return self._claimed(rows), _unclaimed(rows)

    async def _claim_fresh(
        self,
        lane: str,
        limit: int,
        owner: str,
        lease_ttl: timedelta,
        cap: int | None,
        plim: int | None,
        rows: Sequence[Any] | None = None,
        offset: int = 1,
    ) -> tuple[list[BackgroundTaskRecord], list[TaskStatus]]:
        """The capped claim, run again while its snapshot was not fresh (see ``gate``).

        ``rows``: those of a capped statement already run (``fresh`` at ``offset - 1``).
        """
        fair = plim is not None
        statement = self._for_limit(self._claims, self._statements.claim, limit, True, fair)
        params = {**claim_params(lane, limit, owner, lease_ttl), **gate_params(cap, plim)}
        return await self._until_fresh(statement, params, rows, offset)

    async def _until_fresh(
        self, statement: Any, params: dict[str, Any], rows: Sequence[Any] | None, offset: int
    ) -> tuple[list[BackgroundTaskRecord], list[TaskStatus]]:
        """Run a locked claim again while its snapshot was not fresh (``fresh`` at
        ``offset - 1``); ``rows``: those of a first run already made, if any."""
        claimed: list[BackgroundTaskRecord] = []
        ended: list[TaskStatus] = []
        for _ in range(_FRESH_ATTEMPTS):
            if rows is None:
                rows, offset = await self._rows("claim tasks", statement, params), 1
            claimed += self._claimed(rows, offset)
            ended += _unclaimed(rows, offset)
            if rows[0][offset - 1]:
                break
            rows = None
        claimed.sort(key=lambda r: (-r.priority, r.run_at, r.id))
        return claimed, ended

    async def _claim_rated(
        self, lane: str, limit: int, owner: str, lease_ttl: timedelta, rate: TaskRateLimit
    ) -> tuple[list[BackgroundTaskRecord], list[TaskStatus]]:
        """The rate-limited claim, run again when it created the lane's row (``fresh``
        false: it claimed nothing)."""
        key = limit_key(limit)
        statement = self._rated_claims.get(key)
        if statement is None:
            built = self._statements.rated_claim(limit)
            statement = self._rated_claims[key] = self._both(built)
        count, period = rate
        params = {
            **claim_params(lane, limit, owner, lease_ttl),
            "rate_count": count,
            "rate_us": period // timedelta(microseconds=1),
        }
        claimed: list[BackgroundTaskRecord] = []
        ended: list[TaskStatus] = []
        for _ in range(_FRESH_ATTEMPTS):
            rows = await self._rows("claim tasks", statement, params)
            claimed += self._claimed(rows, 1)
            ended += _unclaimed(rows, 1)
            if rows[0][0]:
                break
        claimed.sort(key=lambda r: (-r.priority, r.run_at, r.id))
        return claimed, ended

    def _partition_rated(self, limit: int, limits: _Limits, *, success: bool) -> _Statement:
        rated, capped, fair = limits.shape
        key = limit_key(limit), rated, capped, fair, success
        statement = self._partition_rated_claims.get(key)
        if statement is None:
            built = self._statements.partition_rated_claim(
                limit, rated=rated, capped=capped, fair=fair, success=success
            )
            statement = self._partition_rated_claims[key] = self._both(built)
        return statement

    async def _claim_partition_rated(
        self,
        lane: str,
        limit: int,
        owner: str,
        lease_ttl: timedelta,
        limits: _Limits,
        rows: Sequence[Any] | None = None,
        offset: int = 1,
    ) -> tuple[list[BackgroundTaskRecord], list[TaskStatus]]:
        """The partition-rate-limited claim, run again while its snapshot was not fresh
        (see ``partition_rate_gate``).

        ``rows``: those of a success-and-claim already run (``fresh`` at ``offset - 1``).
        """
        statement = self._partition_rated(limit, limits, success=False)
        params = {**claim_params(lane, limit, owner, lease_ttl), **limits.params()}
        return await self._until_fresh(statement, params, rows, offset)

    async def succeed_and_claim(
        self,
        completions: Sequence[TaskCompletion],
        lane: str,
        limit: int,
        owner: str,
        lease_ttl: timedelta,
        cluster_limit: int | None = None,
        partition_limit: int | None = None,
        rate: TaskRateLimit | None = None,
        partition_rate: TaskRateLimit | None = None,
    ) -> tuple[set[tuple[int, str]], list[BackgroundTaskRecord], list[TaskStatus]]:
        """The fenced successes and the claim in one statement (``cluster_limit``,
        ``partition_limit``: as for :meth:`claim`; ``rate`` only with
        ``partition_rate``).

        Returns:
            The ``(id, token)`` pairs written, the claimed records in claim order, and
            the status of each row the rescue left unclaimed.
        """
        params = {**success_params(completions), **claim_params(lane, limit, owner, lease_ttl)}
        operation = "mark tasks succeeded and claim"
        if partition_rate is not None:
            limits = _Limits(cluster_limit, partition_limit, rate, partition_rate)
            params.update(limits.params())
            statement = self._partition_rated(limit, limits, success=True)
            async with self._turn(lane):
                rows = await self._rows(operation, statement, params, queue=True)
                # The successes are written; a claim run again claims only.
                claimed, ended = await self._claim_partition_rated(
                    lane, limit, owner, lease_ttl, limits, rows, offset=3
                )
            return _written(rows), claimed, ended
        if rate is not None:
            raise ValueError("a rate limit alone is not claimed with successes")
        if cluster_limit is None and partition_limit is None:
            statement = self._for_limit(
                self._succeed_and_claims, self._statements.succeed_and_claim, limit, False
            )
            rows = await self._rows(operation, statement, params, queue=True)
            return _written(rows), self._claimed(rows, offset=2), _unclaimed(rows, offset=2)
        params.update(gate_params(cluster_limit, partition_limit))
        statement = self._for_limit(
            self._succeed_and_claims,
            self._statements.succeed_and_claim,
            limit,
            True,
            partition_limit is not None,
        )
        async with self._turn(lane):
            rows = await self._rows(operation, statement, params, queue=True)
            # The successes are written; a claim run again claims only.
            claimed, ended = await self._claim_fresh(
                lane, limit, owner, lease_ttl, cluster_limit, partition_limit, rows, offset=3
            )
        return _written(rows), claimed, ended

    def _turn(self, lane: str) -> asyncio.Lock:
        """The lock capped claims of ``lane`` take turns on (per event loop)."""
        turns = self._turns.setdefault(asyncio.get_running_loop(), {})
        turn = turns.get(lane)
        if turn is None:
            turn = turns[lane] = asyncio.Lock()
        return turn

    async def succeed_many(self, completions: Sequence[TaskCompletion]) -> set[tuple[int, str]]:
        """The fenced successes in one statement; the ``(id, token)`` pairs written."""
        rows = await self._rows(
            "mark tasks succeeded", self._succeed_many, success_params(completions), queue=True
        )
        return {(int(row[0]), str(row[1])) for row in rows}

    async def renew_many(
        self, leases: Sequence[TaskLease], lease_ttl: timedelta
    ) -> dict[tuple[int, str], tuple[datetime, bool]]:
        """The fenced renewals in one statement: new expiry and cancel flag per claim."""
        params = {
            "ids": [lease.task_id for lease in leases],
            "tokens": [lease.processing_token for lease in leases],
            "ttl": lease_ttl,
        }
        rows = await self._rows("renew task leases", self._renew_many, params)
        utc = self._utc if self.driver else _same
        return {(int(row[0]), str(row[1])): (utc(row[2]), bool(row[3])) for row in rows}

    def _claimed(self, rows: Sequence[Any], offset: int = 0) -> list[BackgroundTaskRecord]:
        # The claim also returns the rows it rescued without claiming them.
        status = offset + _STATUS
        running = (row for row in rows if row[status] == _RUNNING)
        records = self._builder.records(running, offset)
        records.sort(key=lambda r: (-r.priority, r.run_at, r.id))
        return records

    async def _rows(
        self,
        operation: str,
        statement: _Statement,
        params: dict[str, Any],
        *,
        queue: bool = False,
    ) -> Sequence[Any]:
        """Run ``statement`` (``queue``: see :meth:`HeldDriverConnection.acquire`)."""
        stmt, driver = statement
        if not self.driver:

            async def body(conn: AsyncConnection) -> Sequence[Any]:
                return (await conn.execute(stmt, params)).all()

            return await self._sql.run(operation, body, single_statement=True)

        async def once() -> list[Any]:
            arguments = driver.arguments(params)
            connection, held = await self._hold.acquire(operation, queue=queue)
            try:
                records = await driver.fetch(connection, arguments)
            except BaseException as exc:
                await self._hold.release_after(connection, held, exc)
                raise
            await self._hold.release(connection, held, broken=False)
            return records

        return await self._sql.retry(operation, once)


def _written(rows: Sequence[Any]) -> set[tuple[int, str]]:
    """The ``(id, token)`` pairs a success-and-claim wrote (they ride on its first row)."""
    return {
        (int(i), str(token)) for i, token in zip(rows[0][0] or (), rows[0][1] or (), strict=True)
    }


def _same(value: Any) -> Any:
    return value


def _unclaimed(rows: Sequence[Any], offset: int = 0) -> list[TaskStatus]:
    """The status of each row a claim returned without claiming it (rescued rows)."""
    status = offset + _STATUS
    # The success-and-claim's LEFT JOIN answers one all-null row when it claims nothing.
    return [TaskStatus(row[status]) for row in rows if row[status] not in (None, _RUNNING)]


def claim_params(lane: str, limit: int, owner: str, lease_ttl: timedelta) -> dict[str, Any]:
    """The PostgreSQL claim's parameters; one random token prefix per claim."""
    # The prefix plus the row id makes every claimed row's token fresh and unique.
    return {
        "lane": lane,
        "lim": limit,
        "prefix": uuid.uuid4().hex + "-",
        "ttl": lease_ttl,
        "owner": owner,
    }


def gate_params(cap: int | None, plim: int | None) -> dict[str, int]:
    """The gated claim's limits: a partitioned lane without a cluster limit caps at
    the largest claim (never binding)."""
    params = {"cap": MAX_TASK_CLAIM_LIMIT if cap is None else cap}
    if plim is not None:
        params["plim"] = plim
    return params


@dataclass(frozen=True, slots=True)
class _Limits:
    """The limits of a partition-rate-limited claim, and their statement's parameters."""

    cap: int | None
    plim: int | None
    rate: TaskRateLimit | None
    partition_rate: TaskRateLimit

    @property
    def shape(self) -> tuple[bool, bool, bool]:
        """Whether the statement counts the lane's rate, is capped, is fair."""
        return self.rate is not None, self.cap is not None, self.plim is not None

    def params(self) -> dict[str, int]:
        count, period = self.partition_rate
        params = {"part_count": count, "part_us": period // timedelta(microseconds=1)}
        if self.rate is not None:
            params["rate_count"] = self.rate[0]
            params["rate_us"] = self.rate[1] // timedelta(microseconds=1)
        if self.cap is not None:
            params["cap"] = self.cap
        if self.plim is not None:
            params["plim"] = self.plim
        return params


def success_params(completions: Sequence[TaskCompletion]) -> dict[str, list[Any]]:
    """The batched success's array parameters (input order)."""
    return {
        "ids": [c.lease.task_id for c in completions],
        "tokens": [c.lease.processing_token for c in completions],
        "results": unless_all_null([c.result_json for c in completions]),
        "steps": unless_all_null([c.steps_json for c in completions]),
    }


class PostgresSql(ReturningSql):
    """The :class:`~aster_forge.db._tasks_sql.BackendSql` of PostgreSQL.

    Times are computed inline with ``now()`` (no extra round trip); one-statement
    writes run in autocommit; rows written with a later ``run_at`` carry the
    ``waiting`` hint that keeps them out of the due index.
    """

    backend = DatabaseBackend.POSTGRESQL
    writes_autocommit = True
    one_writer = False
    notifies = True
    claims_with_success = True
    # With asyncpg the second waits on the worker's connection and goes out the moment
    # the first returns, so the worker runs the tasks one statement brought while the
    # database writes the other's.
    success_writes_in_flight = 2

    def __init__(self) -> None:
        super().__init__(postgresql.insert)

    async def rescue(
        self,
        conn: AsyncConnection,
        table: sa.Table,
        expired: Any,
        values: Sequence[tuple[Any, Any]],
        outcome: Any,
    ) -> list[TaskStatus]:
        """The portable rescue's ``UPDATE`` (see :meth:`ReturningSql.rescue`), which also
        notifies each awaited row it ended, in the same statement."""
        t = table
        update = sa.update(t).where(t.c.id.in_(expired)).ordered_values(*values)
        rescued = await conn.execute(notifying(update, t, statuses=True))
        return [TaskStatus(row[0]) for row in rescued]

    def hot_paths(
        self,
        table: sa.Table,
        lanes: sa.Table,
        engine: AsyncEngine,
        sql: TaskSql,
        hold: HeldDriverConnection,
        *,
        channel: str | None,
    ) -> HotPaths:
        """The prebuilt claim, success, renewal and enqueue statements."""
        statements = PgTaskStatements(table, lanes, engine.dialect)
        return HotPaths(
            pg=statements,
            pg_run=PgTaskRunner(statements, engine, sql, hold),
            pg_enqueue=PgEnqueueStatement(table, engine.dialect, channel=channel),
        )

    def transaction_engine(self, engine: AsyncEngine) -> AsyncEngine:
        """``engine`` itself."""
        return engine

    def transaction(
        self, engine: AsyncEngine, autocommit: AsyncEngine, *, single_statement: bool
    ) -> Transaction:
        """Autocommit for one statement, else a transaction."""
        return plain_transaction(engine, autocommit, single_statement=single_statement)

    async def begin_held(self, engine: AsyncEngine, stack: AsyncExitStack) -> AsyncConnection:
        """A connection in a transaction of its own."""
        return await begin_plain(engine, stack)

    async def now_value(self, conn: AsyncConnection, clock: Clock) -> datetime:
        """``now()``: the transaction's start on the server's clock."""
        value = (await conn.execute(sa.select(sa.func.now()))).scalar_one()
        if not isinstance(value, datetime):  # pragma: no cover - driver contract
            raise TypeError(f"database returned {value!r} for now()")
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value.astimezone(UTC)

    async def now(self, conn: AsyncConnection, clock: Clock) -> DbNow:
        """``now()`` in the statement itself (no value: the server computes it)."""
        return DbNow(sa.func.now(type_=UtcDateTime()), None)

    def waiting(self, value: Any) -> dict[str, Any]:
        """``waiting``: not yet due, kept out of the claims' index (see background_tasks_table)."""
        return {"waiting": value}

    def enqueue_run_at(
        self, now: DbNow, params: list[dict[str, Any]]
    ) -> tuple[Any, dict[str, Any]]:
        """``coalesce(p_run_at, now() + p_delay)`` and the ``waiting`` hint from the same."""
        run_at = sa.func.coalesce(
            sa.bindparam("p_run_at", type_=UtcDateTime()),
            now.expr + sa.bindparam("p_delay", type_=sa.Interval()),
        )
        # Its own parameters: a parameter named twice in VALUES breaks SQLAlchemy's
        # multi-row insert.
        waiting = (
            sa.func.coalesce(
                sa.bindparam("w_run_at", type_=UtcDateTime()),
                now.expr + sa.bindparam("w_delay", type_=sa.Interval()),
            )
            > now.expr
        )
        for row in params:
            row["w_run_at"], row["w_delay"] = row["p_run_at"], row["p_delay"]
        return run_at, {"waiting": waiting}

    def insert_returning(self, insert: Any, columns: Sequence[Any]) -> Any:
        """``INSERT ... RETURNING``, in parameter order."""
        return insert.returning(*columns, sort_by_parameter_order=True)

    def inserted_rows(self, rows: Sequence[Any]) -> Sequence[Any]:
        """``rows`` (already in parameter order)."""
        return rows

    def locked(self, query: Any, of: sa.Table) -> Any:
        """``query ... FOR UPDATE OF of``: the other tables it joins stay unlocked."""
        return query.with_for_update(of=of)

    def locking_read(self, query: Any) -> Any:
        """``query``: a read in the product's transaction needs no lock here."""
        return query

    def locked_for_write(self, query: Any) -> Any:
        """``query``: the fenced write that follows checks the row itself."""
        return query

    async def stage_waiting(self, sql: TaskSql, table: sa.Table, limit: int) -> int:
        """Clear the hint of up to ``limit`` due tasks, oldest ``run_at`` first."""
        t = table

        async def body(conn: AsyncConnection) -> int:
            came_due = sa.and_(
                t.c.status == TaskStatus.PENDING.value, t.c.waiting, t.c.run_at <= sa.func.now()
            )
            ids = (
                sa.select(t.c.id)
                .where(came_due)
                .order_by(t.c.run_at, t.c.id)
                .limit(limit)
                .with_for_update(skip_locked=True)
            )
            # ``= ANY(ARRAY(...))``: the locking subquery runs once. As ``IN (...)`` the
            # planner may run it again per row, each run locking (and clearing) others.
            chosen = sa.func.any(sa.func.array(ids.scalar_subquery()))
            stmt = sa.update(t).where(t.c.id == chosen, came_due).values(waiting=False)
            return int((await conn.execute(stmt)).rowcount)

        return await sql.run("stage waiting tasks", body, single_statement=True)

    def minute(self, column: Any) -> Any:
        """``to_char`` of the UTC timestamp."""
        return sa.func.to_char(sa.func.timezone("UTC", column), "YYYY-MM-DD HH24:MI")

    def code_point_order(self, column: Any) -> Any:
        """``column COLLATE "C"``: the default collation is locale-aware; "C" gives the
        same code-point order as SQLite's BINARY and MariaDB's utf8mb4_bin."""
        return column.collate("C")
