"""``aster-forge worker``'s log lines: a startup line saying what runs where, time and level
on every line, the error text on retry and failure lines, ``--log-format json``."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

from aster_forge import TaskStatus
from aster_forge._cli._logs import JsonLogFormatter, LogFormat, TextLogFormatter
from aster_forge._cli._worker import database_label

from ..cli._support import CLI, REPO, cli_env
from ._failing_product import build_forge
from ._product import URL_ENV

TARGET = "tests.forge._failing_product:forge"
PAYLOAD = 987654321  # never logged
ERROR = "ConnectionRefusedError: smtp.example.com:25 refused the connection"
TEXT_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (DEBUG|INFO|WARNING|ERROR) \S+: ")


def test_the_database_label_carries_no_credentials() -> None:
    assert database_label("postgresql+asyncpg://app:s3cret@db.internal:5432/shop") == (
        "postgresql+asyncpg://db.internal:5432/shop"
    )
    assert (
        database_label("sqlite+aiosqlite:///var/lib/app.db") == "sqlite+aiosqlite:///var/lib/app.db"
    )
    assert database_label(None) == "memory"


def test_formatters_put_utc_time_and_level_first() -> None:
    record = logging.LogRecord(
        "aster_forge.x", logging.WARNING, "f.py", 1, "hello %s", ("w",), None
    )
    record.created = 0.25
    record.msecs = 250.0
    record.task_id = 7
    assert TextLogFormatter().format(record) == (
        "1970-01-01T00:00:00.250Z WARNING aster_forge.x: hello w"
    )
    assert json.loads(JsonLogFormatter().format(record)) == {
        "time": "1970-01-01T00:00:00.250Z",
        "level": "WARNING",
        "logger": "aster_forge.x",
        "message": "hello w",
        "task_id": 7,
    }


async def _run_worker_until_the_task_failed(
    forge_url: str, tmp_path: Path, log_format: LogFormat
) -> str:
    """Start the worker, enqueue one failing task, stop the worker once it failed."""
    env = cli_env(**{URL_ENV: forge_url})
    migrated = await asyncio.to_thread(
        subprocess.run,
        [*CLI, "migrate", TARGET],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert migrated.returncode == 0, migrated.stderr
    errors = (tmp_path / "worker.err").open("w+")
    worker = subprocess.Popen(  # noqa: ASYNC220 - started once, waited in a thread
        [*CLI, "worker", TARGET, "--log-format", log_format.value],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=errors,
    )
    producer = build_forge(forge_url)
    try:
        made = await producer.tasks[0].enqueue(PAYLOAD)
        for _ in range(800):  # the worker's poll is 50 ms; both attempts fail at once
            record = await producer.get_task(made.task_id)
            assert record is not None
            if record.status is TaskStatus.FAILED:
                break
            await asyncio.sleep(0.025)
        assert record is not None and record.status is TaskStatus.FAILED, record
    finally:
        worker.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(worker.wait, 30)
        await producer.aclose()
        errors.seek(0)
        output = errors.read()
        errors.close()
    assert code == 0, output
    return output


# The log lines do not depend on the database: SQLite and PostgreSQL cover them.
@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
@pytest.mark.parametrize("log_format", list(LogFormat))
async def test_worker_logs_say_what_runs_where_and_why_a_task_failed(
    forge_url: str, tmp_path: Path, log_format: LogFormat
) -> None:
    output = await _run_worker_until_the_task_failed(forge_url, tmp_path, log_format)
    if log_format is LogFormat.JSON:
        lines = [json.loads(line) for line in output.splitlines()]
        assert all(set(line) >= {"time", "level", "logger", "message"} for line in lines)
        assert all(line["time"].endswith("Z") for line in lines)
        messages = [line["message"] for line in lines]
        retry = next(line for line in lines if "retrying" in line["message"])
        assert retry["level"] == "WARNING" and retry["task_kind"] == "send_invoice"
        final = next(line for line in lines if "no attempts left" in line["message"])
        assert final["level"] == "ERROR" and "Traceback" in final["exc_info"]
        # The product's own lines from the body name the task they came from.
        own = [line for line in lines if line["logger"] == "billing.invoices"]
        assert [line["task_attempt"] for line in own] == [1, 2]
        assert {(line["task_kind"], line["task_lane"]) for line in own} == {
            ("send_invoice", "mail")
        }
        assert len({line["task_id"] for line in own}) == 1
    else:
        lines = [line for line in output.splitlines() if TEXT_LINE.match(line)]
        # A line that does not start with time and level continues a traceback.
        assert all(
            TEXT_LINE.match(line) or line.startswith((" ", "Traceback", "ConnectionRefusedError"))
            for line in output.splitlines()
        ), output
        messages = [TEXT_LINE.sub("", line) for line in lines]
        assert any(" WARNING aster_forge.tasks.execution: " in line for line in lines)
        assert any(" ERROR aster_forge.tasks.execution: " in line for line in lines)
    expected_db = re.sub(r"//[^@/]*@", "//", forge_url)
    assert messages[0] == (
        f"worker billing (pid {_pid(messages[0])}): lanes mail=3; database {expected_db}"
    )
    assert "@" not in messages[0]
    assert any(
        m.endswith(f"attempt 1/2 failed (retryable, retrying in 0.0s): {ERROR}") for m in messages
    ), messages
    assert any(
        m.endswith(f"attempt 2/2 failed (retryable, no attempts left): {ERROR}") for m in messages
    ), messages
    assert str(PAYLOAD) not in output


def _pid(line: str) -> int:
    found = re.search(r"\(pid (\d+)\)", line)
    assert found is not None, line
    pid = int(found.group(1))
    assert pid != os.getpid()
    return pid
