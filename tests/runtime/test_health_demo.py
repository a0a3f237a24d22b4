"""The interim ``make demo`` program runs real checks and prints a table and JSON."""

from __future__ import annotations

import subprocess
import sys

from aster_forge.runtime import HealthStatus, SystemHealthReport


def test_demo_prints_a_table_and_a_parseable_report() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "aster_forge.demo"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    table, _, json_text = done.stdout.partition("\n\n")
    assert table.splitlines()[0].split() == ["COMPONENT", "STATUS", "MS", "MESSAGE", "DETAILS"]
    report = SystemHealthReport.from_json(json_text)
    statuses = {c.name: c.status for c in report.components}
    assert statuses == {
        "database": HealthStatus.HEALTHY,
        "disk": statuses["disk"],  # depends on the machine's free space
        "event_loop": HealthStatus.HEALTHY,
        "search": HealthStatus.DEGRADED,
    }
    assert report.components[0].detail("driver") is not None
    assert "search" in done.stderr  # the timeout is logged for the operator
