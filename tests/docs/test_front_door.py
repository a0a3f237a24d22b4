"""Guides and examples use the forge's own operations, never its backend's stores."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BACKEND_ACCESS = re.compile(r"\bforge\.backend\b|\.backend\.(task_store|engine|scheduled_store)")


def test_no_guide_or_example_reaches_into_the_backend() -> None:
    pages = [REPO / "README.md", *(REPO / "docs").glob("*.md")]
    sources = [*pages, *(REPO / "examples").rglob("*.py")]
    offenders = [
        f"{path.relative_to(REPO)}:{number}"
        for path in sources
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if BACKEND_ACCESS.search(line)
    ]
    assert not offenders, f"use the Forge's operations instead: {offenders}"
