"""``make mutants``: apply each mutant to a scratch copy of the tree and run its tests.

``python -m tests.chaos.mutants [--only NAME ...] [--ref REF] [--list]``

The committed tree (``git archive REF``) is unpacked into a temporary directory once;
every mutant gets its own copy of it with the mutant's edits applied, and its tests run
there (``PYTHONPATH=<copy>/src``, so the mutated package is imported, also by the
chaos worker processes, without installing anything). The working tree is never
touched. First the unmutated copy must pass every selected test (else a "kill" would
mean nothing); then each mutant runs its tests in order with ``-x``: the first failing
test killed it. A no-op control mutant must survive, so the check itself can fail.
A full run (no ``--only``) replaces ``tests/chaos/results/mutants.md``.

Exit status 0 only when the baseline passed, every mutant was killed and the control
survived; 1 otherwise; 2 when a mutant's snippet is no longer in the code.
"""

from __future__ import annotations

import argparse
import io
import os
import shlex
import shutil
import sqlite3
import subprocess
import sys
import tarfile
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from benchmarks import _results

from ._mutant_catalog import CONTROL, MUTANTS, Mutant

REPO_ROOT = Path(__file__).resolve().parents[2]
RESULTS_DIR = Path(__file__).resolve().parent / "results"
DEFAULT_ENV = {
    "CI": "true",
    "ASTER_FORGE_TEST_POSTGRES_URL": "postgresql+asyncpg://postgres@127.0.0.1:5432/test",
    "ASTER_FORGE_TEST_MYSQL_URL": "mysql+aiomysql://root@127.0.0.1:3306/test",
}


class SnippetNotFoundError(Exception):
    """Raised when a mutant's original snippet is not found exactly once in its file."""


@dataclass(frozen=True, slots=True)
class MutantResult:
    """What running one mutant's tests showed."""

    name: str
    breaks: str
    verdict: str
    """``killed``, ``survived`` or ``error`` (pytest could not run the tests)."""
    killed_by: str
    tests: list[str]
    seconds: float
    expect_killed: bool

    @property
    def ok(self) -> bool:
        """Whether the verdict is the expected one."""
        return self.verdict == ("killed" if self.expect_killed else "survived")


def unpack(ref: str, into: Path) -> Path:
    """``git archive ref`` unpacked into ``into/base``."""
    archive = subprocess.run(
        ["git", "archive", "--format=tar", ref], cwd=REPO_ROOT, check=True, capture_output=True
    ).stdout
    base = into / "base"
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(base, filter="data")
    return base


def apply(mutant: Mutant, tree: Path) -> None:
    """Apply ``mutant``'s edits in ``tree``; every snippet must occur exactly once."""
    for edit in mutant.edits:
        path = tree / edit.path
        text = path.read_text(encoding="utf-8") if path.exists() else ""
        count = text.count(edit.original)
        if count != 1:
            raise SnippetNotFoundError(
                f"mutant {mutant.name}: snippet not found exactly once in {edit.path} "
                f"(found {count}x): {edit.original[:80]!r}"
            )
        path.write_text(text.replace(edit.original, edit.replacement), encoding="utf-8")


def run_tests(tree: Path, tests: list[str], *, first_failure: bool) -> tuple[int, str, float]:
    """Run pytest in ``tree``; return (exit code, first failed test id, seconds)."""
    report = tree / ".mutant-junit.xml"
    env = {**DEFAULT_ENV, **os.environ, "PYTHONPATH": str(tree / "src")}
    env.pop("COVERAGE_PROCESS_START", None)
    command = [
        sys.executable,
        "-m",
        "pytest",
        *tests,
        "-q",
        "-p",
        "no:cacheprovider",
        "--no-cov",
        "-o",
        "addopts=",
        "-m",
        "not slow",
        f"--junitxml={report}",
        *(["-x"] if first_failure else []),
    ]
    started = time.monotonic()
    done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True)
    seconds = time.monotonic() - started
    failed = _first_failure(report)
    if done.returncode not in (0, 1) or (done.returncode == 1 and not failed):
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
        failed = f"pytest exit {done.returncode}: {tail}"
    return done.returncode, failed, seconds


def _first_failure(report: Path) -> str:
    if not report.exists():
        return ""
    for case in ET.parse(report).getroot().iter("testcase"):
        problem = case.find("failure")
        if problem is None:
            problem = case.find("error")
        if problem is not None:
            module = case.get("classname", "").replace(".", "/")
            message = " ".join((problem.get("message") or "").split())[:160]
            return f"{module}.py::{case.get('name', '')} ({message})"
    return ""


def run_mutant(mutant: Mutant, base: Path, scratch: Path) -> MutantResult:
    """Copy ``base``, apply ``mutant`` and run its tests."""
    tree = scratch / mutant.name
    shutil.copytree(base, tree, symlinks=True)
    try:
        apply(mutant, tree)
        code, failed, seconds = run_tests(tree, list(mutant.tests), first_failure=True)
    finally:
        shutil.rmtree(tree, ignore_errors=True)
    if code == 0:
        verdict, killer = "survived", ""
    elif code == 1 and not failed.startswith("pytest exit"):
        verdict, killer = "killed", failed
    else:
        verdict, killer = "error", failed
    return MutantResult(
        mutant.name,
        mutant.breaks,
        verdict,
        killer,
        list(mutant.tests),
        round(seconds, 1),
        mutant.expect_killed,
    )


