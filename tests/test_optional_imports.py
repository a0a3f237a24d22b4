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
