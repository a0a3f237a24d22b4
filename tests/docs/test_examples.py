"""Every ``python`` example on the guide pages runs.

Each page's blocks run in order in one fresh namespace, in a fresh temporary working
directory (SQLite files land there). Top-level ``await`` is allowed: such a block runs on
one event loop per page. A block right after a ``<!-- no-run -->`` comment is skipped;
use that only for fragments that cannot run on their own (a shell session, a sketch of
a product's private module).
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import os
import sys
import traceback
import types
from pathlib import Path

import pytest

from ._blocks import CodeBlock, code_blocks, example_pages

PAGES = example_pages()


def _runnable(page: Path) -> list[CodeBlock]:
    return [b for b in code_blocks(page) if b.language in {"python", "py"} and not b.no_run]


RUNNABLE = [page for page in PAGES if _runnable(page)]


def _run_blocks(blocks: list[CodeBlock], namespace: dict[str, object]) -> None:
    loop = asyncio.new_event_loop()
    try:
        for block in blocks:
            # Leading newlines make traceback line numbers those of the page.
            source = "\n" * block.line + block.source
            filename = str(block.path.relative_to(block.path.parents[1]))
            code = compile(source, filename, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
            try:
                if code.co_flags & inspect.CO_COROUTINE:
                    loop.run_until_complete(eval(code, namespace))
                else:
                    exec(code, namespace)
            except BaseException as exc:
                detail = "".join(traceback.format_exception(exc))
                pytest.fail(f"example at {block.location} failed:\n{detail}", pytrace=False)
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


@pytest.mark.parametrize("page", RUNNABLE, ids=[page.name for page in RUNNABLE])
def test_page_examples_run(
    page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    blocks = _runnable(page)
    # A real module, so dataclasses, pydantic and pickling can resolve the page's names.
    module = types.ModuleType(f"docs_example_{page.stem.replace('-', '_')}")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [str(page)])
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    _run_blocks(blocks, vars(module))
    capsys.readouterr()
    assert os.getcwd() == str(tmp_path)


def test_guides_are_found() -> None:
    names = {page.name for page in RUNNABLE}
    assert {"README.md", "tasks.md", "health.md", "lifecycle.md"} <= names
