"""Helpers for tests that run ``aster-forge demo`` in a subprocess."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx

T = TypeVar("T")

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "aster_forge.cli"]


def free_port() -> int:
    """A TCP port that was free a moment ago on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cli_env(**extra: str) -> dict[str, str]:
    """The environment for a CLI subprocess (no coverage/terminal surprises)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASTER_FORGE_")}
    env.update({"PYTHONUNBUFFERED": "1", "COLUMNS": "160", "TERM": "dumb"})
    env.update(extra)
    return env


class DemoProcess:
    """``aster-forge demo`` in a subprocess; output goes to files read after exit."""

    def __init__(self, database_url: str, workdir: Path, *args: str, duration: float = 60) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.report = workdir / f"report-{self.port}.json"
        self._out = tempfile.NamedTemporaryFile(  # noqa: SIM115 - closed in stop()
            "w+", dir=workdir, prefix="demo-out-", suffix=".txt", delete=False
        )
        self._err = tempfile.NamedTemporaryFile(  # noqa: SIM115 - closed in stop()
            "w+", dir=workdir, prefix="demo-err-", suffix=".txt", delete=False
        )
        command = [
            *CLI,
            "demo",
            "--database-url",
            database_url,
            "--port",
            str(self.port),
            "--duration",
            str(duration),
            "--no-live",
            "--pace",
            "0.1",
            "--report-json",
            str(self.report),
            *args,
        ]
        self.proc = subprocess.Popen(
            command, cwd=workdir, env=cli_env(), stdout=self._out, stderr=self._err
        )
        self.stdout = ""
        self.stderr = ""

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        """GET ``path`` on the demo's HTTP server."""
        return httpx.get(self.base + path, timeout=5.0, **kwargs)

    def post(self, path: str, **kwargs: Any) -> httpx.Response:
        """POST ``path`` on the demo's HTTP server."""
        return httpx.post(self.base + path, timeout=5.0, **kwargs)

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Poll ``/readyz`` until it answers 200 (fails with the output if the process died)."""
        self.wait_for(lambda: self.get("/readyz").status_code == 200 or None, timeout, "ready")

    def wait_for(self, probe: Callable[[], T | None], timeout: float, what: str) -> T:
        """Call ``probe`` every 0.25 s until it returns a value other than ``None``/``False``."""
        deadline = time.monotonic() + timeout
        last: BaseException | None = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.collect()
                raise AssertionError(
                    f"demo exited ({self.proc.returncode}) waiting for {what}:\n"
                    f"{self.stdout}\n{self.stderr}"
                )
            try:
                value = probe()
            except (httpx.HTTPError, KeyError, ValueError) as exc:
                last = exc
                value = None
            if value is not None and value is not False:
                return value
            time.sleep(0.25)
        raise AssertionError(f"timed out waiting for {what} (last error: {last!r})")

    def instance(self) -> str:
        """The instance id the demo printed on stdout."""
        for line in Path(self._out.name).read_text().splitlines():
            if line.startswith("aster-forge demo: instance "):
                return line.rsplit(" ", 1)[1]
        raise AssertionError("the demo did not print its instance id")

    def signal(self, sig: int) -> None:
        """Send ``sig`` to the process."""
        self.proc.send_signal(sig)

    def wait(self, timeout: float = 45.0) -> int:
        """Wait for exit; return the code (output collected)."""
        try:
            code = self.proc.wait(timeout)
        finally:
            self.collect()
        return code

    def collect(self) -> None:
        """Read the output files."""
        self.stdout = Path(self._out.name).read_text()
        self.stderr = Path(self._err.name).read_text()

    def stop(self) -> None:
        """Make sure the process is gone (SIGTERM, then SIGKILL)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._out.close()
        self._err.close()
        self.collect()