def render(results: list[MutantResult], baseline: str, total: float, load: str) -> str:
    """The Markdown report (without the header :func:`write_report` adds)."""
    killed = sum(1 for r in results if r.expect_killed and r.verdict == "killed")
    expected = sum(1 for r in results if r.expect_killed)
    controls = [r for r in results if not r.expect_killed]
    if not controls:
        control = "DID NOT RUN"
    elif all(r.ok for r in controls):
        control = "survived (as it must)"
    else:
        control = "WAS KILLED: the check is broken"
    lines = [
        f"Load average at start {load}.",
        "",
        f"**{killed} of {expected} mutants killed**; the no-op control "
        f"{control}; "
        f"baseline (unmutated copy): {baseline}; total {total / 60:.1f} min.",
        "",
        "| mutant | breaks | verdict | killed by | seconds |",
        "| --- | --- | --- | --- | ---: |",
    ]
    for r in results:
        verdict = r.verdict if r.ok else f"**{r.verdict.upper()}**"
        lines.append(
            f"| `{r.name}` | {r.breaks} | {verdict} | {_cell(r.killed_by) or '-'} | {r.seconds} |"
        )
    lines += [
        "",
        "Each mutant ran, with `-x`, these tests in this order (chaos scenarios first):",
        "",
    ]
    lines += [f"- `{r.name}`: {', '.join(f'`{t}`' for t in r.tests)}" for r in results]
    return "\n".join(lines) + "\n"


def write_report(
    report: str, ref: str, commit: str, started: datetime, directory: Path = RESULTS_DIR
) -> Path:
    """Replace ``mutants.md`` in ``directory``: the header (``commit``: what ``ref`` named
    when the run unpacked it), then ``report``."""
    env = {**DEFAULT_ENV, **os.environ}
    urls = [env["ASTER_FORGE_TEST_POSTGRES_URL"], env["ASTER_FORGE_TEST_MYSQL_URL"]]
    databases = [*_results.database_versions(urls), f"SQLite {sqlite3.sqlite_version}"]
    arguments = [] if ref == "HEAD" else ["--ref", ref]
    head = _results.header(
        "Mutation check",
        command=shlex.join(["python", "-m", "tests.chaos.mutants", *arguments]),
        databases=databases,
        tree=f"`{commit}` (`git archive {ref}`)",
        when=started,
    )
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "mutants.md"
    path.write_text("\n".join(head) + "\n" + report, encoding="utf-8")
    return path


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")[:300]


def _say(text: str, *, err: bool = False) -> None:
    stream = sys.stderr if err else sys.stdout
    stream.write(text + "\n")
    stream.flush()


def main(argv: list[str]) -> int:
    """Run the mutation check; see the module docstring."""
    parser = argparse.ArgumentParser(prog="python -m tests.chaos.mutants")
    parser.add_argument("--only", nargs="*", default=None, help="mutant names to run")
    parser.add_argument("--ref", default="HEAD", help="the git revision to mutate")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--no-report", action="store_true", help="do not write the report")
    args = parser.parse_args(argv)
    chosen = [m for m in MUTANTS if args.only is None or m.name in args.only]
    if args.list:
        for mutant in (*MUTANTS, CONTROL):
            _say(f"{mutant.name}: {mutant.breaks}")
        return 0
    if args.only is not None and len(chosen) != len(args.only):
        _say(f"unknown mutant in {args.only}", err=True)
        return 2
    mutants = [*chosen, CONTROL]
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    started_at = datetime.now(UTC)
    started = time.monotonic()
    # Read now: commits may land on the branch while the run takes its minutes.
    commit = _results.commit_of(REPO_ROOT, args.ref)
    with tempfile.TemporaryDirectory(prefix="aster-forge-mutants-") as scratch_dir:
        scratch = Path(scratch_dir)
        base = unpack(args.ref, scratch)
        try:
            # Every snippet must still match before anything runs (fail fast, loudly).
            for mutant in mutants:
                probe = scratch / "probe"
                shutil.copytree(base / "src", probe / "src")
                shutil.copytree(base / "tests", probe / "tests")
                try:
                    apply(mutant, probe)
                finally:
                    shutil.rmtree(probe)
        except SnippetNotFoundError as exc:
            _say(f"mutant snippet not found: {exc}", err=True)
            return 2
        selected = list(dict.fromkeys(t for m in mutants for t in m.tests))
        _say(f"baseline: {len(selected)} test selections on the unmutated copy")
        code, failed, seconds = run_tests(base, selected, first_failure=False)
        baseline = f"passed in {seconds:.0f} s" if code == 0 else f"FAILED ({failed})"
        _say(f"baseline {baseline}")
        results: list[MutantResult] = []
        if code == 0:
            for mutant in mutants:
                result = run_mutant(mutant, base, scratch)
                results.append(result)
                _say(f"{result.name}: {result.verdict} {result.killed_by} ({result.seconds} s)")
    total = time.monotonic() - started
    report = render(results, baseline, total, load)
    _say(report)
    if not args.no_report and args.only is None:
        _say(f"written to {write_report(report, args.ref, commit, started_at)}")
    ok = code == 0 and len(results) == len(mutants) and all(r.ok for r in results)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
