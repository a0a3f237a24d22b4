"""``aster-forge demo``: migrate, seed, serve HTTP and run the workers of the example product."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import logging
import sys
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa

from aster_forge import ClassifiedTaskError
from aster_forge._demo import DemoApp, DemoPortInUseError, DemoSettings, bind_listen_socket
from aster_forge.runtime import AsterRuntime, AsterRuntimeError, CancellationToken

from ._db import check_sqlite_path
from ._errors import EXIT_FAILED, EXIT_UNREACHABLE, CliError, database_error, safe_url
from ._live import run_live_view
from ._reports import (
    print_runtime_error,
    print_shutdown_report,
    shutdown_report_dict,
    startup_report_dict,
)

__all__ = ["DemoOptions", "run_demo"]

logger = logging.getLogger("aster_forge.cli")


@dataclass(frozen=True, slots=True)
class DemoOptions:
    """The ``demo`` command's options."""

    database_url: str
    host: str
    port: int
    duration: float | None
    admin_token: str | None
    seed: bool
    pace: float
    live: bool
    report_json: Path | None


async def _preflight(app: DemoApp, url: str) -> None:
    try:
        async with app.engine.connect() as conn:
            await conn.execute(sa.text("SELECT 1"))
    except Exception as exc:
        await app.forge.aclose()
        raise database_error(exc, url) from None


async def _stop_after(runtime: AsterRuntime, seconds: float) -> None:
    if not await runtime.shutdown_token.sleep(seconds):
        _say(f"--duration {seconds:g}s reached; stopping")
        runtime.request_stop()


def _write_reports(path: Path, runtime: AsterRuntime, app: DemoApp) -> None:
    data = {
        "instance": app.instance,
        "startup": startup_report_dict(runtime.last_startup_report),
        "shutdown": shutdown_report_dict(runtime.last_shutdown_report),
        "shutdown_order": list(runtime.registry.shutdown_order()),
    }
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


class _ExpectedFailureFilter(logging.Filter):
    """Drop the traceback of a failure the product classified on purpose."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], ClassifiedTaskError):
            record.exc_info = None
            record.exc_text = None
        return True


def _configure_logging(live: bool) -> None:
    # The live view owns the terminal: only warnings and errors go to stderr.
    level = logging.WARNING if live else logging.INFO
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(_ExpectedFailureFilter())
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(level)


async def run_demo(options: DemoOptions) -> int:
    """Run the demo until a signal or ``--duration``; print the shutdown report."""
    _configure_logging(options.live)
    settings = DemoSettings(
        database_url=options.database_url,
        host=options.host,
        port=options.port,
        admin_token=options.admin_token,
        seed=options.seed,
        pace=options.pace,
    )
    for module in ("starlette", "uvicorn", "prometheus_client"):
        if importlib.util.find_spec(module) is None:  # pragma: no cover - no web extra
            raise CliError(f"the demo needs the 'web' extra ({module} is missing)", 2)
    await asyncio.to_thread(check_sqlite_path, options.database_url)
    try:
        sock = bind_listen_socket(options.host, options.port)
    except DemoPortInUseError as exc:
        raise CliError(str(exc), EXIT_UNREACHABLE) from None
    try:
        app = DemoApp(settings, listen=sock)
    except Exception as exc:
        sock.close()
        raise database_error(exc, options.database_url) from None
    try:
        await _preflight(app, options.database_url)
    except CliError:
        sock.close()
        raise
    host, port = sock.getsockname()[:2]
    url = f"http://{host if ':' not in host else f'[{host}]'}:{port}"
    header = f"dashboard {url}/  database {safe_url(options.database_url)}  (Ctrl+C to stop)"
    runtime = app.build_runtime()
    _say(f"aster-forge demo: instance {app.instance}")
    _say(f"aster-forge demo: serving {url}/ (API {url}/api, health {url}/readyz)")
    helpers: list[asyncio.Task[None]] = []
    live_token = runtime.shutdown_token.child_token()
    if options.duration is not None:
        helpers.append(
            asyncio.create_task(_stop_after(runtime, options.duration), name="demo-duration")
        )
    if options.live:
        helpers.append(
            asyncio.create_task(_live_view(app, header, live_token), name="demo-live-view")
        )
    code = 0
    try:
        await runtime.run()
    except AsterRuntimeError as exc:
        print_runtime_error(exc)
        code = EXIT_FAILED
    finally:
        live_token.cancel()
        for task in helpers:
            task.cancel()
        await _join(helpers)
        await app.forge.aclose()
    print_shutdown_report(runtime.last_shutdown_report)
    if options.report_json is not None:
        await asyncio.to_thread(_write_reports, options.report_json, runtime, app)
    sys.stdout.flush()
    return code


async def _live_view(app: DemoApp, header: str, token: CancellationToken) -> None:
    # The view shows the running dispatcher, which exists once the workers started.
    while app.forge.current_dispatcher() is None:
        if await token.sleep(0.05):
            return
    await run_live_view(app, header, token)


async def _join(tasks: list[asyncio.Task[None]]) -> None:
    for task in tasks:
        try:
            await task
        except asyncio.CancelledError:
            if not task.cancelled():
                raise
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
        except Exception:
            logger.exception("demo helper task %s failed", task.get_name())
