"""The ``aster-forge`` command line (extra ``cli``: click and rich).

Commands: ``demo``, ``run``, ``worker``, ``migrate``, ``tasks list|show|retry|cancel``,
``lanes pause|resume|list`` and ``health``. Every expected failure (bad URL,
unreachable database, unknown task id, port in use...) prints one ``error: ...``
line on stderr and exits non-zero; no traceback. Exit codes: 0 success, 1 operation
failed (or unhealthy), 2 usage error or the service/database could not be reached.
"""

from __future__ import annotations

import asyncio
import math
import os
import sys
from collections.abc import Callable, Coroutine, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import click

from aster_forge import __version__
from aster_forge._cli._errors import CliError, fail
from aster_forge._demo import DEFAULT_DATABASE_URL
from aster_forge.db._internal import BACKGROUND_TASKS_TABLE
from aster_forge.tasks._internal import MAX_TASK_ID

__all__ = ["cli", "main"]

DATABASE_URL_ENV = "ASTER_FORGE_DATABASE_URL"
ADMIN_TOKEN_ENV = "ASTER_FORGE_ADMIN_TOKEN"
TASKS_TABLE_ENV = "ASTER_FORGE_TASKS_TABLE"
SERVICE_URL_ENV = "ASTER_FORGE_SERVICE_URL"

# PostgreSQL truncates identifiers at 63 bytes, MariaDB refuses more than 64.
_MAX_TABLE_NAME_BYTES = 63

_database_option = click.option(
    "--database-url",
    envvar=DATABASE_URL_ENV,
    default=DEFAULT_DATABASE_URL,
    show_default=True,
    help=(
        f"Database URL (env {DATABASE_URL_ENV}); postgresql://, mysql:// and sqlite:// "
        "get their async driver."
    ),
)


