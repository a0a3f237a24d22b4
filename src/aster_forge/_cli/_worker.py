"""``aster-forge worker module:forge`` and ``aster-forge migrate module:forge``."""

from __future__ import annotations

import asyncio
import enum
import gc
import importlib
import logging
import os
from collections.abc import Callable

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from aster_forge import Forge
from aster_forge.runtime import AsterRuntimeError

from ._errors import EXIT_FAILED, EXIT_UNREACHABLE, CliError, database_error
from ._logs import LogFormat, configure_worker_logging
from ._output import console
from ._reports import print_runtime_error, print_shutdown_report
from ._run import load_object

__all__ = [
    "EventLoopChoice",
    "database_label",
    "event_loop_factory",
    "load_forge",
    "parse_http_address",
    "run_forge_migrate",
    "run_worker",
    "startup_line",
]

logger = logging.getLogger("aster_forge.worker")


class EventLoopChoice(enum.StrEnum):
    """The worker command's ``--loop``: which event loop runs the workers."""

    AUTO = "auto"
    """uvloop when it is installed (the ``uvloop`` extra), else asyncio's own."""
    ASYNCIO = "asyncio"
    """asyncio's own event loop."""
    UVLOOP = "uvloop"
    """uvloop; an error when it is not installed."""


def event_loop_factory(choice: EventLoopChoice) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The loop factory for ``choice`` (``None``: asyncio's own), as ``asyncio.Runner`` takes it.

    Raises:
        CliError: ``uvloop`` was asked for and is not installed.
    """
    if choice is EventLoopChoice.ASYNCIO:
        return None
    try:
        uvloop = importlib.import_module("uvloop")
    except ImportError:
        if choice is EventLoopChoice.AUTO:
            return None
        raise CliError(
            "--loop uvloop needs uvloop: pip install 'aster-forge[uvloop]'", EXIT_UNREACHABLE
        ) from None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def load_forge(target: str) -> Forge:
    """Import ``module:forge`` and return the :class:`~aster_forge.Forge` it names.

    Raises:
        CliError: Not importable, missing, or not a ``Forge``.
    """
    obj = load_object(target, "FORGE")
    if not isinstance(obj, Forge):
        raise CliError(f"{target} is a {type(obj).__name__}, not a Forge", EXIT_UNREACHABLE)
    return obj


def parse_http_address(text: str) -> tuple[str, int]:
    """Parse ``HOST:PORT`` (``[::1]:8000`` for IPv6).

    Raises:
        CliError: Not ``HOST:PORT`` or the port is not 0-65535.
    """
    host, sep, port = text.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise CliError(f"--http expects HOST:PORT, got {text!r}", EXIT_UNREACHABLE)
    return host, int(port)


def database_label(url: str | None) -> str:
    """The database URL as a log line shows it: no user name, no password."""
    if url is None:
        return "memory"
    try:
        # URL.set() ignores None; the NamedTuple's _replace drops both for real.
        bare = make_url(url)._replace(username=None, password=None)
        return bare.render_as_string(hide_password=False)
    except (ArgumentError, ValueError):
        return "(unparsable URL)"


def startup_line(forge: Forge, http: tuple[str, int] | None) -> str:
    """``worker <name> (pid N): lanes a=2, b=10; database ...; http ...``."""
    lanes = ", ".join(f"{lane}={limit}" for lane, limit in forge.lanes.items()) or "none"
    line = (
        f"worker {forge.name} (pid {os.getpid()}): lanes {lanes}; "
        f"database {database_label(forge.url)}"
    )
    if http is not None:
        line += f"; http {http[0]}:{http[1]}"
    return line


async def run_worker(
    target: str,
    http: str | None,
    admin_token: str | None,
    *,
    log_format: LogFormat = LogFormat.TEXT,
    log_level: str = "info",
) -> int:
    """Run the forge's workers (and ``--http``'s web app) until SIGINT/SIGTERM.

    Logging goes to stderr with the time and level on every line (``log_format``),
    unless the product configured it at import; the first line says what runs where.
    What the import built lives as long as the process, so it is frozen
    (:func:`gc.freeze`) before the workers start: the garbage collector's full
    collections, which a busy worker triggers, then skip it instead of walking every
    object the import built while the event loop waits.
    """
    forge = load_forge(target)
    configure_worker_logging(log_format, level=log_level)
    address = parse_http_address(http) if http is not None else None
    if not forge.create_tables:
        await _check_tables(forge)
    runtime = forge.runtime(http=address, admin_token=admin_token)
    logger.info(startup_line(forge, address))
    gc.freeze()
    try:
        await runtime.run()
    except AsterRuntimeError as exc:
        print_runtime_error(exc)
        return EXIT_FAILED
    finally:
        print_shutdown_report(runtime.last_shutdown_report)
    return 0


async def _check_tables(forge: Forge) -> None:
    """Refuse to start on a database without the forge's tables: one line, not a loop's
    failure on every poll (the runtime checks again at startup, for every host)."""
    try:
        await forge.backend.check_tables()
    except Exception as exc:
        raise database_error(exc, forge.backend.url or "memory://") from None
    finally:
        await forge.aclose()


async def run_forge_migrate(target: str) -> int:
    """Create the forge's missing tables (every table of ``forge.metadata``)."""
    forge = load_forge(target)
    try:
        await forge.migrate()
    except Exception as exc:
        raise database_error(exc, forge.backend.url or "memory://") from None
    finally:
        await forge.aclose()
    names = ", ".join(sorted(forge.metadata.tables))
    console().print(f"migrated {forge.name}: {names}")
    return 0
