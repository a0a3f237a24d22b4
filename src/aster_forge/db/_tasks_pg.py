"""PostgreSQL hot-path statements of the task store, built once per store.

Built once, the statements skip SQLAlchemy's per-call construction and cache-key work
and hit asyncpg's prepared-statement cache. The claim folds the lane's lease rescue
into the same statement (one round trip instead of two) with the same semantics as
the portable rescue-then-claim pair: expired leases are rescued (attempt counted;
cancelled or exhausted ones end), and a rescued task may be claimed right away when it
ranks among the first ``limit`` due tasks. A paused lane (a row in the lane table) is
rescued but nothing in it is claimed.
"""

from __future__ import annotations

import functools
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from ..tasks._internal import LEASE_EXPIRED_ERROR, TaskFailureReason, TaskStatus
from ._pg_records import returning_columns
from ._tasks_results import notified_endings_sql
from ._tasks_table import CORE_COLUMNS
from ._time import UtcDateTime

__all__ = ["LITERAL_LIMITS", "PgTaskStatements", "limit_key"]

_RESCUE_BATCH = 500

#: Claims of up to this many tasks carry their limit as a literal, one statement per
#: limit: PostgreSQL then caches a generic plan for each. With the limit a parameter,
#: its generic plan assumes a tenth of the lane is taken, costs more than a fresh plan,
#: and PostgreSQL plans every call anew (planning is then a large share of the
#: statement's server time). Larger claims share one statement with the limit as a
#: parameter.
LITERAL_LIMITS = 64

# Due tasks come from the due index, which leaves out rows written with a later run_at
# (``waiting``, see background_tasks_table): a table crowded with tasks due later costs
# the claim nothing. The lane claim also reads the waiting index (``_LATE``) for such
# rows that came due before a worker's stager cleared their flag, so no flag hides a
# task. The success-and-claim leaves that part out: it refills a busy worker's slots
# many times a second, and the flagged rows reach it once staged (within a second).
_LATE = """, late AS (
    SELECT id, priority, run_at FROM {t}
    WHERE lane = :lane AND status = 'pending' AND waiting AND run_at <= now()
      AND (SELECT open FROM open_lane)
    ORDER BY priority DESC, run_at, id LIMIT {limit} FOR UPDATE SKIP LOCKED
)"""
_LATE_UNION = """
        SELECT id, priority, run_at FROM late
        UNION ALL"""

# The final UPDATE names its targets twice: joined (for the claim flag) and as an id
# array, which lets PostgreSQL reach the rows through the primary key. Joined only, the
# planner scanned the whole table for a table of a few thousand rows (most of the
# statement's time); tests/db/test_pg_claim_plans.py checks the plan.
_CLAIM = """
WITH exp AS (
    SELECT id FROM {t}
    WHERE lane = :lane AND status = 'running' AND lease_expires_at <= now(){exclude}
    ORDER BY lease_expires_at LIMIT {rescue} FOR UPDATE SKIP LOCKED
), open_lane AS (
    SELECT NOT EXISTS (SELECT 1 FROM {lanes} WHERE lane = :lane AND paused) AS open
){gate}{pick}, target AS (
    SELECT id, true AS claim FROM cand
    UNION ALL
    SELECT id, false AS claim FROM exp WHERE id NOT IN (SELECT id FROM cand)
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
                       WHEN t.cancel_requested OR t.attempt + 1 >= t.max_attempts THEN now()
                       ELSE NULL END,
    last_error = CASE WHEN t.status = '{running}' THEN :lease_error ELSE t.last_error END,
    last_traceback = CASE WHEN t.status = '{running}' THEN NULL ELSE t.last_traceback END,
    attempt = CASE WHEN t.status = '{running}' THEN t.attempt + 1 ELSE t.attempt END,
    processing_token = CASE WHEN target.claim THEN :prefix || CAST(t.id AS TEXT) ELSE NULL END,
    lease_expires_at = CASE WHEN target.claim THEN now() + :ttl ELSE NULL END,
    claimed_by = CASE WHEN target.claim THEN :owner ELSE t.claimed_by END,
    started_at = CASE WHEN target.claim THEN now() ELSE t.started_at END,
    waiting = false,
    updated_at = now()
FROM target
WHERE t.id = target.id AND t.id = ANY(ARRAY(SELECT id FROM target))
RETURNING {returning}
"""


