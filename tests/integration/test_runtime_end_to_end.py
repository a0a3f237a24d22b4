"""AsterRuntime end to end in a subprocess: SIGTERM stops workers before the engine closes."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from aster_forge.tasks import BACKGROUND_TASKS_COMPONENT
from aster_forge.tasks._components import BACKGROUND_TASKS_SHUTDOWN_PHASE

from . import _runtime_app as app

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(120)
async def test_sigterm_stops_workers_before_the_database_disposes_the_engine(
    engine: AsyncEngine, database_url: str
) -> None:
    async with engine.begin() as conn:
        await conn.run_sync(app.metadata.create_all)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.integration._runtime_app",
        database_url,
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT / "src")},
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        async with asyncio.timeout(60):
            assert (await proc.stdout.readline()).decode().strip() == "ready"
        proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(60):
            output = (await proc.stdout.read()).decode()
            assert await proc.wait() == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    report = json.loads(output.strip().splitlines()[-1])
    assert report["phases"] == [
        [BACKGROUND_TASKS_COMPONENT, BACKGROUND_TASKS_SHUTDOWN_PHASE, "succeeded"],
        ["database", "dispose database engine", "succeeded"],
    ]
    async with engine.connect() as conn:
        rows = [
            r.event for r in await conn.execute(sa.select(app.events).order_by(app.events.c.id))
        ]
    assert rows[0] == "beat"
    assert rows[-1] == "stopped"  # written during shutdown, before the engine was disposed
    assert rows.count("stopped") == 1
