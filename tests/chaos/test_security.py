"""Suite 8, security: bound SQL parameters, temp dirs inside the root, no leaked secrets,
and no mutation through the admin API without the token."""

from __future__ import annotations

import ast
import asyncio
import json
import logging
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from aster_forge import TaskStatus
from aster_forge.runtime import (
    HealthCheckOptions,
    HealthCheckRegistry,
    HealthCheckScope,
    HealthComponentReport,
    ShutdownReport,
    create_runtime_temp_dir_guard,
)
from aster_forge.runtime._phases import ShutdownCoordinator, log_shutdown_report
from aster_forge.runtime.errors import RuntimeTempDirScopeError
from aster_forge.tasks import TaskLease, TaskTempDirs, sweep_task_temp_dirs
from aster_forge.tasks._records import TaskFailureReason
from aster_forge.testing import InMemoryTaskStore
from aster_forge.web import AdminSources, admin_app, create_app

from ._fuzz import fuzz
from ._product import ChaosState, Kind, execution_config, new_task
from .report import ScenarioResult, record

SRC = Path(__file__).resolve().parents[2] / "src" / "aster_forge"
SECRET = "pa55w0rd-LEAK-canary-7f3a"

# -- SQL built only with bound parameters ---------------------------------------------------

SQL_SINKS = {"text", "execute", "exec_driver_sql", "executemany", "fetch", "fetchrow", "fetchval"}
SQL_WORDS = ("SELECT ", "INSERT INTO", "UPDATE ", "DELETE FROM", " WHERE ", "PRAGMA ", "NOTIFY ")


def _constant_name(node: ast.expr) -> bool:
    # Interpolating a module constant (UPPER_CASE: a table name, a fixed timeout) is
    # not injection: its value is fixed when the module is written.
    return isinstance(node, ast.Name) and node.id.isupper()


def _dynamic_sql(node: ast.expr) -> str | None:
    """Why ``node`` builds SQL text from runtime values, or ``None`` when it does not."""
    if isinstance(node, ast.JoinedStr):
        bad = [
            v.value
            for v in node.values
            if isinstance(v, ast.FormattedValue) and not _constant_name(v.value)
        ]
        return "f-string" if bad else None
    if (
        isinstance(node, ast.BinOp)
        and isinstance(node.op, ast.Mod)
        and isinstance(node.left, ast.Constant)
        and isinstance(node.left.value, str)
    ):
        return "%-formatting"
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        sides = (node.left, node.right)
        if any(isinstance(s, ast.Constant) and isinstance(s.value, str) for s in sides) and any(
            not isinstance(s, ast.Constant) and not _constant_name(s) for s in sides
        ):
            return "string concatenation"
        return _dynamic_sql(node.left) or _dynamic_sql(node.right)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in {"format", "format_map", "join"}
        and isinstance(node.func.value, ast.Constant)
    ):
        return f"str.{node.func.attr}"
    return None


def _sql_violations(source: str, filename: str) -> list[str]:
    tree = ast.parse(source, filename)
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in SQL_SINKS:
                why = _dynamic_sql(node.args[0])
                if why:
                    found.append(f"{filename}:{node.lineno}: {name}() gets SQL built by {why}")
        if isinstance(node, ast.JoinedStr | ast.BinOp) and _dynamic_sql(node):
            literal = "".join(
                part.value
                for part in ast.walk(node)
                if isinstance(part, ast.Constant) and isinstance(part.value, str)
            )
            if any(word in literal.upper() for word in SQL_WORDS) and literal.strip().upper()[
                :6
            ] in {"SELECT", "INSERT", "UPDATE", "DELETE", "PRAGMA", "NOTIFY"}:
                found.append(f"{filename}:{node.lineno}: SQL-looking text built dynamically")
    return found


def test_sql_is_built_only_with_bound_parameters() -> None:
    violations: list[str] = []
    files = sorted(SRC.rglob("*.py"))
    assert len(files) > 50
    for path in files:
        violations += _sql_violations(path.read_text(encoding="utf-8"), str(path.relative_to(SRC)))
    assert violations == []