# The claim's pick: the first ``limit`` due tasks by priority, due time and id, and the
# rows it rescues that may run again.
_PICK = """, due AS (
    SELECT id, priority, run_at FROM {t}
    WHERE lane = :lane AND status = 'pending' AND NOT waiting AND run_at <= now()
      AND (SELECT open FROM open_lane)
    ORDER BY priority DESC, run_at, id LIMIT {limit} FOR UPDATE SKIP LOCKED
){late}, cand AS (
    SELECT c.id FROM (
        SELECT id, priority, run_at FROM due
        UNION ALL{late_union}
        SELECT x.id, x.priority, x.run_at FROM {t} x JOIN exp ON x.id = exp.id
        WHERE NOT (x.cancel_requested OR x.attempt + 1 >= x.max_attempts)
          AND (SELECT open FROM open_lane)
    ) c ORDER BY c.priority DESC, c.run_at, c.id LIMIT {cand_limit}
)"""

# A partitioned lane's pick (always behind the gate, see ``_GATE``): the due tasks
# ranked within each partition, the ranks a partition has no room for left out (its
# running rows in the snapshot, less those this statement writes as succeeded; those
# it rescues still count, which only claims less), taken by rank so partitions take
# turns. Window functions cannot lock rows: the ranked ids are locked after. Rescued
# rows become pending and wait for the next claim.
_FAIR_PICK = """, running_in AS (
    SELECT partition_key, count(*) AS n FROM {t}
    WHERE lane = :lane AND status = '{running}' AND partition_key IS NOT NULL{counted}
    GROUP BY partition_key
), ranked AS (
    SELECT r.id FROM (
        SELECT id, partition_key, priority, run_at, row_number() OVER (
            PARTITION BY partition_key ORDER BY priority DESC, run_at, id) AS turn
        FROM {t}
        WHERE lane = :lane AND status = 'pending' AND run_at <= now()
          AND (SELECT open FROM open_lane)
    ) r LEFT JOIN running_in ri ON ri.partition_key = r.partition_key
    WHERE r.partition_key IS NULL OR r.turn + COALESCE(ri.n, 0) <= :plim
    ORDER BY r.turn, r.priority DESC, r.run_at, r.id LIMIT {cand_limit}
), cand AS (
    SELECT d.id FROM {t} d WHERE d.id IN (SELECT id FROM ranked) AND d.status = 'pending'
    FOR UPDATE SKIP LOCKED
)"""

# Successes written and freed slots claimed in one statement: this CTE in front of the
# claim, whose rescue leaves out the rows being written (one statement must not modify a
# row twice: PostgreSQL would apply only one of the two writes).
#
# The written rows are named as an id array too, and their status is compared to an
# uncorrelated subquery, which the planner cannot match to the partial index of running
# rows: it reaches them through the primary key. With the plain comparison and
# statistics read while few tasks ran (autovacuum analyzes after a tenth of the table
# changed), the cached plan hashed every running row of every worker for each write, so
# a success grew slower with every task other workers were running
# (tests/db/test_pg_claim_plans.py checks the plan).
_DONE = """
WITH done AS (
    UPDATE {t} AS d SET
        status = '{succeeded}',
        result_json = v.result_json,
        steps_json = COALESCE(v.steps_json, d.steps_json),
        failure_reason = NULL,
        processing_token = NULL,
        lease_expires_at = NULL,
        finished_at = now(),
        updated_at = now()
    FROM unnest(:ids, :tokens, :results, :steps) AS v(id, token, result_json, steps_json)
    WHERE d.id = v.id AND d.processing_token = v.token
      AND d.id = ANY(:ids) AND d.status = (SELECT '{running}')
    RETURNING d.id, v.token, d.result_awaited
), told AS (
    {told}
)"""
_NOT_DONE = "\n      AND id <> ALL(:ids)"
# ``told`` notifies the awaited successes (see _tasks_results); the final filter reads
# it, as a CTE no query reads never runs.
# One row at least (the LEFT JOIN); the written pairs ride on the first row only (on
# every row they would be sent and decoded once per claimed task).
_DONE_RESULT = """
SELECT CASE WHEN row_number() OVER () = 1 THEN (SELECT array_agg(id) FROM done) END
           AS done_ids,
       CASE WHEN row_number() OVER () = 1 THEN (SELECT array_agg(token) FROM done) END
           AS done_tokens,
       c.*
FROM (SELECT 1) AS one LEFT JOIN claimed AS c ON true
WHERE (SELECT count(*) FROM told) >= 0
"""

