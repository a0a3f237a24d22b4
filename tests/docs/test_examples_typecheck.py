"""Every runnable ``python`` example on the guide pages passes ``mypy --strict``.

A reader copies these blocks into a typed code base, so they must type-check as they
stand. Each page becomes one module: its blocks, in order, inside one ``async def``
(the pages use top-level ``await``, ``async with`` and ``async for``), each line at its
page line number, so an error reads ``docs/page.md:LINE``. The project's own mypy
configuration applies (strict, pydantic plugin).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from ._blocks import DOCS, code_blocks, example_pages

REPO = DOCS.parent
_HEADER = "async def _page() -> None:"
_ERROR = re.compile(r"^(?P<file>[^:]+\.py):(?P<line>\d+): (?P<message>error: .*)$")


def page_module(page: Path) -> str | None:
    """The page's runnable blocks as one module (``None`` when it has none)."""
    blocks = [b for b in code_blocks(page) if b.language in {"python", "py"} and not b.no_run]
    if not blocks:
        return None
    lines = [_HEADER]
    for block in blocks:
        # The block's first source line is page line block.line + 1.
        lines.extend([""] * (block.line - len(lines)))
        lines.extend(f"    {line}" if line.strip() else "" for line in block.source.splitlines())
    return "\n".join(lines) + "\n"


def test_page_examples_pass_mypy_strict(tmp_path: Path) -> None:
    modules: dict[str, Path] = {}
    for page in example_pages():
        source = page_module(page)
        if source is None:
            continue
        where = page.relative_to(DOCS) if page.is_relative_to(DOCS) else Path(page.name)
        name = "docs_" + re.sub(r"\W", "_", where.with_suffix("").as_posix())
        (tmp_path / f"{name}.py").write_text(source, encoding="utf-8")
        modules[name] = page
    assert {"docs_README", "docs_adopting", "docs_tasks", "docs_lifecycle"} <= set(modules)
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(REPO / "pyproject.toml"),
            "--cache-dir",
            str(REPO / ".mypy_cache"),
            *(str(tmp_path / f"{name}.py") for name in sorted(modules)),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    errors = []
    for line in completed.stdout.splitlines():
        match = _ERROR.match(line)
        if match is not None:
            page = modules[Path(match["file"]).stem]
            errors.append(f"{page.relative_to(REPO)}:{match['line']}: {match['message']}")
    assert completed.returncode == 0 and not errors, (
        "\n".join(errors) or completed.stdout + completed.stderr
    )