@pytest.mark.parametrize(
    "snippet",
    [
        'conn.execute(sa.text(f"SELECT * FROM t WHERE id = {task_id}"))',
        'conn.execute(text("DELETE FROM t WHERE id = %s" % task_id))',
        'conn.exec_driver_sql("UPDATE t SET a = {}".format(value))',
        'conn.execute(sa.text("SELECT * FROM t WHERE name = \'" + name + "\'"))',
        'query = f"SELECT * FROM t WHERE lane = {lane}"',
    ],
)
def test_the_sql_checker_catches_string_built_sql(snippet: str) -> None:
    assert _sql_violations(snippet, "<snippet>")


def test_the_sql_checker_accepts_bound_parameters_and_constants() -> None:
    ok = (
        'conn.execute(sa.text("SELECT * FROM t WHERE id = :id"), {"id": task_id})\n'
        'conn.execute(sa.text(f"INSERT INTO {RUNTIME_LEASES_TABLE} VALUES (:a)"))\n'
        "conn.execute(sa.select(t).where(t.c.id == task_id))\n"
    )
    assert _sql_violations(ok, "<snippet>") == []


# -- temp dirs never escape the root --------------------------------------------------------


def _inside(path: Path, root: Path) -> bool:
    return path.resolve().is_relative_to(root.resolve())


@fuzz()
@given(scope=st.text(max_size=30) | st.sampled_from(["..", "../x", "/abs", "a/../..", "ok"]))
async def test_runtime_temp_dirs_stay_under_the_root(tmp_path: Path, scope: str) -> None:
    root = tmp_path / "root"
    try:
        guard = create_runtime_temp_dir_guard(root, scope, "fuzz")
    except RuntimeTempDirScopeError:
        return
    async with guard:
        path = guard.path
        assert _inside(path, root / "_runtime")
        assert path.parent.name == scope and path.is_dir()
    assert not path.exists()


@fuzz()
@given(
    task_id=st.integers(-(2**63), 2**63 - 1),
    token=st.text(min_size=1, max_size=100)
    | st.sampled_from(["../../etc", "/", "..", "a/b", "\x00"]),
)
async def test_task_temp_dirs_stay_under_the_root(tmp_path: Path, task_id: int, token: str) -> None:
    dirs = TaskTempDirs(tmp_path / "root")
    lease = TaskLease(task_id, token, datetime(2030, 1, 1, tzinfo=UTC))
    path = dirs.path_for(lease)
    assert path.parent == dirs.root and _inside(path, dirs.root)
    created = await dirs.create_task_temp_dir(lease)
    assert created == path and path.is_dir()
    await dirs.remove_task_temp_dir(lease)
    assert not path.exists()


