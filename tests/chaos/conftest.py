"""Chaos suite hooks: print the results table; write it to benchmarks/results on long runs."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from ._proxy import ChaosProxy
from .report import RESULTS, render_markdown, write_report


@pytest.fixture
async def proxy() -> AsyncIterator[ChaosProxy]:
    """A ``ChaosProxy`` in front of the local PostgreSQL server (127.0.0.1:5432)."""
    chaos = ChaosProxy("127.0.0.1", 5432)
    await chaos.start()
    try:
        yield chaos
    finally:
        await chaos.close()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print the chaos table (and save it when a long scenario ran)."""
    if not RESULTS:
        return
    terminalreporter.section("aster-forge chaos results")
    terminalreporter.write(render_markdown(RESULTS))
    if any(result.long for result in RESULTS):
        path = write_report(RESULTS)
        terminalreporter.write_line(f"written to {path}")
