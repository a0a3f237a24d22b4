"""CLI commands and their error paths (click's CliRunner and subprocesses)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import uvicorn
from click.testing import CliRunner, Result
from sqlalchemy.ext.asyncio import create_async_engine

from aster_forge import __version__
from aster_forge._demo import DemoApp, DemoSettings
from aster_forge.cli import cli, main
from aster_forge.db import BackgroundTaskDbStore
from aster_forge.runtime import HealthCheckOptions, HealthCheckRegistry, HealthComponentReport
from aster_forge.tasks import TaskLease
from aster_forge.web._health import health_app

from ._support import CLI, REPO, cli_env, free_port


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def assert_one_line_error(result: Result, code: int, fragment: str) -> None:
    assert result.exit_code == code, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert fragment in lines[0]
    assert "Traceback" not in result.output


async def _seed(url: str) -> None:
    app = DemoApp(DemoSettings(database_url=url))
    try:
        await app.migrate()
        await app.seed(batch="cli-test")
    finally:
        await app.forge.aclose()


@pytest.fixture
def seeded_url(tmp_path: Path) -> str:
    url = f"sqlite+aiosqlite:///{tmp_path / 'tasks.db'}"
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, _seed(url)).result()
    return url


def test_version_and_help() -> None:
    assert __version__ in invoke("--version").output
    out = invoke("--help").output
    for command in ("demo", "run", "migrate", "tasks", "health"):
        assert command in out


def test_main_returns_exit_codes() -> None:
    assert main(["--version"]) == 0
    assert main(["no-such-command"]) == 2


def test_migrate_is_idempotent(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'm.db'}"
    for _ in range(2):
        result = invoke("migrate", "--database-url", url)
        assert result.exit_code == 0, result.stderr
        for table in ("background_tasks", "runtime_leases", "scheduled_tasks"):
            assert table in result.stdout


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("not a url", "invalid database URL"),
        ("nosuchdb+nodriver://host/db", "unsupported database backend 'nosuchdb'"),
        ("postgresql+psycopg2://postgres:secret@127.0.0.1/x", "'psycopg2' is not an asyncio"),
        ("postgresql+asyncpg://postgres:secret@127.0.0.1:1/nope", "cannot use the database"),
        ("sqlite+aiosqlite:////nonexistent-dir/for/sure/x.db", "cannot use the database"),
    ],
)
def test_database_errors_are_one_line(url: str, fragment: str) -> None:
    for args in (["migrate"], ["tasks", "list"], ["tasks", "show", "1"]):
        result = invoke(*args, "--database-url", url)
        assert_one_line_error(result, 2, fragment)
        assert "secret" not in result.stderr


def test_tasks_list_and_show(seeded_url: str) -> None:
    result = invoke("tasks", "list", "--database-url", seeded_url)
    assert result.exit_code == 0
    assert "thumbnail.render" in result.stdout and "report.export" in result.stdout
    data = json.loads(invoke("tasks", "list", "--database-url", seeded_url, "--json").stdout)
    assert len(data["items"]) == 14
    assert {item["status"] for item in data["items"]} == {"pending"}
    only = json.loads(
        invoke("tasks", "list", "--database-url", seeded_url, "--json", "--lane", "fallback").stdout
    )
    assert {item["lane"] for item in only["items"]} == {"fallback"}
    empty = invoke("tasks", "list", "--database-url", seeded_url, "--status", "failed")
    assert "no tasks" in empty.stdout
    shown = invoke("tasks", "show", "1", "--database-url", seeded_url)
    assert shown.exit_code == 0
    assert "Fetch source" in shown.stdout and "thumbnail.render" in shown.stdout
    detail = json.loads(invoke("tasks", "show", "1", "--json", "--database-url", seeded_url).stdout)
    assert [s["key"] for s in detail["steps"]] == ["fetch", "transform", "publish"]
    assert detail["payload"]["asset_id"] == 1
    assert detail["snooze_count"] == 0 and "snooze_count" not in shown.stdout


async def _snooze_task_one(url: str) -> None:
    engine = create_async_engine(url)
    try:
        store = BackgroundTaskDbStore(engine)
        record = await store.get_task(1)
        assert record is not None
        (claimed,) = await store.claim_due_for_lane(
            record.lane, 1, "cli-test", timedelta(minutes=1)
        )
        assert claimed.processing_token is not None and claimed.lease_expires_at is not None
        lease = TaskLease(claimed.id, claimed.processing_token, claimed.lease_expires_at)
        assert await store.mark_task_snoozed(lease, delay=timedelta(0), steps_json=None)
    finally:
        await engine.dispose()


def test_tasks_show_the_snooze_count(seeded_url: str) -> None:
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, _snooze_task_one(seeded_url)).result()
    shown = invoke("tasks", "show", "1", "--database-url", seeded_url)
    assert "snooze_count: 1" in shown.stdout
    detail = json.loads(invoke("tasks", "show", "1", "--json", "--database-url", seeded_url).stdout)
    assert detail["snooze_count"] == 1


_ERROR = "tests.QuoteError: upstream said [bold]503[/bold] for /quotes"
_TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/srv/app/quotes.py", line 12, in fetch\n'
    "    raise QuoteError(f'upstream said [bold]{status}[/bold] for {path}')\n"
    f"{_ERROR}\n"
)


async def _fail_task_one(url: str) -> None:
    engine = create_async_engine(url)
    try:
        store = BackgroundTaskDbStore(engine)
        record = await store.get_task(1)
        assert record is not None
        (claimed,) = await store.claim_due_for_lane(
            record.lane, 1, "cli-test", timedelta(minutes=1)
        )
        assert claimed.processing_token is not None and claimed.lease_expires_at is not None
        lease = TaskLease(claimed.id, claimed.processing_token, claimed.lease_expires_at)
        assert await store.mark_task_failed(
            lease, error=_ERROR, steps_json=None, manual_retry=True, traceback=_TRACEBACK
        )
    finally:
        await engine.dispose()


def test_tasks_show_prints_the_error_and_its_traceback_verbatim(seeded_url: str) -> None:
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, _fail_task_one(seeded_url)).result()
    shown = invoke("tasks", "show", "1", "--database-url", seeded_url).stdout
    assert f"last_error: {_ERROR}\n" in shown  # brackets are text, not markup
    lines = shown.splitlines()
    start = lines.index(f"{'traceback':>14}:")
    assert [line.strip() for line in lines[start + 1 : start + 5]] == [
        line.strip() for line in _TRACEBACK.splitlines()
    ]
    detail = json.loads(invoke("tasks", "show", "1", "--json", "--database-url", seeded_url).stdout)
    assert (detail["last_error"], detail["last_traceback"]) == (_ERROR, _TRACEBACK)


def test_tasks_cancel_and_retry(seeded_url: str) -> None:
    assert "cancelled" in invoke("tasks", "cancel", "2", "--database-url", seeded_url).stdout
    again = invoke("tasks", "cancel", "2", "--database-url", seeded_url)
    assert again.exit_code == 1 and "already finished" in again.stdout
    retried = invoke("tasks", "retry", "2", "--database-url", seeded_url)
    assert retried.exit_code == 0 and "pending" in retried.stdout
    pending = invoke("tasks", "retry", "3", "--database-url", seeded_url)
    assert_one_line_error(pending, 1, "3")


async def _fail_a_task_for_good(url: str) -> int:
    """Claim a task and fail it, not to be retried by hand; its id."""
    engine = create_async_engine(url)
    try:
        store = BackgroundTaskDbStore(engine)
        (claimed,) = await store.claim_due_for_lane("media", 1, "cli-test", timedelta(minutes=1))
        assert claimed.processing_token is not None and claimed.lease_expires_at is not None
        lease = TaskLease(claimed.id, claimed.processing_token, claimed.lease_expires_at)
        failed = await store.mark_task_failed(
            lease, error="source gone", steps_json=None, manual_retry=False
        )
        assert failed
        return claimed.id
    finally:
        await engine.dispose()


def test_tasks_retry_names_force_when_it_would_help(seeded_url: str) -> None:
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        failed = pool.submit(asyncio.run, _fail_a_task_for_good(seeded_url)).result()
    refused = invoke("tasks", "retry", str(failed), "--database-url", seeded_url)
    assert_one_line_error(refused, 1, "manual retry is not allowed")
    assert f"'aster-forge tasks retry {failed} --force' retries it anyway" in refused.stderr
    pending = invoke("tasks", "retry", "3", "--database-url", seeded_url)
    assert_one_line_error(pending, 1, "only failed or cancelled tasks retry")
    assert "--force" not in pending.stderr  # it would not help
    forced = invoke("tasks", "retry", str(failed), "--force", "--database-url", seeded_url)
    assert forced.exit_code == 0 and f"task {failed} is pending again" in forced.stdout


@pytest.mark.parametrize(
    "command",
    [("tasks", "list"), ("tasks", "show", "1"), ("lanes", "list"), ("tasks", "cancel", "1")],
)
def test_commands_on_a_database_do_not_create_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: tuple[str, ...]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ASTER_FORGE_DATABASE_URL", raising=False)
    result = invoke(*command)  # the default URL: ./aster-forge.db
    assert_one_line_error(result, 2, f"no SQLite database at {tmp_path / 'aster-forge.db'}")
    assert "create it with 'aster-forge migrate'" in result.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["show", "retry", "cancel"])
def test_unknown_task_id(seeded_url: str, command: str) -> None:
    result = invoke("tasks", command, "999", "--database-url", seeded_url)
    assert_one_line_error(result, 1, "999")
    assert "not found" in result.stderr


class _HealthServer:
    def __init__(self) -> None:
        self.healthy = True
        registry = HealthCheckRegistry()

        async def check() -> HealthComponentReport:
            if self.healthy:
                return HealthComponentReport.healthy("db", "fine")
            return HealthComponentReport.unhealthy("db", "down")

        registry.register_with_options("db", HealthCheckOptions.required(), check)
        self.port = free_port()
        config = uvicorn.Config(
            health_app(registry), port=self.port, log_level="error", lifespan="off"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> _HealthServer:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        return self

    def __exit__(self, *_: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture
def health_server() -> Iterator[_HealthServer]:
    with _HealthServer() as server:
        yield server


def test_health_exit_code_follows_status(health_server: _HealthServer) -> None:
    url = f"http://127.0.0.1:{health_server.port}"
    ok = invoke("health", "--url", url)
    assert ok.exit_code == 0 and "readiness: healthy" in ok.stdout
    health_server.healthy = False
    bad = invoke("health", "--url", url, "--scope", "liveness", "--json")
    assert bad.exit_code == 1
    assert json.loads(bad.stdout)["status"] == "unhealthy"


def test_health_url_from_the_environment(health_server: _HealthServer) -> None:
    env = {"ASTER_FORGE_SERVICE_URL": f"http://127.0.0.1:{health_server.port}"}
    result = CliRunner().invoke(cli, ["health"], catch_exceptions=False, env=env)
    assert result.exit_code == 0 and "readiness: healthy" in result.stdout


def test_health_errors() -> None:
    unreachable = invoke("health", "--url", f"http://127.0.0.1:{free_port()}", "--timeout", "2")
    assert_one_line_error(unreachable, 2, "cannot reach")
    assert_one_line_error(invoke("health", "--url", "ftp://x"), 2, "invalid service URL")
    assert_one_line_error(invoke("health", "--url", "http://[::1"), 2, "invalid service URL")


def test_demo_refuses_a_busy_port(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        result = invoke(
            "demo", "--port", str(port), "--database-url", f"sqlite+aiosqlite:///{tmp_path}/d.db"
        )
    assert_one_line_error(result, 2, "already in use")


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("not a url", "invalid database URL"),
        ("postgresql+asyncpg://postgres@127.0.0.1:1/nope", "cannot use the database"),
        ("postgres://postgres@127.0.0.1:1/nope", "Connect call failed"),
        ("mysql+pymysql://root@127.0.0.1:1/nope", "'pymysql' is not an asyncio driver"),
    ],
)
def test_demo_database_errors(url: str, fragment: str) -> None:
    result = invoke("demo", "--port", "0", "--database-url", url, "--no-live")
    assert_one_line_error(result, 2, fragment)


@pytest.mark.parametrize(
    ("target", "fragment"),
    [
        ("nocolon", "expected MODULE:FACTORY"),
        ("tests.cli.no_such_module:factory", "cannot import"),
        ("tests.cli.runtime_app:missing", "no attribute"),
        ("tests.cli.runtime_app:NOT_CALLABLE", "not callable"),
        ("tests.cli.runtime_app:not_a_runtime", "expected an AsterRuntime"),
    ],
)
def test_run_rejects_bad_targets(target: str, fragment: str) -> None:
    assert_one_line_error(invoke("run", target), 2, fragment)


def _run(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.parametrize("factory", ["short_lived", "built_async"])
def test_run_a_factory_to_completion(factory: str) -> None:
    done = _run("run", f"tests.cli.runtime_app:{factory}")
    assert done.returncode == 0, done.stderr
    assert "service started" in done.stdout
    assert "resource_close" in done.stdout and "1 phases, 0 failed" in done.stdout


def test_run_stops_on_sigterm() -> None:
    proc = subprocess.Popen(
        [*CLI, "run", "tests.cli.runtime_app:until_signal"],
        cwd=REPO,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "service started"
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "resource_close" in out and "Traceback" not in err


def test_python_m_demo_is_an_alias() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "aster_forge._demo", "--help"],
        cwd=REPO,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0
    assert "--duration" in done.stdout and "--admin-token" in done.stdout


def test_lanes_pause_list_and_resume(seeded_url: str) -> None:
    paused = invoke("lanes", "pause", "media", "--database-url", seeded_url)
    assert paused.exit_code == 0, paused.output
    assert "lane media paused" in paused.stdout
    listed = invoke("lanes", "list", "--json", "--database-url", seeded_url)
    assert listed.exit_code == 0, listed.output
    rows = {row["lane"]: row for row in json.loads(listed.stdout)["items"]}
    assert rows["media"]["paused"] is True and rows["media"]["paused_at"]
    table = invoke("lanes", "list", "--database-url", seeded_url)
    assert "paused" in table.stdout and "media" in table.stdout
    resumed = invoke("lanes", "resume", "media", "--database-url", seeded_url)
    assert resumed.exit_code == 0 and "lane media resumed" in resumed.stdout
    again = json.loads(invoke("lanes", "list", "--json", "--database-url", seeded_url).stdout)
    assert {row["lane"]: row for row in again["items"]}["media"]["paused"] is False


def test_lanes_pause_refuses_a_bad_lane_in_one_line(seeded_url: str) -> None:
    result = invoke("lanes", "pause", " media", "--database-url", seeded_url)
    assert_one_line_error(result, 2, "invalid lane")
