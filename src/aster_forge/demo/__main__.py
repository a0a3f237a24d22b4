"""Interim ``make demo``: a diagnostics run of a sample health registry.

Registers a few real checks (an SQLite ping through SQLAlchemy async on a temporary
file, a disk-space check, a clock check and an optional check that times out), runs
the DIAGNOSTICS scope and prints the report as a table and as JSON. Exits 0.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from aster_forge.runtime import (
    HealthCheck,
    HealthCheckOptions,
    HealthCheckRegistry,
    HealthCheckScope,
    HealthCheckScopes,
    HealthComponentDetailValue,
    HealthComponentReport,
    SystemHealthReport,
)

MIN_FREE_BYTES = 512 * 1024 * 1024


def database_check(engine: AsyncEngine) -> HealthCheck:
    """Return a check that runs ``SELECT 1`` on ``engine``."""

    async def check() -> HealthComponentReport:
        started = time.perf_counter()
        async with engine.connect() as conn:
            await conn.execute(text("SELECT 1"))
        latency = timedelta(seconds=time.perf_counter() - started)
        return (
            HealthComponentReport.healthy("database", "database ping succeeded")
            .with_detail("driver", HealthComponentDetailValue.text(engine.dialect.driver))
            .with_detail("latency", HealthComponentDetailValue.duration(latency))
        )

    return check


def disk_check(path: Path) -> HealthCheck:
    """Return a check that reports free space on the file system holding ``path``."""

    async def check() -> HealthComponentReport:
        usage = await asyncio.to_thread(shutil.disk_usage, path)
        if usage.free < MIN_FREE_BYTES:
            report = HealthComponentReport.degraded("disk", "less than 512 MiB free")
        else:
            report = HealthComponentReport.healthy("disk", "enough free space")
        return report.with_detail(
            "free_bytes", HealthComponentDetailValue.unsigned(usage.free)
        ).with_detail(
            "used_percent",
            HealthComponentDetailValue.unsigned(
                round(usage.used * 100 / usage.total) if usage.total else 0
            ),
        )

    return check


async def event_loop_check() -> HealthComponentReport:
    """Measure how late a zero-length sleep resumes (event-loop lag)."""
    started = time.perf_counter()
    await asyncio.sleep(0)
    lag = timedelta(seconds=time.perf_counter() - started)
    return HealthComponentReport.healthy("event_loop", "event loop responsive").with_detail(
        "lag", HealthComponentDetailValue.duration(lag)
    )


async def unreachable_search_check() -> HealthComponentReport:
    """An optional dependency that never answers: the registry times it out."""
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


def render_table(report: SystemHealthReport) -> str:
    """Render ``report`` as a fixed-width text table."""
    rows = [("COMPONENT", "STATUS", "MS", "MESSAGE", "DETAILS")]
    for c in report.components:
        details = ", ".join(f"{d.key}={d.value.display_value()}" for d in c.details)
        rows.append(
            (c.name, c.status.as_str(), f"{c.duration_seconds() * 1e3:.1f}", c.message, details)
        )
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = [
        "  ".join(cell.ljust(widths[i]) if i < 4 else cell for i, cell in enumerate(row))
        for row in rows
    ]
    lines.append(
        f"overall: {report.status().as_str()} in {report.duration_seconds() * 1e3:.1f} ms"
        f" - issues: {report.issue_summary()}"
    )
    return "\n".join(line.rstrip() for line in lines)


async def run() -> int:
    """Build the sample registry, run DIAGNOSTICS and print the report."""
    with tempfile.TemporaryDirectory(prefix="aster-forge-demo-") as tmp:
        db_path = Path(tmp) / "demo.db"
        engine = create_async_engine(f"sqlite+aiosqlite:///{db_path}")
        try:
            registry = HealthCheckRegistry(default_timeout=timedelta(seconds=2))
            registry.register_with_options(
                "database",
                HealthCheckOptions.required(timedelta(seconds=2)).with_scopes(
                    HealthCheckScopes.readiness_and_diagnostics()
                ),
                database_check(engine),
            ).register_with_options(
                "disk",
                HealthCheckOptions.optional().with_scopes(HealthCheckScopes.diagnostics()),
                disk_check(Path(tmp)),
            ).register_with_options(
                "event_loop", HealthCheckOptions.required(), event_loop_check
            ).register_with_options(
                "search",
                HealthCheckOptions.optional(timedelta(milliseconds=200)).with_scopes(
                    HealthCheckScopes.diagnostics()
                ),
                unreachable_search_check,
            )
            report = await registry.run_scope(HealthCheckScope.DIAGNOSTICS)
        finally:
            await engine.dispose()
    sys.stdout.write(render_table(report) + "\n\n")
    sys.stdout.write(report.to_json(indent=2) + "\n")
    return 0


def main() -> int:
    """Entry point of ``python -m aster_forge.demo``."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    return asyncio.run(run())


if __name__ == "__main__":
    raise SystemExit(main())
