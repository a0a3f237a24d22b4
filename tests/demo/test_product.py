"""The example product: its declarations, its component graph and a real run."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from aster_forge.demo import (
    LANE_LIMITS,
    RUNTIME_TASKS,
    DemoApp,
    DemoLane,
    DemoRuntimeTask,
    DemoSchedule,
    DemoSettings,
    DemoTaskKind,
    build_task_registry,
    sample_tasks,
)
from aster_forge.runtime import (
    HealthCheckScope,
    HealthComponentDetailValue,
    HealthStatus,
    RuntimeComponentKind,
    StartupPhaseFailurePolicy,
)
from aster_forge.tasks import TaskStatus, TaskStepStatus, parse_task_steps_json


def test_registry_and_catalog_are_consistent() -> None:
    registry = build_task_registry()
    assert set(registry.kinds()) == set(DemoTaskKind)
    assert set(registry.lanes()) == set(DemoLane) == set(LANE_LIMITS)
    assert LANE_LIMITS == {DemoLane.MEDIA: 2, DemoLane.MAINTENANCE: 1, DemoLane.FALLBACK: 4}
    RUNTIME_TASKS.check()
    for kind in DemoRuntimeTask:
        assert DemoRuntimeTask.from_wire_value(kind.as_str()) is kind
    assert DemoRuntimeTask.from_wire_value("removed-maintenance-task") is None


def test_sample_tasks_decode_with_their_specs() -> None:
    registry = build_task_registry()
    tasks = sample_tasks(registry, batch="b")
    assert len({t.dedupe_key_text for t in tasks}) == len(tasks)
    for task in tasks:
        kind = DemoTaskKind(task.kind)
        assert task.lane == registry.lane_of(kind).value
        registry.spec_for(kind).spec.decode_payload(task.payload_json)
        assert task.steps_json is not None


def test_component_graph(tmp_path: Path) -> None:
    app = DemoApp(DemoSettings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'g.db'}"))
    runtime = app.build_runtime(install_signal_handlers=False)
    deps = {d.name: set(d.depends_on) for d in runtime.descriptors()}
    assert set(deps) == {"database", "sample_work", "audit_log", "dispatcher", "background_tasks"}
    assert deps["database"] == {"background_tasks", "dispatcher", "audit_log", "sample_work"}
    assert {"background_tasks", "dispatcher"} <= deps["audit_log"]
    order = list(runtime.registry.shutdown_order())
    assert order.index("background_tasks") < order.index("audit_log") < order.index("database")


async def test_database_component_migrates_checks_and_disposes(tmp_path: Path) -> None:
    app = DemoApp(DemoSettings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'd.db'}"))
    runtime = app.build_runtime(install_signal_handlers=False)
    database = next(d for d in runtime.descriptors() if d.name == "database")
    assert database.kind is RuntimeComponentKind.DATABASE
    assert [(p.phase, p.policy) for p in database.startup_phases] == [
        ("database_migrate", StartupPhaseFailurePolicy.REQUIRED)
    ]
    assert [(p.phase, p.timeout) for p in database.shutdown_phases] == [
        ("database_close", timedelta(seconds=10))
    ]
    assert database.health_checks == ("database",)
    try:
        await app.migrate()
        report = await runtime.run_health(HealthCheckScope.READINESS)
    finally:
        await app.engine.dispose()
    check = next(c for c in report.components if c.name == "database")
    assert check.status is HealthStatus.HEALTHY
    assert check.detail("backend") == HealthComponentDetailValue.text("sqlite")


async def _until_settled(app: DemoApp, limit_seconds: float) -> None:
    async with asyncio.timeout(limit_seconds):
        while True:
            try:
                page = await app.task_store.list_tasks(limit=100)
            except Exception:  # not migrated yet
                await asyncio.sleep(0.1)
                continue
            seeded = [r for r in page.items if (r.dedupe_key or "").startswith("demo-seed:")]
            if seeded and all(r.status.is_terminal for r in seeded):
                return
            await asyncio.sleep(0.1)


async def test_a_run_on_sqlite(tmp_path: Path) -> None:
    settings = DemoSettings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'run.db'}",
        pace=0.01,
        temp_root=tmp_path / "tmp",
        schedule=DemoSchedule(sample_work=DemoSchedule().sample_work * 0),
        retry_delay=DemoSettings().retry_delay / 20,
    )
    app = DemoApp(settings)
    runtime = app.build_runtime(install_signal_handlers=False)
    run = asyncio.create_task(runtime.run(), name="demo-run")
    try:
        await _until_settled(app, 40)
    finally:
        runtime.request_stop()
        await run
    report = runtime.last_shutdown_report
    assert report is not None and not report.has_failures()
    engine = app.engine  # disposed by the database component; usable again for reads
    try:
        async with engine.connect() as conn:
            rows = (await conn.execute(sa.select(app.tables.tasks))).mappings().all()
            events = (await conn.execute(sa.select(app.tables.audit.c.event))).scalars().all()
    finally:
        await engine.dispose()
    by_payload = {
        (r["kind"], json.dumps(json.loads(r["payload_json"]), sort_keys=True)): r for r in rows
    }
    statuses = {
        failure: {
            TaskStatus(r["status"])
            for (_kind, payload), r in by_payload.items()
            if json.loads(payload).get("failure", "none") == failure
        }
        for failure in ("none", "flaky", "corrupt", "quota")
    }
    assert statuses["flaky"] == {TaskStatus.SUCCEEDED}
    assert statuses["corrupt"] == {TaskStatus.FAILED}
    assert statuses["quota"] == {TaskStatus.FAILED}
    flaky = [r for (_k, p), r in by_payload.items() if json.loads(p).get("failure") == "flaky"]
    assert [r["attempt"] for r in flaky] == [1, 1]
    corrupt = next(r for (_k, p), r in by_payload.items() if '"corrupt"' in p)
    assert corrupt["manual_retry_allowed"] is False or corrupt["manual_retry_allowed"] == 0
    steps = parse_task_steps_json(corrupt["steps_json"])
    assert [s.status for s in steps] == [
        TaskStepStatus.SUCCEEDED,
        TaskStepStatus.FAILED,
        TaskStepStatus.PENDING,
    ]
    quota = next(r for (_k, p), r in by_payload.items() if '"quota"' in p)
    assert bool(quota["manual_retry_allowed"])
    legacy = next(r for r in rows if "removed-maintenance-task" in r["payload_json"])
    assert legacy["status"] == "failed" and "Unknown runtime task" in legacy["last_error"]
    assert "task.published" in events and "demo.seeded" in events


@pytest.mark.parametrize("bad", [{"report": "", "rows": 1}, {"report": "x", "rows": -1}])
def test_invalid_payloads_are_rejected(bad: dict[str, object]) -> None:
    registry = build_task_registry()
    spec = registry.spec_for(DemoTaskKind.REPORT_EXPORT).spec
    with pytest.raises(ValueError, match=r"report\.export"):
        spec.decode_payload(json.dumps(bad))
