"""The peers' own environment (``benchmarks/.peers-venv``) and calls into it.

Procrastinate and pgqueuer are not project dependencies: the first run creates a
separate virtual environment with ``python -m venv`` and installs them with pip.
When that fails (no registry access) the peers are reported as skipped.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from ._common import asyncpg_dsn, json_of_process

HERE = Path(__file__).resolve().parent
VENV = HERE / ".peers-venv"
PEERS = ("pgqueuer==1.6.0", "procrastinate==3.10.0", "asyncpg", "pyinstrument")


def _python() -> Path:
    return VENV / "bin" / "python"


def ensure_peers_venv() -> str | None:
    """Create the peers' venv if missing; return why it is unusable, or ``None``."""
    python = _python()
    check = [str(python), "-c", "import pgqueuer, procrastinate, asyncpg"]
    if python.exists() and subprocess.run(check, capture_output=True).returncode == 0:
        return None
    try:
        if not python.exists():
            subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", *PEERS],
            check=True,
            capture_output=True,
        )
    except (OSError, subprocess.CalledProcessError) as exc:
        return f"peers' venv could not be set up ({type(exc).__name__})"
    if subprocess.run(check, capture_output=True).returncode != 0:
        return "peers' venv has no pgqueuer/procrastinate"
    return None


def peer_versions() -> dict[str, str]:
    """Installed peer versions (empty when the venv is unusable)."""
    code = (
        "import json, importlib.metadata as m;"
        "print(json.dumps({n: m.version(n) for n in ('pgqueuer', 'procrastinate')}))"
    )
    result = subprocess.run([str(_python()), "-c", code], capture_output=True, text=True)
    return json.loads(result.stdout) if result.returncode == 0 else {}


async def run_peer(
    system: str, scenario: str, url: str, count: int, concurrency: int
) -> dict[str, Any]:
    """Run one peer scenario in the peers' venv; the JSON it printed."""
    result = await json_of_process(
        str(_python()),
        str(HERE / "peer_runner.py"),
        system,
        scenario,
        asyncpg_dsn(url),
        str(count),
        str(concurrency),
        what=f"{system} {scenario}",
    )
    if not result.get("checked"):
        raise SystemExit(f"{system} {scenario}: exactly-once check failed: {result}")
    return result


class PeerServer:
    """A peer's ``serve`` scenario kept running: timed work on command (see peer_runner)."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self._process = process

    @classmethod
    async def start(cls, system: str, url: str) -> PeerServer:
        """Start ``system``'s server on ``url``; returns once it is ready."""
        process = await asyncio.create_subprocess_exec(
            str(_python()),
            str(HERE / "peer_runner.py"),
            system,
            "serve",
            asyncpg_dsn(url),
            "0",
            "1",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        server = cls(process)
        await server._answer()
        return server

    async def _answer(self) -> dict[str, Any]:
        assert self._process.stdout is not None
        line = await asyncio.wait_for(self._process.stdout.readline(), 300)
        if not line:
            raise RuntimeError("peer server exited")
        answer: dict[str, Any] = json.loads(line)
        return answer

    async def run(self, command: str, n: int) -> float:
        """Run ``command`` (``single`` or ``bulk``) for ``n`` jobs; the seconds it took."""
        assert self._process.stdin is not None
        self._process.stdin.write(f"{command} {n}\n".encode())
        await self._process.stdin.drain()
        return float((await self._answer())["elapsed"])

    async def close(self) -> bool:
        """Stop the server; whether its final row-count check passed."""
        assert self._process.stdin is not None
        self._process.stdin.write(b"quit\n")
        await self._process.stdin.drain()
        result = await self._answer()
        await self._process.wait()
        return bool(result.get("checked"))
