"""StartupReport/ShutdownReport.to_json_dict: the one JSON shape the admin API and CLI share."""

from __future__ import annotations

import json
from datetime import timedelta

from aster_forge.runtime import ShutdownReport, StartupReport
from aster_forge.runtime._phases import (
    ShutdownPhaseReport,
    ShutdownPhaseStatus,
    StartupPhaseFailurePolicy,
    StartupPhaseReport,
    StartupPhaseStatus,
)


def test_startup_report_json() -> None:
    report = StartupReport(
        phases=(
            StartupPhaseReport(
                "migrate",
                StartupPhaseFailurePolicy.REQUIRED,
                StartupPhaseStatus.SUCCEEDED,
                timedelta(milliseconds=250),
                component="database",
            ),
            StartupPhaseReport(
                "warm",
                StartupPhaseFailurePolicy.OPTIONAL,
                StartupPhaseStatus.FAILED,
                timedelta(seconds=1),
                error="startup phase failed",
            ),
        ),
        duration=timedelta(seconds=1.5),
    )
    data = report.to_json_dict()
    assert data == {
        "succeeded": True,
        "aborted": False,
        "cancelled": False,
        "duration_seconds": 1.5,
        "phases": [
            {
                "name": "migrate",
                "component": "database",
                "policy": "required",
                "status": "succeeded",
                "duration_seconds": 0.25,
                "error": None,
            },
            {
                "name": "warm",
                "component": None,
                "policy": "optional",
                "status": "failed",
                "duration_seconds": 1.0,
                "error": "startup phase failed",
            },
        ],
    }
    assert json.loads(json.dumps(data)) == data


def test_shutdown_report_json() -> None:
    report = ShutdownReport(
        phases=(
            ShutdownPhaseReport(
                "stop tasks",
                ShutdownPhaseStatus.SUCCEEDED,
                timedelta(milliseconds=500),
                component="background_tasks",
                component_started=True,
            ),
            ShutdownPhaseReport(
                "database_close", ShutdownPhaseStatus.FAILED("disk full"), timedelta(seconds=2)
            ),
        ),
        duration=timedelta(seconds=2.5),
    )
    data = report.to_json_dict()
    assert data == {
        "has_failures": True,
        "summary": "2 phases, 1 failed (database_close: failed: disk full)",
        "duration_seconds": 2.5,
        "phases": [
            {
                "name": "stop tasks",
                "component": "background_tasks",
                "status": "succeeded",
                "message": None,
                "duration_seconds": 0.5,
                "component_started": True,
            },
            {
                "name": "database_close",
                "component": None,
                "status": "failed",
                "message": "disk full",
                "duration_seconds": 2.0,
                "component_started": None,
            },
        ],
    }
    assert data["summary"] == report.summary()
    assert json.loads(json.dumps(data)) == data
