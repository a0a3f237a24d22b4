"""The example product: its Forge declarations, its component graph and a real run."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from aster_forge import ForgePayloadError, TaskStatus
from aster_forge._demo import (
    DEMO_LEASE_ID,
    DEMO_NAMESPACE,
    LANE_LIMITS,
    RUNTIME_TASKS,
    SEED_PREFIX,
    DemoApp,
    DemoLane,
    DemoRuntimeTask,
    DemoSchedule,
    DemoSettings,
)
from aster_forge.db.errors import AsterForgeDbError
from aster_forge.runtime import HealthCheckScope, HealthComponentDetailValue, HealthStatus
from aster_forge.tasks import CronSchedule, IntervalSchedule
from aster_forge.tasks._steps import TaskStepStatus, parse_task_steps_json


def _app(tmp_path: Path, **options: object) -> DemoApp:
    url = f"sqlite+aiosqlite:///{tmp_path / 'demo.db'}"
    return DemoApp(DemoSettings(database_url=url, temp_root=tmp_path / "tmp", **options))  # type: ignore[arg-type]


def test_the_forge_declares_lanes_tasks_and_periodic_jobs(tmp_path: Path) -> None:
    forge = _app(tmp_path).forge
    assert forge.lanes == LANE_LIMITS
    assert LANE_LIMITS == {DemoLane.MEDIA: 2, DemoLane.MAINTENANCE: 1, DemoLane.FALLBACK: 4}
    assert forge.name == DEMO_NAMESPACE and f"{DEMO_NAMESPACE}.scheduler" == DEMO_LEASE_ID
    lanes = {task.name: task.lane for task in forge.tasks}
    assert lanes == {
        "thumbnail.render": "media",
        "video.transcode": "media",
        "report.export": "fallback",
        "runtime.task": "maintenance",
        "system-health-check": "maintenance",
        "temp-dir-sweep": "maintenance",
        "finished-task-cleanup": "maintenance",
        "sample-work": "fallback",
    }
    pipeline = next(task for task in forge.tasks if task.name == "report.export")
    assert [step.key for step in pipeline.steps] == ["fetch", "transform", "publish"]
    schedules = {job.name: job.schedule for job in forge.periodics}
    assert isinstance(schedules.pop("finished-task-cleanup"), CronSchedule)
    assert all(isinstance(s, IntervalSchedule) for s in schedules.values())
    # Every maintenance job is a runtime-catalog entry, named by its wire value.
    RUNTIME_TASKS.check()
    catalog = {entry.as_str() for entry in DemoRuntimeTask}
    assert catalog <= {job.name for job in forge.periodics}
    assert DemoRuntimeTask.from_wire_value("removed-maintenance-task") is None
    quiet = _app(tmp_path, schedule=DemoSchedule(sample_work=timedelta(0))).forge
    assert "sample-work" not in {job.name for job in quiet.periodics}


def test_component_graph(tmp_path: Path) -> None:
    runtime = _app(tmp_path).build_runtime(install_signal_handlers=False)
    deps = {d.name: set(d.depends_on) for d in runtime.descriptors()}
    assert set(deps) == {"background_tasks", "forge_resources", "database"}
    assert deps["forge_resources"] == {"background_tasks"}  # the audit log outlives the workers
    assert deps["database"] == {"background_tasks", "forge_resources"}
    order = list(runtime.registry.shutdown_order())
    assert order == ["background_tasks", "forge_resources", "database"]


async def test_database_and_dispatcher_health(tmp_path: Path) -> None:
    app = _app(tmp_path)
    runtime = app.build_runtime(install_signal_handlers=False)
    try:
        await app.migrate()
        report = await runtime.run_health(HealthCheckScope.READINESS)
    finally:
        await app.forge.aclose()
    checks = {c.name: c for c in report.components}
    assert "audit_log" not in checks  # a diagnostics check: not part of readiness
    assert checks["database"].status is HealthStatus.HEALTHY
    assert checks["database"].detail("backend") == HealthComponentDetailValue.text("sqlite")
    assert checks["background_tasks"].status is HealthStatus.HEALTHY


async def _until_settled(app: DemoApp, limit_seconds: float) -> None:
    async with asyncio.timeout(limit_seconds):
        while True:
            try:
                page = await app.task_store.list_tasks(limit=100)
            except AsterForgeDbError:  # the tables are created at startup
                await asyncio.sleep(0.1)
                continue
            seeded = [r for r in page.items if (r.dedupe_key or "").startswith(SEED_PREFIX)]
            if seeded and all(r.status.is_terminal for r in seeded):
                return
            await asyncio.sleep(0.1)


async def test_a_run_on_sqlite(tmp_path: Path) -> None:
    app = _app(
        tmp_path,
        pace=0.01,
        schedule=DemoSchedule(sample_work=timedelta(0)),
        retry_delay=DemoSettings().retry_delay / 20,
    )
    runtime = app.build_runtime(install_signal_handlers=False)
    run = asyncio.create_task(runtime.run(), name="demo-run")
    try:
        await _until_settled(app, 40)
        diagnostics = await runtime.run_health(HealthCheckScope.DIAGNOSTICS)
    finally:
        runtime.request_stop()
        await run
    audit_check = next(c for c in diagnostics.components if c.name == "audit_log")
    assert audit_check.status is HealthStatus.HEALTHY, audit_check
    report = runtime.last_shutdown_report
    assert report is not None and not report.has_failures()
    audit = app.forge.metadata.tables["demo_audit_events"]
    engine = app.engine  # disposed by the database component; usable again for reads
    try:
        async with engine.connect() as conn:
            tasks = app.forge.backend.tasks_table
            rows = (await conn.execute(sa.select(tasks))).mappings().all()
            events = (await conn.execute(sa.select(audit.c.event))).scalars().all()
    finally:
        await engine.dispose()
    seeded = [r for r in rows if (r["dedupe_key"] or "").startswith(SEED_PREFIX)]
    assert len(seeded) == 14

    def failing(mode: str) -> list[sa.RowMapping]:
        return [r for r in seeded if json.loads(r["payload_json"]).get("failure") == mode]

    assert {TaskStatus(r["status"]) for r in failing("flaky")} == {TaskStatus.SUCCEEDED}
    assert [r["attempt"] for r in failing("flaky")] == [1, 1]  # one retry counted once
    (corrupt,) = failing("corrupt")
    assert corrupt["status"] == "failed" and not corrupt["manual_retry_allowed"]
    assert [s.status for s in parse_task_steps_json(corrupt["steps_json"])] == [
        TaskStepStatus.SUCCEEDED,
        TaskStepStatus.FAILED,
        TaskStepStatus.PENDING,
    ]
    (quota,) = failing("quota")
    assert quota["status"] == "failed" and bool(quota["manual_retry_allowed"])
    legacy = next(r for r in seeded if "removed-maintenance-task" in r["payload_json"])
    assert legacy["status"] == "failed" and "Unknown runtime task" in legacy["last_error"]
    health = next(r for r in seeded if "system-health-check" in r["payload_json"])
    assert health["status"] == "succeeded" and "components" in health["result_json"]
    assert {"task.published", "demo.seeded", "runtime_task.finished"} <= set(events)


@pytest.mark.parametrize("bad", [{"report": "", "rows": 1}, {"report": "x", "rows": -1}])
async def test_invalid_payloads_are_rejected_before_anything_is_written(
    tmp_path: Path, bad: dict[str, object]
) -> None:
    app = _app(tmp_path)
    try:
        await app.migrate()
        with pytest.raises(ForgePayloadError, match=r"report\.export"):
            await app.tasks.report.enqueue(bad)
        assert (await app.task_store.list_tasks(limit=10)).items == []
    finally:
        await app.forge.aclose()
