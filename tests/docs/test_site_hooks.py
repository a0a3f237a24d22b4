"""The MkDocs hooks: nav entries of missing pages are dropped; results files are spliced."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from ._blocks import DOCS

MKDOCS_YML = DOCS.parent / "mkdocs.yml"


def _hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_site_hooks", DOCS / "_hooks" / "site.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _nav_targets() -> list[str]:
    return re.findall(r"^\s+- [^:\n]+: (\S+\.md)$", MKDOCS_YML.read_text(), re.M)


def test_every_page_is_in_the_nav() -> None:
    listed = set(_nav_targets())
    pages = {
        page.relative_to(DOCS).as_posix()
        for page in DOCS.rglob("*.md")
        if "_hooks" not in page.relative_to(DOCS).parts
    }
    assert not pages - listed, f"pages missing from mkdocs.yml nav: {sorted(pages - listed)}"


def test_missing_pages_are_left_out_of_the_nav(tmp_path: Path) -> None:
    (tmp_path / "here.md").write_text("# here\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "also.md").write_text("# also\n")
    config: dict[str, Any] = {
        "docs_dir": str(tmp_path),
        "nav": [
            {"Here": "here.md"},
            {"Later": "later.md"},
            {"Group": [{"Also": "sub/also.md"}, {"Gone": "sub/gone.md"}]},
            {"Empty": [{"Gone": "gone.md"}]},
            "here.md",
            "later.md",
        ],
    }
    assert _hooks().on_config(config)["nav"] == [
        {"Here": "here.md"},
        {"Group": [{"Also": "sub/also.md"}]},
        "here.md",
    ]


PAGE = """# Benchmarks

<!-- results: results/suite.md -->
No results yet.
<!-- end-results -->

tail
"""


def test_results_fallback_when_the_file_is_missing(tmp_path: Path) -> None:
    out = _hooks().splice_results(PAGE, tmp_path)
    assert "No results yet." in out
    assert "results:" not in out and "end-results" not in out
    assert out.endswith("tail\n")


def test_results_splices_the_named_file(tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    (results / "other.md").write_text("# Other\n\nother figures\n")
    (results / "suite.md").write_text("# Run\n\n## Table\n\n| a |\n|---|\n| 1 |\n")
    out = _hooks().splice_results(PAGE, tmp_path)
    assert "other figures" not in out
    assert "No results yet." not in out
    assert "`results/suite.md`" in out
    assert "## Run\n" in out and "### Table\n" in out  # headings demoted one level
    assert out.endswith("tail\n")


SPLICED = re.compile(r"^<!-- results: (\S+) -->$", re.M)


@pytest.mark.parametrize("page", ["benchmarks.md", "chaos.md"])
def test_result_pages_splice_committed_results_files(page: str) -> None:
    text = (DOCS / page).read_text()
    paths = SPLICED.findall(text)
    assert paths and text.count("<!-- end-results -->") == len(paths)
    for path in paths:
        assert (DOCS.parent / path).is_file(), f"{page} splices {path}, which does not exist"
