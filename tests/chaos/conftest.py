"""Chaos suite hooks: print the results table; write it to tests/chaos/results on long runs."""

from __future__ import annotations

import shlex
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
        args = terminalreporter.config.invocation_params.args
        path = write_report(RESULTS, command=shlex.join(("python", "-m", "pytest", *args)))
        terminalreporter.write_line(f"written to {path}")
