"""PostgreSQL claims: small limits are literals, so the server keeps one plan per limit.

The claim, the fenced successes and the renewal find their rows through the primary key:
their ids are also given as an array, so the planner does not join them against a scan
of the whole table (the claim's plan did that for a table of a few thousand rows) or of
every running task (the successes and the renewal, with many workers).

With the limit a parameter PostgreSQL re-plans the claim on every call (its generic
plan assumes a tenth of the lane is taken); planning cost about half the statement's
server time. Up to ``LITERAL_LIMITS`` each limit has its own statement, whose cached
generic plan is used; larger limits share the parameterized statement. Both claim
exactly what was asked.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from aster_forge.db import BackgroundTaskDbStore
from aster_forge.db._postgres import LITERAL_LIMITS, claim_params, success_params
from aster_forge.tasks import NewTask
from aster_forge.tasks._records import TaskCompletion

from ._leases import lease_of
from ._pg_driver_support import pg_engine

pytestmark = pytest.mark.postgres

_TTL = timedelta(minutes=10)
_PATHS = [pytest.param(True, id="driver"), pytest.param(False, id="sqlalchemy")]


async def _plans(engine: AsyncEngine, limit: str) -> list[tuple[int, int]]:
    """``(generic, custom)`` plan counts of this session's claims with ``limit``."""
    await asyncio.sleep(0)  # the store hands its held connection back to the pool
    async with engine.connect() as conn:
        rows = await conn.execute(
            sa.text(
                "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
                "WHERE statement LIKE '%FOR UPDATE SKIP LOCKED%' AND statement LIKE :limit"
            ),
            {"limit": f"%LIMIT {limit}%"},
        )
        return [(int(row[0]), int(row[1])) for row in rows]


def _store(engine: AsyncEngine, *, driver: bool) -> BackgroundTaskDbStore:
    store = BackgroundTaskDbStore(engine, notify=False)
    assert store._pg_run is not None
    store._pg_run.driver = driver
    return store


