"""The CLI on a product database: plain URLs, only the reference tables, any task table."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import sys
from collections.abc import Coroutine
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
import sqlalchemy as sa
from click.testing import CliRunner, Result
from sqlalchemy.ext.asyncio import create_async_engine

from aster_forge.cli import cli
from aster_forge.db import BackgroundTaskDbStore, background_tasks_table
from aster_forge.tasks import NewTask, TaskDependency, TaskLease

T = TypeVar("T")

REFERENCE_TABLES = {
    "background_tasks",
    "background_tasks_deps",
    "background_tasks_lanes",
    "background_tasks_partition_rates",
    "runtime_leases",
    "scheduled_tasks",
}


def invoke(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False, env=env)


def on_own_loop(coro: Coroutine[Any, Any, T]) -> T:
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


async def table_names(url: str) -> set[str]:
    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn:
            return set(await conn.run_sync(lambda sync: sa.inspect(sync).get_table_names()))
    finally:
        await engine.dispose()


async def one_finished_task(url: str, table: str) -> int:
    """Enqueue, claim and succeed one task on ``table``: every timestamp is set."""
    engine = create_async_engine(url)
    try:
        store = BackgroundTaskDbStore(engine, table=background_tasks_table(sa.MetaData(), table))
        enqueued = await store.enqueue(NewTask(kind="invoice", lane="billing"))
        (claimed,) = await store.claim_due_for_lane("billing", 1, "cli-test", timedelta(minutes=1))
        assert claimed.processing_token is not None and claimed.lease_expires_at is not None
        lease = TaskLease(
            task_id=claimed.id,
            processing_token=claimed.processing_token,
            expires_at=claimed.lease_expires_at,
        )
        assert await store.mark_task_succeeded(lease, '{"ok":true}', None)
        return enqueued.record.id
    finally:
        await engine.dispose()


def _plain(url: str) -> str:
    return url.replace("postgresql+asyncpg://", "postgres://", 1)


def test_migrate_creates_only_the_reference_tables_from_a_plain_url(
    demo_postgres_url: str,
) -> None:
    result = invoke("migrate", "--database-url", _plain(demo_postgres_url))
    assert result.exit_code == 0, result.stderr
    assert on_own_loop(table_names(demo_postgres_url)) == REFERENCE_TABLES
    assert "demo_audit_events" not in result.stdout


def test_tasks_commands_use_the_table_option_and_its_env_var(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'shop.db'}"  # plain sqlite://: aiosqlite is implied
    assert invoke("migrate", "--database-url", url, "--table", "shop_tasks").exit_code == 0
    assert on_own_loop(table_names(url.replace("sqlite:", "sqlite+aiosqlite:"))) == {
        "shop_tasks",
        "shop_tasks_deps",
        "shop_tasks_lanes",
        "shop_tasks_partition_rates",
        "runtime_leases",
        "scheduled_tasks",
    }
    task_id = on_own_loop(
        one_finished_task(url.replace("sqlite:", "sqlite+aiosqlite:"), "shop_tasks")
    )

    listed = invoke("tasks", "list", "--database-url", url, "--table", "shop_tasks")
    assert listed.exit_code == 0 and "invoice" in listed.stdout
    env = {"ASTER_FORGE_DATABASE_URL": url, "ASTER_FORGE_TASKS_TABLE": "shop_tasks"}
    shown = invoke("tasks", "show", str(task_id), env=env)
    assert shown.exit_code == 0, shown.stderr
    lines = {line.split(":", 1)[0].strip(): line for line in shown.stdout.splitlines()}
    for key in ("created_at", "started_at", "finished_at"):
        assert key in lines and "20" in lines[key], shown.stdout

    missing = invoke("tasks", "list", "--database-url", url)  # default: background_tasks
    assert missing.exit_code == 2
    assert (
        missing.stderr.strip().splitlines() == [missing.stderr.strip()]
        and "no table 'background_tasks'" in missing.stderr
    )


@pytest.mark.parametrize("name", ["", " ", "a" * 64, "bad\x00name"])
def test_a_bad_table_name_is_a_usage_error(tmp_path: Path, name: str) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'x.db'}"
    result = invoke("tasks", "list", "--database-url", url, "--table", name)
    assert result.exit_code == 2
    assert result.stderr.startswith("error: ") and len(result.stderr.strip().splitlines()) == 1
    assert "not a table name" in result.stderr


def test_a_missing_driver_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "asyncpg", None)  # what an uninstalled module looks like
    result = invoke("tasks", "list", "--database-url", "postgresql://u:secret@127.0.0.1/x")
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert "pip install 'aster-forge[postgres]'" in line and "secret" not in line


async def a_chain(url: str, table: str) -> list[int]:
    """fetch -> parse -> store on ``table``, fetch claimed (running)."""
    engine = create_async_engine(url)
    try:
        store = BackgroundTaskDbStore(engine, table=background_tasks_table(sa.MetaData(), table))
        written = await store.enqueue_workflow(
            [NewTask("fetch", "etl"), NewTask("parse", "etl"), NewTask("store", "etl")],
            [TaskDependency(task=1, on=0), TaskDependency(task=2, on=1, run_anyway=True)],
        )
        (claimed,) = await store.claim_due_for_lane("etl", 5, "cli-test", timedelta(minutes=1))
        assert claimed.id == written[0].task_id
        return [result.task_id for result in written]
    finally:
        await engine.dispose()


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_tasks_workflow_shows_and_cancels_the_graph(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if backend == "sqlite":
        url = f"sqlite:///{tmp_path / 'etl.db'}"
        driver_url = url.replace("sqlite:", "sqlite+aiosqlite:")
    else:
        driver_url = str(request.getfixturevalue("demo_postgres_url"))
        url = _plain(driver_url)
    assert invoke("migrate", "--database-url", url, "--table", "etl_tasks").exit_code == 0
    fetch, parse, store = on_own_loop(a_chain(driver_url, "etl_tasks"))
    base = ("--database-url", url, "--table", "etl_tasks")

    shown = invoke("tasks", "workflow", str(parse), *base, "--json")
    assert shown.exit_code == 0, shown.stderr
    graph = json.loads(shown.stdout)
    assert [(n["id"], n["status"], n["waiting"]) for n in graph["nodes"]] == [
        (fetch, "running", False),
        (parse, "pending", True),
        (store, "pending", True),
    ]
    assert graph["edges"] == [
        {"from": fetch, "to": parse, "run_anyway": False},
        {"from": parse, "to": store, "run_anyway": True},
    ]
    table = invoke("tasks", "workflow", str(parse), *base)
    assert table.exit_code == 0, table.stderr
    row = next(line for line in table.stdout.splitlines() if f"{parse}*" in line)
    assert "parse" in row and "waiting" in row and str(fetch) in row
    assert f"{parse} (anyway)" in table.stdout
    nearest = json.loads(
        invoke("tasks", "workflow", str(fetch), *base, "--json", "--limit", "2").stdout
    )
    assert [n["id"] for n in nearest["nodes"]] == [fetch, parse] and nearest["truncated"]

    cancelled = json.loads(
        invoke("tasks", "workflow", str(store), *base, "--cancel", "--json").stdout
    )
    assert cancelled["cancelled"] == [parse, store] and cancelled["cancel_requested"] == [fetch]
    assert [n["status"] for n in cancelled["nodes"]] == ["running", "cancelled", "cancelled"]

    missing = invoke("tasks", "workflow", "987654", *base)
    assert missing.exit_code != 0 and "task 987654 not found" in missing.stderr
