"""The chaos results table: scenario, tasks, faults injected, lost, duplicated, stuck, result.

Every chaos scenario calls :func:`record` with what it measured; the chaos
``conftest.py`` prints the table at the end of the pytest session and, when a long
(``slow``) scenario ran, replaces ``tests/chaos/results/chaos.md`` (which
``docs/chaos.md`` shows) and ``chaos.json`` (the same results as data).

Run ``python -m tests.chaos.report tests/chaos/results/chaos.json`` to render a saved
JSON result list as the table.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path

from benchmarks import _results
from benchmarks._common import postgres_base_url

__all__ = ["RESULTS", "ScenarioResult", "record", "render_markdown", "write_report"]

RESULTS_DIR = Path(__file__).resolve().parent / "results"
#: What ``make chaos`` runs.
COMMAND = "python -m pytest tests/chaos -m slow --timeout=900 -p no:cacheprovider"


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


def render_markdown(results: list[ScenarioResult]) -> str:
    """Render the results as a Markdown table."""
    lines = [
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


def write_report(
    results: list[ScenarioResult],
    *,
    command: str = COMMAND,
    when: datetime | None = None,
    directory: Path = RESULTS_DIR,
    databases: list[str] | None = None,
) -> Path:
    """Replace ``chaos.md`` (the header and the table) and ``chaos.json`` in ``directory``.

    ``databases`` defaults to the version of the PostgreSQL server the scenarios use.
    """
    if databases is None:
        databases = _results.database_versions([postgres_base_url()])
    head = _results.header("Chaos results", command=command, databases=databases, when=when)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "chaos.md"
    path.write_text("\n".join(head) + "\n" + render_markdown(results), encoding="utf-8")
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