def _table_name(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        size = -1
    if not value.strip() or "\x00" in value or not 0 < size <= _MAX_TABLE_NAME_BYTES:
        raise click.BadParameter(
            f"{value!r} is not a table name (1 to {_MAX_TABLE_NAME_BYTES} UTF-8 bytes, no NUL)"
        )
    return value


_table_option = click.option(
    "--table",
    "table_name",
    envvar=TASKS_TABLE_ENV,
    default=BACKGROUND_TASKS_TABLE,
    show_default=True,
    callback=_table_name,
    help=f"The task table (env {TASKS_TABLE_ENV}).",
)


class _FiniteRange(click.FloatRange):
    """A float range that also refuses ``nan`` (which compares false to every bound)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if math.isnan(number):
            self.fail(f"{value!r} is not a number", param, ctx)
        return number


_SECONDS = _FiniteRange(min=0, min_open=True, max=86_400.0)
"""A positive, finite number of seconds (``inf`` and ``nan`` are usage errors)."""

_TASK_ID = click.IntRange(1, MAX_TASK_ID)
"""Task ids are positive 64-bit integers; a larger value never reaches the driver."""


class _OneLineUsageError(click.UsageError):
    """A usage error shown as one ``error: ...`` line (exit 2), like every other failure."""

    def show(self, file: IO[Any] | None = None) -> None:
        hint = f" (see '{self.ctx.command_path} --help')" if self.ctx is not None else ""
        click.echo(f"error: {self.format_message()}{hint}", file=file, err=True)


@contextmanager
def _one_line_usage_errors() -> Iterator[None]:
    try:
        yield
    except click.exceptions.NoArgsIsHelpError:
        raise  # a bare group prints its help
    except _OneLineUsageError:
        raise
    except click.UsageError as exc:
        message = " ".join(exc.format_message().split())
        raise _OneLineUsageError(message, exc.ctx) from None


class _CliGroup(click.Group):
    """The root group: bad arguments end with one ``error:`` line, not a usage dump."""

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        with _one_line_usage_errors():
            return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx: click.Context) -> Any:
        with _one_line_usage_errors():
            return super().invoke(ctx)


def _run(
    coro: Coroutine[Any, Any, int],
    loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None,
) -> int:
    try:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            return runner.run(coro)
    except CliError as exc:
        fail(exc)
        raise AssertionError("unreachable") from exc


@click.group(cls=_CliGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="aster-forge")
def cli() -> None:
    """aster-forge: database-backed background tasks and runtime lifecycle."""


@cli.command()
@_database_option
@click.option("--host", default="127.0.0.1", show_default=True, help="HTTP bind address.")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535))
@click.option(
    "--duration",
    type=_SECONDS,
    default=None,
    help="Stop by itself after this many seconds (tests, CI).",
)
@click.option(
    "--admin-token",
    envvar=ADMIN_TOKEN_ENV,
    default=None,
    help=f"Bearer token for the admin API and dashboard (env {ADMIN_TOKEN_ENV}).",
)
@click.option("--seed/--no-seed", default=True, show_default=True, help="Enqueue sample work.")
@click.option(
    "--pace",
    type=_FiniteRange(min=0, max=3600.0),
    default=0.4,
    show_default=True,
    help="Seconds per unit of simulated work.",
)
@click.option(
    "--live/--no-live",
    default=None,
    help="Live terminal view (default: on when stdout is a terminal).",
)
@click.option(
    "--report-json",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also write the startup and shutdown reports to this JSON file.",
)
def demo(
    database_url: str,
    host: str,
    port: int,
    duration: float | None,
    admin_token: str | None,
    seed: bool,
    pace: float,
    live: bool | None,
    report_json: Path | None,
) -> None:
    """Run the example product: migrate, seed, serve HTTP, run workers.

    Ctrl+C or SIGTERM stops it gracefully and prints the shutdown report.
    """
    from aster_forge._cli._demo import DemoOptions, run_demo

    options = DemoOptions(
        database_url=database_url,
        host=host,
        port=port,
        duration=duration,
        admin_token=admin_token or None,
        seed=seed,
        pace=pace,
        live=sys.stdout.isatty() if live is None else live,
        report_json=report_json,
    )
    sys.exit(_run(run_demo(options)))


@cli.command(name="run")
@click.argument("target", metavar="MODULE:FACTORY")
def run_command(target: str) -> None:
    """Run a product's AsterRuntime built by ``factory()`` (like uvicorn's module:app).

    The factory is called inside the event loop and returns an ``AsterRuntime`` (or a
    coroutine producing one). SIGINT/SIGTERM stop it.
    """
    from aster_forge._cli._run import run_factory

    sys.path.insert(0, os.getcwd())
    sys.exit(_run(run_factory(target)))


@cli.command()
@click.argument("target", metavar="MODULE:FORGE")
@click.option("--http", default=None, metavar="HOST:PORT", help="Serve dashboard, API, health.")
@click.option(
    "--admin-token",
    envvar=ADMIN_TOKEN_ENV,
    default=None,
    help=f"Bearer token for the admin API and dashboard (env {ADMIN_TOKEN_ENV}).",
)
@click.option(
    "--loop",
    "loop",
    type=click.Choice(["auto", "asyncio", "uvloop"]),
    default="auto",
    envvar="ASTER_FORGE_LOOP",
    show_default=True,
    help="Event loop: uvloop when installed (auto), asyncio's own, or uvloop.",
)
@click.option(
    "--log-format",
    "log_format",
    type=click.Choice(["text", "json"]),
    default="text",
    envvar="ASTER_FORGE_LOG_FORMAT",
    show_default=True,
    help="Log lines on stderr: text (time, level, logger, message) or one JSON object each.",
)
@click.option(
    "--log-level",
    "log_level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="info",
    envvar="ASTER_FORGE_LOG_LEVEL",
    show_default=True,
    help="The lowest level logged (when the product did not configure logging itself).",
)
def worker(
    target: str,
    http: str | None,
    admin_token: str | None,
    loop: str,
    log_format: str,
    log_level: str,
) -> None:
    """Run a Forge's workers, scheduler and NOTIFY listener until SIGINT/SIGTERM."""
    from aster_forge._cli._logs import LogFormat
    from aster_forge._cli._worker import EventLoopChoice, event_loop_factory, run_worker

    try:
        factory = event_loop_factory(EventLoopChoice(loop))
    except CliError as exc:
        fail(exc)
    sys.path.insert(0, os.getcwd())
    running = run_worker(
        target,
        http,
        admin_token or None,
        log_format=LogFormat(log_format),
        log_level=log_level,
    )
    sys.exit(_run(running, factory))


@cli.command()
@_database_option
@_table_option
@click.argument("target", metavar="[MODULE:FORGE]", required=False)
def migrate(database_url: str, table_name: str, target: str | None) -> None:
    """Create the reference tables (runtime_leases, scheduled_tasks and the task table).

    Only aster-forge's own tables; idempotent. With MODULE:FORGE, creates the tables of
    that Forge (on its own URL) instead.
    """
    if target is not None:
        from aster_forge._cli._worker import run_forge_migrate

        sys.path.insert(0, os.getcwd())
        sys.exit(_run(run_forge_migrate(target)))
    from aster_forge._cli._db import run_migrate

    sys.exit(_run(run_migrate(database_url, table_name)))


@cli.group()
def tasks() -> None:
    """Inspect and operate on a task table (background_tasks unless --table says otherwise)."""


@tasks.command(name="list")
@_database_option
@_table_option
@click.option(
    "--status",
    type=click.Choice(["pending", "running", "succeeded", "failed", "cancelled"]),
    default=None,
)
@click.option("--kind", default=None, help="Only this kind (wire value).")
@click.option("--lane", default=None, help="Only this lane (wire value).")
@click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def tasks_list(
    database_url: str,
    table_name: str,
    status: str | None,
    kind: str | None,
    lane: str | None,
    limit: int,
    as_json: bool,
) -> None:
    """List tasks, newest first."""
    from aster_forge._cli._tasks import list_tasks

    listing = list_tasks(
        database_url, table_name, status=status, kind=kind, lane=lane, limit=limit, as_json=as_json
    )
    sys.exit(_run(listing))


