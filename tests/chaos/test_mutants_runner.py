"""The mutation runner itself: every mutant still matches the code, and the runner can say
"survived" and "snippet not found" (so ``make mutants`` is a check that can fail)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from . import mutants
from ._mutant_catalog import CONTROL, MUTANTS, Edit, Mutant

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_every_mutant_snippet_matches_the_code_exactly_once(tmp_path: Path) -> None:
    for mutant in (*MUTANTS, CONTROL):
        tree = tmp_path / mutant.name
        for edit in mutant.edits:
            target = tree / edit.path
            target.parent.mkdir(parents=True, exist_ok=True)
            if not target.exists():
                shutil.copy(REPO_ROOT / edit.path, target)
        mutants.apply(mutant, tree)
        for edit in mutant.edits:
            changed = (tree / edit.path).read_text(encoding="utf-8")
            assert edit.replacement in changed, mutant.name
        if mutant.expect_killed:
            assert any(e.original != e.replacement for e in mutant.edits), mutant.name


def test_mutant_names_are_unique_and_each_names_its_tests() -> None:
    names = [m.name for m in (*MUTANTS, CONTROL)]
    assert len(names) == len(set(names))
    for mutant in MUTANTS:
        assert mutant.tests and mutant.expect_killed
        for test in mutant.tests:
            assert (REPO_ROOT / test.split("::")[0]).is_file(), test
    assert not CONTROL.expect_killed


def test_a_snippet_that_moved_fails_loudly(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("x = 1\nx = 1\n", encoding="utf-8")
    moved = Mutant("moved", "nothing", (Edit("m.py", "y = 2", "y = 3"),), ("t.py",))
    twice = Mutant("twice", "nothing", (Edit("m.py", "x = 1", "x = 2"),), ("t.py",))
    for mutant in (moved, twice):
        with pytest.raises(mutants.SnippetNotFoundError, match="snippet not found"):
            mutants.apply(mutant, tmp_path)
    assert (tmp_path / "m.py").read_text(encoding="utf-8") == "x = 1\nx = 1\n"


@pytest.mark.slow
def test_a_surviving_mutant_is_reported_as_such(tmp_path: Path) -> None:
    """A mutant whose tests pass is a survivor, and the run is not ok (exit status 1).

    Slow (two pytest subprocesses); ``make mutants`` checks the same with its control.
    """
    base = tmp_path / "base"
    (base / "src").mkdir(parents=True)
    (base / "src" / "calc.py").write_text("def add(a, b):\n    return a + b\n", "utf-8")
    (base / "test_calc.py").write_text(
        "import calc\n\n\ndef test_add() -> None:\n    assert calc.add(2, 2) == 4\n", "utf-8"
    )
    (base / "pyproject.toml").write_text("[tool.pytest.ini_options]\n", "utf-8")
    survivor = Mutant(
        "sub-zero",
        "adds a zero",
        (Edit("src/calc.py", "return a + b", "return a + b + 0"),),
        ("test_calc.py",),
    )
    killed = Mutant(
        "minus",
        "subtracts",
        (Edit("src/calc.py", "return a + b", "return a - b"),),
        ("test_calc.py",),
    )
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    lived = mutants.run_mutant(survivor, base, scratch)
    died = mutants.run_mutant(killed, base, scratch)
    assert (lived.verdict, lived.ok) == ("survived", False)
    assert (died.verdict, died.ok) == ("killed", True)
    assert died.killed_by.startswith("test_calc.py::test_add")
    assert "SURVIVED" in mutants.render([lived, died], "passed", 1.0, "0.0")
    assert "DID NOT RUN" in mutants.render([], "FAILED", 1.0, "0.0")