async def test_temp_dir_sweep_never_follows_links_out_of_the_root(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.txt").write_text("keep me")
    dirs = TaskTempDirs(tmp_path / "root")
    lease = TaskLease(7, "tok", datetime(2030, 1, 1, tzinfo=UTC))
    await dirs.create_task_temp_dir(lease)
    os.symlink(outside, dirs.root / "8-linked", target_is_directory=True)
    removed = await sweep_task_temp_dirs(tmp_path / "root", [])
    assert removed == [dirs.path_for(lease)]
    assert (outside / "precious.txt").read_text() == "keep me"


# -- reports never carry exception messages --------------------------------------------------


async def test_health_reports_never_contain_exception_messages() -> None:
    async def leaky() -> HealthComponentReport:
        raise RuntimeError(f"connect failed: postgres://admin:{SECRET}@db")

    async def slow() -> HealthComponentReport:
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    registry = HealthCheckRegistry(
        checks={
            "database": (HealthCheckOptions.required(), leaky),
            "cache": (HealthCheckOptions.optional(), leaky),
            "slow": (HealthCheckOptions.optional(), slow),
        },
        default_timeout=timedelta(milliseconds=50),
    )
    for scope in HealthCheckScope:
        report = await registry.run_scope(scope)
        rendered = [report.to_json(), report.summary(), report.details(), report.issue_details()]
        rendered += [c.describe() for c in report.components]
        assert all(SECRET not in text for text in rendered)
    await registry.aclose()
    app = create_app(health=registry)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
        for path in ("/livez", "/readyz", "/diagnostics", "/readyz?verbose=1"):
            response = await client.get(path)
            assert SECRET not in response.text, path


async def test_shutdown_reports_never_contain_exception_messages(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def leaky() -> None:
        raise ConnectionError(f"token={SECRET}")

    async def hangs() -> None:
        await asyncio.sleep(3600)

    coordinator = ShutdownCoordinator(grace=timedelta(milliseconds=50))
    coordinator.phase("queue", timedelta(seconds=5), leaky)
    coordinator.phase("workers", timedelta(milliseconds=50), hangs)
    report: ShutdownReport = await coordinator.run()
    assert report.has_failures()
    texts = [report.summary(), *(str(p.status) for p in report.phases)]
    texts += [p.status.message or "" for p in report.phases]
    assert all(SECRET not in text for text in texts)
    with caplog.at_level(logging.INFO):
        log_shutdown_report(report)
    messages = [r.getMessage() for r in caplog.records]
    assert messages and all(SECRET not in m for m in messages)


@pytest.mark.parametrize("redact", [True, False], ids=["redacted", "kept"])
async def test_task_failures_store_the_exception_text_only_when_not_redacted(
    redact: bool, caplog: pytest.LogCaptureFixture
) -> None:
    # The exception's text is the product's words: kept (bounded) by default, and with
    # redact_errors=True neither stored nor logged; the payload is never logged either way.
    from aster_forge.tasks import ClaimedTaskExecution, SharedTaskHeartbeat

    state = ChaosState()

    async def leak(*_: object) -> None:
        raise ValueError(f"api key {SECRET}")

    state.hook = leak
    store = InMemoryTaskStore()
    created = await store.enqueue(new_task(Kind.NOOP, 1, max_attempts=1))
    [claimed] = await store.claim_due_for_lane("chaos-fast", 1, "w", timedelta(seconds=30))
    config = execution_config(state, redact_errors=redact)
    heartbeat = SharedTaskHeartbeat(store, config.clock, config.lease_ttl)
    report = await ClaimedTaskExecution(store, claimed, config, heartbeat=heartbeat).run()
    await heartbeat.join()
    row = await store.get_task(created.record.id)
    assert row is not None and row.status is TaskStatus.FAILED
    assert row.failure_reason is TaskFailureReason.PRODUCT_ERROR
    assert "ValueError" in (row.last_error or "")
    stored = [row.last_error or "", row.last_traceback or "", report.error or "", caplog.text]
    if redact:
        assert not any(SECRET in text for text in stored)
    else:
        assert SECRET in (row.last_error or "") and SECRET in caplog.text
    assert claimed.payload_json not in caplog.text


# -- the admin API refuses mutation without the token ------------------------------------------


async def test_admin_api_and_dashboard_refuse_mutation_without_the_token() -> None:
    store = InMemoryTaskStore()
    pending = (await store.enqueue(new_task(Kind.NOOP, 1))).record.id
    token = "t0ken-" + SECRET
    app = admin_app(AdminSources(task_store=store), admin_token=token)
    transport = httpx.ASGITransport(app=app)
    attempts = [
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": f"Basic {token}"},
        {"Authorization": f"Bearer {token}x"},
        {"Authorization": "Bearer"},
        {"Cookie": f"token={token}"},
    ]
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
        for headers in attempts:
            for action in ("cancel", "retry"):
                response = await client.post(f"/api/tasks/{pending}/{action}", headers=headers)
                assert response.status_code == 401, (headers, response.text)
                assert response.headers.get("www-authenticate", "").lower().startswith("bearer")
                assert token not in response.text
            listing = await client.get("/api/tasks", headers=headers)
            assert listing.status_code == 401
        row = await store.get_task(pending)
        assert row is not None and row.status is TaskStatus.PENDING
        ok = await client.post(
            f"/api/tasks/{pending}/cancel", headers={"Authorization": f"Bearer {token}"}
        )
        assert ok.status_code == 200 and json.loads(ok.text)["outcome"] == "cancelled"
        page = await client.get("/")
        assert page.status_code == 200 and token not in page.text
    record(
        ScenarioResult(
            scenario="security",
            tasks=1,
            faults="SQL AST scan, path fuzzing, leaked-secret canaries, 12 unauthorised calls",
            lost=0,
            duplicated=0,
            stuck=0,
            result="pass",
        )
    )