@tasks.command(name="show")
@_database_option
@_table_option
@click.argument("task_id", type=_TASK_ID)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def tasks_show(database_url: str, table_name: str, task_id: int, as_json: bool) -> None:
    """Show one task: times (created, started, finished), payload, result and steps."""
    from aster_forge._cli._tasks import show_task

    sys.exit(_run(show_task(database_url, table_name, task_id, as_json=as_json)))


@tasks.command(name="retry")
@_database_option
@_table_option
@click.argument("task_id", type=_TASK_ID)
@click.option("--force", is_flag=True, help="Retry even a failure marked not retryable.")
def tasks_retry(database_url: str, table_name: str, task_id: int, force: bool) -> None:
    """Put a failed or cancelled task back to pending."""
    from aster_forge._cli._tasks import retry_task

    sys.exit(_run(retry_task(database_url, table_name, task_id, force=force)))


@tasks.command(name="cancel")
@_database_option
@_table_option
@click.argument("task_id", type=_TASK_ID)
def tasks_cancel(database_url: str, table_name: str, task_id: int) -> None:
    """Cancel a pending task, or request cancellation of a running one."""
    from aster_forge._cli._tasks import cancel_task

    sys.exit(_run(cancel_task(database_url, table_name, task_id)))


@tasks.command(name="workflow")
@_database_option
@_table_option
@click.argument("task_id", type=_TASK_ID)
@click.option(
    "--limit",
    type=click.IntRange(1, 10_000),
    default=500,
    show_default=True,
    help="Show at most this many tasks, nearest first.",
)
@click.option("--cancel", is_flag=True, help="First cancel every unfinished task of it.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def tasks_workflow(
    database_url: str, table_name: str, task_id: int, limit: int, cancel: bool, as_json: bool
) -> None:
    """Show TASK_ID's workflow: the tasks connected by dependencies, their states and what
    each waits for (the task itself is starred)."""
    from aster_forge._cli._tasks import show_workflow

    run = show_workflow(
        database_url, table_name, task_id, limit=limit, cancel=cancel, as_json=as_json
    )
    sys.exit(_run(run))


@cli.group()
def lanes() -> None:
    """Pause, resume and list lanes (stored: every instance obeys)."""


@lanes.command(name="pause")
@_database_option
@_table_option
@click.argument("lane")
def lanes_pause(database_url: str, table_name: str, lane: str) -> None:
    """Pause LANE on every instance: claims skip it, running tasks finish."""
    from aster_forge._cli._lanes import set_lane_paused

    sys.exit(_run(set_lane_paused(database_url, table_name, lane, True)))


@lanes.command(name="resume")
@_database_option
@_table_option
@click.argument("lane")
def lanes_resume(database_url: str, table_name: str, lane: str) -> None:
    """Resume a paused LANE."""
    from aster_forge._cli._lanes import set_lane_paused

    sys.exit(_run(set_lane_paused(database_url, table_name, lane, False)))


@lanes.command(name="list")
@_database_option
@_table_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def lanes_list(database_url: str, table_name: str, as_json: bool) -> None:
    """List lanes: paused or active, pending and running counts."""
    from aster_forge._cli._lanes import list_lanes

    sys.exit(_run(list_lanes(database_url, table_name, as_json)))


@cli.command()
@click.option(
    "--scope",
    type=click.Choice(["liveness", "readiness", "diagnostics"]),
    default="readiness",
    show_default=True,
)
@click.option(
    "--url",
    envvar=SERVICE_URL_ENV,
    default="http://127.0.0.1:8000",
    show_default=True,
    help=f"Base URL of a running service (env {SERVICE_URL_ENV}).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the JSON report.")
@click.option(
    "--admin-token",
    envvar=ADMIN_TOKEN_ENV,
    default=None,
    help="Bearer token (diagnostics may require it).",
)
@click.option("--timeout", type=_SECONDS, default=10.0, show_default=True)
def health(scope: str, url: str, as_json: bool, admin_token: str | None, timeout: float) -> None:
    """Query a running service's health; exit 0 healthy/degraded, 1 unhealthy, 2 unreachable."""
    from aster_forge._cli._health import run_health

    sys.exit(_run(run_health(url, scope, as_json, admin_token or None, timeout)))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI with ``argv`` (default ``sys.argv[1:]``); return the exit code."""
    try:
        cli.main(args=list(argv) if argv is not None else None, prog_name="aster-forge")
    except SystemExit as exc:
        code = exc.code
        if code is None:
            return 0
        return code if isinstance(code, int) else 1


if __name__ == "__main__":
    raise SystemExit(main())
