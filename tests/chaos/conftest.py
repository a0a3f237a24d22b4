"""Chaos suite hooks: print the results table; write it to benchmarks/results on long runs."""

from __future__ import annotations

import pytest

from .report import RESULTS, render_markdown, write_report


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print the chaos table (and save it when a long scenario ran)."""
    if not RESULTS:
        return
    terminalreporter.section("aster-forge chaos results")
    terminalreporter.write(render_markdown(RESULTS))
    if any(result.long for result in RESULTS):
        path = write_report(RESULTS)
        terminalreporter.write_line(f"written to {path}")
