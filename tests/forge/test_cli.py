"""``aster-forge migrate module:forge`` and ``aster-forge worker module:forge [--http]``."""

from __future__ import annotations

import asyncio
import gc
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from sqlalchemy.ext.asyncio import create_async_engine

from aster_forge import TaskStatus
from aster_forge._cli._worker import run_worker
from aster_forge.cli import cli
from aster_forge.runtime import AsterRuntime

from ..cli._support import CLI, REPO, cli_env, free_port
from ._product import CRON_ENV, URL_ENV, build_forge, ticks

TARGET = "tests.forge._product:forge"


def _run(*args: str, url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args],
        cwd=REPO,
        env=cli_env(**{URL_ENV: url}),
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )


async def test_migrate_then_worker_runs_tasks_and_serves_health(
    forge_url: str, backend: str, tmp_path: Path
) -> None:
    migrated = await asyncio.to_thread(_run, "migrate", TARGET, url=forge_url)
    assert migrated.returncode == 0, migrated.stderr
    assert (
        "background_tasks, background_tasks_deps, background_tasks_lanes, "
        "background_tasks_partition_rates, runtime_leases, "
        "scheduled_tasks"
    ) in (migrated.stdout)
    port = free_port()
    log = (tmp_path / "worker.log").open("w+")
    worker = subprocess.Popen(  # noqa: ASYNC220 - started once, waited in a thread
        [*CLI, "worker", TARGET, "--http", f"127.0.0.1:{port}"],
        cwd=REPO,
        env=cli_env(**{URL_ENV: forge_url}),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    producer = build_forge(forge_url)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            for _ in range(400):
                try:
                    ready = await client.get("/readyz")
                    if ready.status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.05)
            assert ready.status_code == 200, ready.text
            made = await producer.tasks[0].enqueue("hello")
            for _ in range(600):
                record = await producer.backend.task_store.get_task(made.record.id)
                assert record is not None
                if record.status.is_terminal:
                    break
                await asyncio.sleep(0.025)
            assert (
                record is not None
                and record.status is TaskStatus.SUCCEEDED
                and record.result_json == '"HELLO"'
            )
            assert (await client.get("/metrics")).status_code == 200
            lanes = (await client.get("/api/lanes")).json()
            assert "mail" in str(lanes)
    finally:
        worker.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(worker.wait, 30)
        await producer.aclose()
        log.seek(0)
        output = log.read()
        log.close()
    assert code == 0, output
    assert "background_tasks" in output  # the shutdown report
    # The NOTIFY listener runs by default on PostgreSQL, with no product code.
    assert ("task_notifications" in output) is (backend == "postgres"), output


async def test_two_worker_processes_run_each_cron_firing_once(
    forge_url: str, tmp_path: Path
) -> None:
    migrated = await asyncio.to_thread(_run, "migrate", TARGET, url=forge_url)
    assert migrated.returncode == 0, migrated.stderr
    env = cli_env(**{URL_ENV: forge_url, CRON_ENV: "1"})
    logs = [(tmp_path / f"worker-{n}.log").open("w+") for n in range(2)]
    workers = [
        subprocess.Popen(  # noqa: ASYNC220 - started once, waited in a thread
            [*CLI, "worker", TARGET], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT
        )
        for log in logs
    ]
    engine = create_async_engine(forge_url)
    try:
        rows: list[sa.Row[Any]] = []
        for _ in range(600):
            async with engine.connect() as conn:
                rows = list((await conn.execute(sa.select(ticks))).all())
            if len(rows) >= 3:
                break
            await asyncio.sleep(0.05)
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        codes = [await asyncio.to_thread(worker.wait, 30) for worker in workers]
        await engine.dispose()
        outputs = []
        for log in logs:
            log.seek(0)
            outputs.append(log.read())
            log.close()
    assert codes == [0, 0], outputs
    firings = [row.scheduled_at for row in rows]
    assert len(firings) >= 3, outputs
    assert len(firings) == len(set(firings)), f"a cron firing ran twice: {firings}"


def test_a_worker_whose_loop_crashes_exits_non_zero_after_its_shutdown(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'crash.db'}"
    result = _run("worker", "tests.forge._crashing_product:forge", url=url)
    assert result.returncode == 1, result.stderr
    assert "the task worker's loop crashed (AttributeError" in result.stderr
    assert "Traceback (most recent call last)" in result.stderr
    assert "component task dispatch of background_tasks crashed" in result.stderr
    assert "shutdown report" in result.stdout  # the runtime shut down in order first


@pytest.mark.parametrize("backend", ["postgres", "mysql"], indirect=True)
def test_worker_on_an_unmigrated_database_refuses_to_start_in_one_line(forge_url: str) -> None:
    result = _run("worker", TARGET, url=forge_url)
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith("error: check tables failed: tables 'background_tasks', "), line
    assert "'aster-forge migrate MODULE:FORGE' or your Alembic migration" in line
    assert result.stdout == ""  # no runtime started, so no shutdown report either


def test_worker_rejects_a_target_that_is_not_a_forge() -> None:
    result = _run("worker", "tests.forge._product:build_forge", url="memory://")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "error: tests.forge._product:build_forge is a function, not a Forge"
    )
    bad = _run("worker", TARGET, "--http", "nowhere", url="memory://")
    assert bad.returncode == 2 and "--http expects HOST:PORT" in bad.stderr


async def test_the_worker_command_freezes_what_the_import_built_before_it_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Frozen objects are skipped by the garbage collector's full collections.
    frozen_when_run: list[int] = []

    async def run(self: AsterRuntime) -> None:
        frozen_when_run.append(gc.get_freeze_count())

    monkeypatch.setattr(AsterRuntime, "run", run)
    assert gc.get_freeze_count() == 0
    try:
        assert await run_worker(TARGET, None, None) == 0
    finally:
        gc.unfreeze()
    assert frozen_when_run and frozen_when_run[0] > 1000


def _loop_of_a_worker_run(monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[int, str, str]:
    """Run ``aster-forge worker TARGET *args`` in-process; exit code, loop module, stderr."""
    loops: list[str] = []

    async def run(self: AsterRuntime) -> None:
        loops.append(type(asyncio.get_running_loop()).__module__)

    monkeypatch.setattr(AsterRuntime, "run", run)
    try:
        result = CliRunner().invoke(cli, ["worker", TARGET, *args])
    finally:
        gc.unfreeze()
    return result.exit_code, loops[0] if loops else "", result.stderr


def test_the_worker_command_runs_on_uvloop_when_it_is_installed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert _loop_of_a_worker_run(monkeypatch)[:2] == (0, "uvloop")
    assert _loop_of_a_worker_run(monkeypatch, "--loop", "uvloop")[:2] == (0, "uvloop")
    assert _loop_of_a_worker_run(monkeypatch, "--loop", "asyncio")[:2] == (0, "asyncio.unix_events")


def test_the_worker_command_without_uvloop_falls_back_or_says_what_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop raises ImportError
    assert _loop_of_a_worker_run(monkeypatch)[:2] == (0, "asyncio.unix_events")
    code, loop, stderr = _loop_of_a_worker_run(monkeypatch, "--loop", "uvloop")
    assert (code, loop) == (2, "")
    assert stderr.strip() == "error: --loop uvloop needs uvloop: pip install 'aster-forge[uvloop]'"
