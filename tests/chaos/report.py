"""The chaos results table: scenario, tasks, faults injected, lost, duplicated, stuck, result.

Every chaos scenario calls :func:`record` with what it measured; the chaos
``conftest.py`` prints the table at the end of the pytest session and, when a long
(``slow``) scenario ran, writes it to ``benchmarks/results/chaos-<date>.md``.

Run ``python -m tests.chaos.report results.json`` to render a saved JSON result list.
"""

from __future__ import annotations

import json
import os
import platform
import sys
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

__all__ = ["RESULTS", "ScenarioResult", "record", "render_markdown", "write_report"]

REPO_ROOT = Path(__file__).resolve().parents[2]
RESULTS_DIR = REPO_ROOT / "benchmarks" / "results"
DOCS_RESULTS_DIR = Path(__file__).resolve().parent / "results"
"""``docs/chaos.md`` splices in the newest ``tests/chaos/results/<date>.md``."""


@dataclass(frozen=True, slots=True)
class ScenarioResult:
    """What one chaos scenario measured.

    Attributes:
        scenario: A short name (``"worker crashes (postgres)"``).
        tasks: Tasks (or records) pushed through the scenario.
        faults: Faults injected, described (``"17 SIGKILL"``).
        lost: Tasks/records that never reached their final state.
        duplicated: Tasks whose effect was applied twice, or that two live workers ran
            at the same time.
        stuck: Tasks left running or pending at the end.
        result: ``"pass"`` or ``"FAIL: ..."``.
        long: Whether it was the long (``slow``) version.
        extra: Other measurements, one short text.
    """

    scenario: str
    tasks: int
    faults: str
    lost: int
    duplicated: int
    stuck: int
    result: str
    long: bool = False
    extra: str = ""


RESULTS: list[ScenarioResult] = []


def record(result: ScenarioResult) -> ScenarioResult:
    """Add ``result`` to this session's table (and return it)."""
    RESULTS.append(result)
    return result


def render_markdown(results: list[ScenarioResult], *, when: datetime | None = None) -> str:
    """Render the results as a Markdown table with the date and the machine's size."""
    when = when or datetime.now(UTC)
    cores = os.cpu_count() or 0
    try:
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        memory = f"{pages / 2**30:.0f} GiB"
    except (ValueError, OSError, AttributeError):
        memory = "unknown memory"
    lines = [
        f"Chaos run {when:%Y-%m-%d %H:%M} UTC on {cores} cores, {memory} "
        f"({platform.system()} {platform.machine()}, Python {platform.python_version()}).",
        "",
        "| scenario | version | tasks | faults injected | lost | duplicated | stuck | result "
        "| notes |",
        "| --- | --- | ---: | --- | ---: | ---: | ---: | --- | --- |",
    ]
    for r in results:
        version = "long" if r.long else "short"
        lines.append(
            f"| {r.scenario} | {version} | {r.tasks:,} | {r.faults} | {r.lost} | "
            f"{r.duplicated} | {r.stuck} | {r.result} | {r.extra} |"
        )
    return "\n".join(lines) + "\n"


def write_report(results: list[ScenarioResult], *, when: datetime | None = None) -> Path:
    """Write the table to ``benchmarks/results/chaos-<date>.md`` (plus a JSON copy) and
    to ``tests/chaos/results/<date>.md`` (the file the documentation site shows)."""
    when = when or datetime.now(UTC)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    DOCS_RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"chaos-{when:%Y-%m-%d}.md"
    table = render_markdown(results, when=when)
    path.write_text(table, encoding="utf-8")
    (DOCS_RESULTS_DIR / f"{when:%Y-%m-%d}.md").write_text(table, encoding="utf-8")
    path.with_suffix(".json").write_text(
        json.dumps([asdict(r) for r in results], indent=2) + "\n", encoding="utf-8"
    )
    return path


def main(argv: list[str]) -> int:
    """Render saved JSON results (``python -m tests.chaos.report FILE``)."""
    if len(argv) != 1:
        sys.stderr.write("usage: python -m tests.chaos.report RESULTS.json\n")
        return 2
    data = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    sys.stdout.write(render_markdown([ScenarioResult(**item) for item in data]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