# A lane with a cluster-wide limit claims at most the room left under it: the lane's
# running rows, less those this statement rescues or writes as succeeded. The count is
# only as new as the statement's snapshot, and a lock taken within the statement cannot
# make it newer. So every capped claim also rewrites the lane's row in the lane table
# (``bump``, an upsert that waits for the claim holding the row, or creates it) and
# then reads the version of that row its own snapshot sees: when another transaction
# had rewritten that version (its ``xmax`` is set, and not by this one) or the snapshot
# sees none, a claim this snapshot misses may have committed, and the statement claims
# nothing (``fresh`` false; the caller runs it again with a new snapshot). Otherwise
# every capped claim before this one is in the snapshot; so it is when this statement
# created the row (no capped claim ran before). ``fresh`` is read per row of ``bump``,
# so only once the row lock is held.
_GATE = """, bump AS (
    INSERT INTO {lanes} AS b (lane, paused, paused_at, updated_at)
    VALUES (:lane, false, NULL, now())
    ON CONFLICT (lane) DO UPDATE SET paused = b.paused
    RETURNING b.lane, b.xmax = '0'::xid AS created
), fresh AS (
    SELECT b.created OR COALESCE((
        SELECT l.xmax = '0'::xid OR l.xmax = pg_current_xact_id()::xid
        FROM {lanes} AS l WHERE l.lane = b.lane
    ), false) AS fresh
    FROM bump AS b
)"""
_CLUSTER_LIMIT = """LEAST({limit}, CASE WHEN (SELECT fresh FROM fresh) THEN GREATEST(0, :cap - (
        SELECT count(*) FROM {t} WHERE lane = :lane AND status = '{running}'{counted}
    ) + (SELECT count(*) FROM exp)) ELSE 0 END)"""
_COUNTED_DONE = " AND id NOT IN (SELECT id FROM done)"
_FRESH = "(SELECT fresh FROM fresh) AS fresh,\n       "
_GATED_RESULT = """
SELECT (SELECT fresh FROM fresh) AS fresh, c.*
FROM (SELECT 1) AS one LEFT JOIN claimed AS c ON true
"""


def _succeed_and_claim_sql(done: str, claim: str, *, capped: bool = False) -> str:
    """``done`` in front of ``claim``, whose final UPDATE becomes the ``claimed`` CTE
    (``capped``: with the ``fresh`` column before the claimed rows)."""
    ctes, _, update = claim.strip().removeprefix("WITH ").partition("\nUPDATE ")
    result = _DONE_RESULT.replace("c.*", _FRESH + "c.*") if capped else _DONE_RESULT
    return f"{done}, {ctes}, claimed AS (\nUPDATE {update}\n){result}"


def _gated_claim_sql(claim: str) -> str:
    """``claim``'s final UPDATE as the ``claimed`` CTE, after the ``fresh`` column."""
    ctes, _, update = claim.strip().partition("\nUPDATE ")
    return f"{ctes}, claimed AS (\nUPDATE {update}\n){_GATED_RESULT}"


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
            pending=TaskStatus.PENDING.value,
            cancelled=TaskStatus.CANCELLED.value,
            failed=TaskStatus.FAILED.value,
            reason_cancelled=TaskFailureReason.CANCELLED.value,
            reason_expired=TaskFailureReason.LEASE_EXPIRED.value,
            returning=returning_columns(table, dialect, "t"),
        )
        self._done_sql = _DONE.format(
            **names, succeeded=TaskStatus.SUCCEEDED.value, told=notified_endings_sql("done")
        )
        self._gate = _GATE.format(lanes=quote(lanes))
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
        # As in ``_DONE``: the ids as an array too, and the status against a scalar
        # subquery, so the plan reaches the rows by primary key instead of hashing every
        # running row (as a plan made from stale statistics did).
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
            sa.text(f"({notified_endings_sql('done')}) AS told")
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

    def _pick(self, limit_sql: str, capped: bool, fair: bool, counted: str, late: bool) -> str:
        cand_limit = self._cand_limit(limit_sql, capped, counted)
        if fair:
            return _FAIR_PICK.format(
                t=self._table_sql,
                running=TaskStatus.RUNNING.value,
                counted=counted,
                cand_limit=cand_limit,
            )
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
        rows start with ``fresh`` (see ``_GATE``), then the claimed columns, and come
        as one all-null row past ``fresh`` when it claims and rescues nothing.
        ``fair`` (with ``capped``): a partitioned lane's, see ``_FAIR_PICK`` (the
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
                .bindparams(
                    *_claim_params(key, capped, fair),
                    sa.bindparam("ids", type_=postgresql.ARRAY(sa.BigInteger())),
                    sa.bindparam("tokens", type_=postgresql.ARRAY(sa.Text())),
                    sa.bindparam("results", type_=postgresql.ARRAY(sa.Text())),
                    sa.bindparam("steps", type_=postgresql.ARRAY(sa.Text())),
                )
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