@pytest.mark.parametrize("driver", _PATHS)
async def test_a_small_limit_reuses_a_cached_plan_and_claims_exactly(
    postgres_url: str, driver: bool
) -> None:
    # One pooled connection: the plan counts read below are the store's session's.
    async with pg_engine(postgres_url, pool_size=1, max_overflow=0) as engine:
        store = _store(engine, driver=driver)
        await store.enqueue_many([NewTask("k", "l") for _ in range(300)])
        for _ in range(8):
            assert len(await store.claim_due_for_lane("l", 3, "w", _TTL)) == 3
        plans = await _plans(engine, "3 ")
        assert plans and sum(generic for generic, _ in plans) >= 1, plans

        big = LITERAL_LIMITS + 6
        claimed = await store.claim_due_for_lane("l", big, "w", _TTL)
        assert len(claimed) == big, "a limit above the literal ones is still exact"
        assert not await _plans(engine, f"{big} "), "larger limits share one statement"
        edge = await store.claim_due_for_lane("l", LITERAL_LIMITS, "w", _TTL)
        assert len(edge) == LITERAL_LIMITS

        # The success-and-claim takes the same limits.
        done = [TaskCompletion(lease_of(record), None, None) for record in claimed[:5]]
        written, refilled = await store.mark_tasks_succeeded_and_claim(done, "l", 5, "w", _TTL)
        assert list(written) == [True] * 5 and len(refilled) == 5
        done = [TaskCompletion(lease_of(record), None, None) for record in claimed[5:]]
        left = 300 - 8 * 3 - big - LITERAL_LIMITS - 5
        written, refilled = await store.mark_tasks_succeeded_and_claim(done, "l", big, "w", _TTL)
        assert list(written) == [True] * (big - 5)
        assert len(refilled) == min(big, left)


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every node of an ``EXPLAIN (FORMAT JSON)`` plan."""
    yield plan
    for child in plan.get("Plans", ()):
        yield from _nodes(child)


async def _literals(driver: Any, sql: str, arguments: list[Any]) -> list[str]:
    """``arguments`` as SQL literals of the types ``sql`` declares (for ``EXECUTE``)."""
    prepared = await driver.prepare(sql)
    literals = []
    for parameter, argument in zip(prepared.get_parameters(), arguments, strict=True):
        type_name = await driver.fetchval("SELECT format_type($1, NULL)", parameter.oid)
        literals.append(
            await driver.fetchval(f"SELECT quote_nullable(CAST($1 AS {type_name}))", argument)
        )
    return literals


def _bounded(node: dict[str, Any]) -> bool:
    """Whether a scan finds its rows by id or by lane (not all rows, or all running ones).

    Or, through the waiting index, only the tasks that came due while still flagged
    waiting (the worker's stager keeps those few).
    """
    condition = node.get("Index Cond", "") + node.get("Recheck Cond", "")
    waiting = node.get("Index Name") == "ix_background_tasks_waiting"
    # An index-only scan names the column bare: ``(lane = ($1)::text)``.
    by_lane = "(lane)" in condition or "(lane = " in condition
    return "id = " in condition or by_lane or (waiting and "run_at <=" in condition)


def _assert_bounded_scans(name: str, plan: Any) -> None:
    """Every read of the task table in ``plan`` (EXPLAIN JSON) finds rows by id or lane."""
    scans = [
        node
        for node in _nodes(plan[0]["Plan"])
        if node.get("Relation Name") == "background_tasks" and node["Node Type"] != "ModifyTable"
    ]
    assert scans and all(_bounded(node) for node in scans), (name, scans)


@pytest.mark.parametrize(
    "analyzed_while_running",
    [
        pytest.param(True, id="statistics-current"),
        # Statistics read while nothing ran (autovacuum analyzes after a tenth of the
        # table changed): the planner expects almost no running rows, and a scan of
        # every running one looked cheapest.
        pytest.param(False, id="statistics-stale"),
        # A new table autovacuum has not analyzed yet: the planner's defaults.
        pytest.param(None, id="statistics-none"),
    ],
)
async def test_the_hot_statements_find_their_rows_by_id_or_lane(
    postgres_url: str, analyzed_while_running: bool | None
) -> None:
    async with pg_engine(postgres_url) as engine:
        store = _store(engine, driver=True)
        runner = store._pg_run
        assert runner is not None
        await store.enqueue_many([NewTask("k", "l") for _ in range(5000)])
        if analyzed_while_running is False:
            async with engine.begin() as conn:
                await conn.execute(sa.text("ANALYZE background_tasks"))
        # Another worker's 2,000 running tasks: a write must not read them all.
        await store.claim_due_for_lane("l", 2000, "other", _TTL)
        if analyzed_while_running:
            async with engine.begin() as conn:
                await conn.execute(sa.text("ANALYZE background_tasks"))
        claimed = await store.claim_due_for_lane("l", 50, "w", _TTL)
        done = [TaskCompletion(lease_of(record), None, None) for record in claimed]
        claim = claim_params("l", 50, "w", _TTL)
        statements = {
            "claim": (
                runner._for_limit(runner._claims, runner._statements.claim, 50, False),
                claim,
            ),
            "success and claim": (
                runner._for_limit(
                    runner._succeed_and_claims, runner._statements.succeed_and_claim, 50, False
                ),
                {**success_params(done), **claim},
            ),
            # Under a cluster limit: the running count reads the lane's rows only.
            "capped claim": (
                runner._for_limit(runner._claims, runner._statements.claim, 50, True),
                {**claim, "cap": 3000},
            ),
            "capped success and claim": (
                runner._for_limit(
                    runner._succeed_and_claims, runner._statements.succeed_and_claim, 50, True
                ),
                {**success_params(done), **claim, "cap": 3000},
            ),
            "success": (runner._succeed_many, success_params(done)),
            "renewal": (
                runner._renew_many,
                {
                    "ids": [c.lease.task_id for c in done],
                    "tokens": [c.lease.processing_token for c in done],
                    "ttl": _TTL,
                },
            ),
        }
        async with engine.connect() as conn:
            driver: Any = (await conn.get_raw_connection()).driver_connection
            # The plan a busy worker runs: the statement's cached generic plan, which
            # PREPARE and EXECUTE show. An EXPLAIN sent with bound parameters shows the
            # custom plan of the first executions instead (the next test reads that
            # one); for this small table with no statistics it is a sequential scan,
            # which is cheaper there.
            await driver.execute("SET plan_cache_mode = force_generic_plan")
            for index, (name, ((_, statement), params)) in enumerate(statements.items()):
                literals = await _literals(driver, statement.sql, statement.arguments(params))
                await driver.execute(f"PREPARE plan_{index} AS {statement.sql}")
                explained = await driver.fetchval(
                    f"EXPLAIN (FORMAT JSON) EXECUTE plan_{index}({', '.join(literals)})"
                )
                # SQLAlchemy's connection decodes json itself; a bare one returns text.
                plan = json.loads(explained) if isinstance(explained, str) else explained
                nodes = list(_nodes(plan[0]["Plan"]))
                scans = [
                    node
                    for node in nodes
                    if node.get("Relation Name") == "background_tasks"
                    and node["Node Type"] != "ModifyTable"
                ]
                unbounded = [
                    (n["Node Type"], n.get("Index Name"), n.get("Index Cond"), n.get("Filter"))
                    for n in scans
                    if not _bounded(n)
                ]
                assert scans and not unbounded, (name, unbounded)


async def _due_index_blocks(engine: AsyncEngine, runner: Any) -> int:
    """Index blocks a claim of 10 reads from the due index (run, then rolled back)."""
    statement = runner._for_limit(runner._claims, runner._statements.claim, 10, False)[1]
    arguments = statement.arguments(claim_params("l", 10, "w", _TTL))
    async with engine.connect() as conn:
        driver: Any = (await conn.get_raw_connection()).driver_connection
        literals = ", ".join(await _literals(driver, statement.sql, arguments))
        await driver.execute("BEGIN")
        try:
            await driver.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            await driver.execute(f"PREPARE crowded AS {statement.sql}")
            explained = await driver.fetchval(
                f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE crowded({literals})"
            )
            await driver.execute("DEALLOCATE crowded")
        finally:
            await driver.execute("ROLLBACK")  # the claim ran: undo it
    plan = json.loads(explained) if isinstance(explained, str) else explained
    scans = [n for n in _nodes(plan[0]["Plan"]) if n.get("Index Name") == "ix_background_tasks_due"]
    assert scans, plan
    return sum(n["Shared Hit Blocks"] + n["Shared Read Blocks"] for n in scans)


async def test_tasks_due_later_cost_the_claim_nothing(postgres_url: str) -> None:
    # 3,000 tasks due in an hour at a higher priority than the 20 due now: ordered by
    # priority, the due index would hold them in front of every due task.
    async with pg_engine(postgres_url) as engine:
        store = _store(engine, driver=True)
        runner = store._pg_run
        assert runner is not None
        await store.enqueue_many([NewTask("k", "l", priority=9, delay=timedelta(hours=1))] * 3000)
        await store.enqueue_many([NewTask("k", "l") for _ in range(20)])
        async with engine.begin() as conn:
            await conn.execute(sa.text("ANALYZE background_tasks"))
        flagged = await _due_index_blocks(engine, runner)
        # The same table with every flag cleared: the later tasks back in the due index.
        async with engine.begin() as conn:
            await conn.execute(sa.text("UPDATE background_tasks SET waiting = false"))
            await conn.execute(sa.text("ANALYZE background_tasks"))
        unflagged = await _due_index_blocks(engine, runner)
        assert flagged <= 3 < unflagged, (flagged, unflagged)


async def test_the_batched_writes_read_their_rows_by_id_beside_many_running(
    postgres_url: str,
) -> None:
    # Statistics read before 2,000 tasks ran, the plan as the driver runs it (bound
    # parameters): a plan that hashed every running row for each batched success grew
    # slower with every running task; one through the ids does not. The renewal likewise.
    async with pg_engine(postgres_url) as engine:
        store = _store(engine, driver=True)
        runner = store._pg_run
        assert runner is not None
        await store.enqueue_many([NewTask("k", "l") for _ in range(20000)])
        async with engine.begin() as conn:
            await conn.execute(sa.text("ANALYZE background_tasks"))
        await store.claim_due_for_lane("l", 2000, "other", _TTL)
        claimed = await store.claim_due_for_lane("l", 10, "w", _TTL)
        done = [TaskCompletion(lease_of(record), None, None) for record in claimed]
        renewal: dict[str, Any] = {
            "ids": [c.lease.task_id for c in done],
            "tokens": [c.lease.processing_token for c in done],
            "ttl": _TTL,
        }
        statements: dict[str, tuple[Any, dict[str, Any]]] = {
            "success": (runner._succeed_many[1], success_params(done)),
            "renewal": (runner._renew_many[1], renewal),
        }
        async with engine.connect() as conn:
            driver: Any = (await conn.get_raw_connection()).driver_connection
            await driver.execute("SET plan_cache_mode = force_generic_plan")
            for name, (statement, params) in statements.items():
                prepared = await driver.prepare(f"EXPLAIN (FORMAT JSON) {statement.sql}")
                explained = await prepared.fetchval(*statement.arguments(params))
                plan = json.loads(explained) if isinstance(explained, str) else explained
                _assert_bounded_scans(name, plan)
