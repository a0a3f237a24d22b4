"""The core subpackages import none of the optional dependencies."""

from __future__ import annotations

import json
import subprocess
import sys

OPTIONAL = (
    "aiomysql",
    "alembic",
    "asyncpg",
    "click",
    "cronsim",
    "opentelemetry",
    "prometheus_client",
    "rich",
    "starlette",
    "uvicorn",
    "uvloop",
)

_PROBE = """
import json, sys
import aster_forge.runtime, aster_forge.tasks, aster_forge.db, aster_forge.testing
optional = set(json.loads(sys.argv[1]))
print(json.dumps(sorted({name.split(".")[0] for name in sys.modules} & optional)))
"""


def test_core_subpackages_import_no_optional_dependency() -> None:
    # A fresh interpreter: this test process has imported the extras already.
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(OPTIONAL)],
        capture_output=True,
        text=True,
        timeout=50,
        check=True,
    )
    assert json.loads(result.stdout) == []


def test_probe_detects_an_optional_import() -> None:
    # Guards the probe itself: importing the web package does pull in starlette.
    probe = _PROBE.replace("aster_forge.testing", "aster_forge.testing, aster_forge.web")
    result = subprocess.run(
        [sys.executable, "-c", probe, json.dumps(OPTIONAL)],
        capture_output=True,
        text=True,
        timeout=50,
        check=True,
    )
    assert "starlette" in json.loads(result.stdout)


_WITHOUT_TRACING = """
import asyncio, json, sys
if sys.argv[1] == "blocked":
    sys.modules["opentelemetry"] = None  # as if the tracing extra were not installed
from aster_forge import Forge

forge = Forge("memory://")

@forge.task
async def ping(payload: int) -> int:
    return payload

async def main() -> list[object]:
    made = await ping.enqueue(1)
    drained = await forge.drain()
    return [made.record.trace_context, drained.succeeded]

out = asyncio.run(main())
loaded = [n for n, m in sys.modules.items() if n.startswith("opentelemetry") and m is not None]
print(json.dumps([*out, sorted(loaded)]))
"""


def test_tasks_run_without_opentelemetry_and_never_import_it() -> None:
    # Blocked: importing it fails, as without the extra. Installed but not configured by
    # the application: aster-forge does not import it either (nothing to trace into).
    for mode in ("blocked", "installed"):
        result = subprocess.run(
            [sys.executable, "-c", _WITHOUT_TRACING, mode],
            capture_output=True,
            text=True,
            timeout=50,
            check=True,
        )
        assert json.loads(result.stdout) == [None, 1, []], mode
