"""``aster-forge demo`` end to end in a subprocess, observed through its HTTP API."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from aster_forge._demo import DEMO_LEASE_ID

from ._support import DemoProcess

_PIPELINES = {"thumbnail.render", "video.transcode", "report.export"}
_MAINTENANCE = {"system-health-check", "temp-dir-sweep"}


def _succeeded_tasks(demo: DemoProcess) -> list[dict[str, Any]] | None:
    items: list[dict[str, Any]] = demo.get("/api/tasks?status=succeeded").json()["items"]
    pipelines = [item for item in items if item["kind"] in _PIPELINES]
    return items if len(items) >= 3 and pipelines else None


def _fired(demo: DemoProcess) -> list[dict[str, Any]] | None:
    items: list[dict[str, Any]] = demo.get("/api/scheduled").json()["items"]
    fired = [row for row in items if row["run_count"] >= 1]
    # The sample work fires at start and the cron cleanup on a minute boundary, which can
    # both come before the health check's first firing (2 s in): wait for a maintenance job.
    names = {row["name"] for row in fired}
    return fired if len(fired) >= 2 and names & _MAINTENANCE else None


def _run_demo(url: str, tmp_path: Path) -> None:
    demo = DemoProcess(url, tmp_path, duration=15)
    try:
        demo.wait_ready()
        succeeded = demo.wait_for(lambda: _succeeded_tasks(demo), 14, "succeeded tasks")
        assert {t["kind"] for t in succeeded} <= {
            *_PIPELINES,
            "runtime.task",
            "system-health-check",
            "temp-dir-sweep",
            "finished-task-cleanup",
            "sample-work",
        }
        demo.wait_for(lambda: _fired(demo), 14, "scheduled firings")
        # A periodic firing runs as a task of the job's kind, deduped on the firing.
        jobs = demo.get("/api/tasks?kind=system-health-check").json()["items"]
        assert jobs and all(j["dedupe_key"].startswith("scheduled:") for j in jobs)
        pipeline = next(t for t in succeeded if t["kind"] in _PIPELINES)
        detail = demo.get(f"/api/tasks/{pipeline['id']}").json()
        assert [s["key"] for s in detail["steps"]] == ["fetch", "transform", "publish"]
        assert [s["status"] for s in detail["steps"]] == ["succeeded"] * len(detail["steps"])
        leases = demo.get("/api/leases").json()["items"]
        assert [lease["owner_id"] for lease in leases if lease["lease_id"] == DEMO_LEASE_ID] == [
            demo.instance()
        ]
        code = demo.wait(40)
    finally:
        demo.stop()
    assert code == 0, demo.stderr
    assert "Traceback" not in demo.stderr
    assert "shutdown report" in demo.stdout
    # The workers stop, then the resources (the audit log drains), then the database.
    assert "shutdown order: background_tasks -> forge_resources -> database" in demo.stdout
    report = json.loads(demo.report.read_text())
    order = report["shutdown"]["components"]
    assert order.index("background_tasks") < order.index("forge_resources")
    assert order.index("forge_resources") < order.index("database")
    assert report["shutdown"]["has_failures"] is False
    assert report["startup"]["succeeded"] is True
    graph = report["shutdown_order"]
    assert graph.index("background_tasks") < graph.index("forge_resources")
    assert graph.index("forge_resources") < graph.index("database")


def test_demo_on_sqlite(tmp_path: Path) -> None:
    _run_demo(f"sqlite+aiosqlite:///{tmp_path / 'demo.db'}", tmp_path)


@pytest.mark.postgres
def test_demo_on_postgres(demo_postgres_url: str, tmp_path: Path) -> None:
    _run_demo(demo_postgres_url, tmp_path)


def _lease_owner(demo: DemoProcess) -> str | None:
    for lease in demo.get("/api/leases").json()["items"]:
        if lease["lease_id"] == DEMO_LEASE_ID and not lease["expired"]:
            return str(lease["owner_id"])
    return None


@pytest.mark.postgres
def test_standby_takes_over_the_runtime_lease(demo_postgres_url: str, tmp_path: Path) -> None:
    first = DemoProcess(demo_postgres_url, tmp_path, duration=55)
    second: DemoProcess | None = None
    try:
        first.wait_ready()
        first_id = first.instance()
        first.wait_for(lambda: _lease_owner(first) == first_id or None, 15, "first holds lease")
        second = DemoProcess(demo_postgres_url, tmp_path, "--no-seed", duration=55)
        second.wait_ready()
        second_id = second.instance()
        assert second_id != first_id
        # Both serve; only one holds the lease, and both see the same holder.
        assert _lease_owner(second) == first_id
        assert _lease_owner(first) == first_id
        first.signal(signal.SIGKILL)
        first.wait(10)
        owner = second.wait_for(
            lambda: _lease_owner(second) if _lease_owner(second) == second_id else None,
            20,
            "standby takeover",
        )
        assert owner == second_id
        second.signal(signal.SIGTERM)
        assert second.wait(40) == 0, second.stderr
        assert "shutdown report" in second.stdout
    finally:
        first.stop()
        if second is not None:
            second.stop()
