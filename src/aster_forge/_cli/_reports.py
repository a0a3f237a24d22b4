"""Printing startup/shutdown reports and runtime errors; their JSON for ``--report-json``."""

from __future__ import annotations

import sys
from typing import Any

from rich.table import Table

from aster_forge.runtime import AsterRuntimeError, ShutdownReport, StartupReport
from aster_forge.runtime.errors import (
    AsterRuntimeServiceError,
    AsterRuntimeShutdownError,
    AsterRuntimeStartupError,
)

from ._output import console

__all__ = [
    "print_runtime_error",
    "print_shutdown_report",
    "shutdown_components",
    "shutdown_report_dict",
    "startup_report_dict",
]


def shutdown_components(report: ShutdownReport) -> list[str]:
    """The components in the order their shutdown phases ran (each once)."""
    seen: list[str] = []
    for phase in report.phases:
        if phase.component is not None and phase.component not in seen:
            seen.append(phase.component)
    return seen


def shutdown_report_dict(report: ShutdownReport | None) -> dict[str, Any] | None:
    """The shutdown report as JSON-ready data (phases in the order they ran)."""
    if report is None:
        return None
    return {**report.to_json_dict(), "components": shutdown_components(report)}


def startup_report_dict(report: StartupReport | None) -> dict[str, Any] | None:
    """The startup report as JSON-ready data."""
    return None if report is None else report.to_json_dict()


def print_shutdown_report(report: ShutdownReport | None) -> None:
    """Print the shutdown report as a table (phases in dependency order)."""
    if report is None:
        return
    table = Table(title="shutdown report", title_justify="left")
    for column in ("#", "COMPONENT", "PHASE", "STATUS", "MS"):
        table.add_column(column)
    for index, phase in enumerate(report.phases, start=1):
        status = phase.status.kind.value
        if phase.status.message:
            status = f"{status}: {phase.status.message}"
        table.add_row(
            str(index),
            phase.component or "-",
            phase.name,
            status,
            f"{phase.duration.total_seconds() * 1000:.1f}",
        )
    out = console()
    out.print(table)
    out.print(f"shutdown order: {' -> '.join(shutdown_components(report))}")
    out.print(f"shutdown: {report.summary()}")


def _cause(exc: BaseException) -> str:
    cause = exc.__cause__
    if cause is None:
        return ""
    text = str(cause).strip().splitlines()[0] if str(cause).strip() else ""
    return f" ({type(cause).__name__}: {text[:200]})" if text else f" ({type(cause).__name__})"


def print_runtime_error(exc: AsterRuntimeError) -> None:
    """Print one ``error: ...`` line for a runtime failure."""
    if isinstance(exc, AsterRuntimeStartupError):
        failed = exc.report.failed_phase()
        where = f" in phase {failed.name!r} of {failed.component!r}" if failed else ""
        message = f"startup failed{where}{_cause(exc)}"
    elif isinstance(exc, AsterRuntimeServiceError):
        message = f"the service failed{_cause(exc)}"
    elif isinstance(exc, AsterRuntimeShutdownError):
        message = f"shutdown finished with failures: {exc.report.summary()}"
    else:
        message = f"{type(exc).__name__}: {exc}"
    sys.stderr.write(f"error: {message}\n")
    sys.stderr.flush()
