"""The demo's entrypoint: the forge of :mod:`._forge`, run as one ``AsterRuntime``."""

from __future__ import annotations

import errno
import os
import socket
import tempfile
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from aster_forge import EnqueueResult, Forge, ForgeStateError
from aster_forge.db import create_database_engine
from aster_forge.runtime import AsterRuntime
from aster_forge.tasks import BackgroundTaskStore, ScheduledTaskStore, TaskWorker

from ._forge import DEMO_NAME, DemoSchedule, build_demo_forge
from ._seed import seed_demo_tasks
from .errors import DemoPortInUseError

__all__ = [
    "DATABASE_URL_ENV",
    "DEFAULT_DATABASE_URL",
    "DEMO_LEASE_ID",
    "DEMO_NAMESPACE",
    "DemoApp",
    "DemoSettings",
    "DemoTables",
    "bind_listen_socket",
    "create_runtime",
    "demo_tables",
    "migrate_demo_database",
    "open_demo_engine",
]

DATABASE_URL_ENV = "ASTER_FORGE_DATABASE_URL"
"""The environment variable :func:`create_runtime` reads the database URL from."""

DEFAULT_DATABASE_URL = "sqlite+aiosqlite:///./aster-forge.db"
"""The embedded default: a SQLite file in the working directory, created on first run."""

DEMO_NAMESPACE = DEMO_NAME
"""The scheduled catalog namespace (the forge's name)."""

DEMO_LEASE_ID = f"{DEMO_NAME}.scheduler"
"""The scheduler lease only one demo instance holds; the holder fires the periodic jobs."""


def _default_temp_root() -> Path:
    return Path(tempfile.gettempdir()) / "aster-forge-demo"


@dataclass(frozen=True, slots=True)
class DemoSettings:
    """How to run the demo.

    Attributes:
        database_url: Database URL (default: SQLite file ``./aster-forge.db``).
        host: HTTP bind address (loopback by default).
        port: HTTP port (0 picks a free one).
        admin_token: Bearer token protecting the admin API and dashboard data.
        seed: Enqueue the sample work at startup.
        pace: Seconds per unit of simulated work (fetch chunk, transform pass).
        temp_root: Root of the per-task temp directories.
        schedule: When the periodic jobs fire.
        retry_delay: Base backoff of a retryable failure.
    """

    database_url: str = DEFAULT_DATABASE_URL
    host: str = "127.0.0.1"
    port: int = 8000
    admin_token: str | None = None
    seed: bool = True
    pace: float = 0.4
    temp_root: Path = field(default_factory=_default_temp_root)
    schedule: DemoSchedule = field(default_factory=DemoSchedule)
    retry_delay: timedelta = timedelta(seconds=2)


class DemoApp:
    """The demo's forge and its runtime (HTTP included when given a socket).

    Args:
        settings: The settings.
        listen: An already bound listening socket (see :func:`bind_listen_socket`);
            the HTTP service is left out when ``None``.
    """

    def __init__(self, settings: DemoSettings, *, listen: socket.socket | None = None) -> None:
        self.settings = settings
        self.forge, self.tasks = build_demo_forge(
            settings.database_url,
            pace=settings.pace,
            temp_root=settings.temp_root,
            schedule=settings.schedule,
            retry_delay=settings.retry_delay,
            seed=settings.seed,
        )
        self._listen = listen

    @property
    def instance(self) -> str:
        """This process's instance id (claim owner, scheduler lease holder)."""
        return self.forge.instance_id

    @property
    def engine(self) -> AsyncEngine:
        """The forge's engine."""
        engine = self.forge.backend.engine
        assert engine is not None
        return engine

    @property
    def task_store(self) -> BackgroundTaskStore:
        """The forge's task store."""
        return self.forge.backend.task_store

    @property
    def scheduled_store(self) -> ScheduledTaskStore:
        """The forge's scheduled catalog."""
        return self.forge.backend.scheduled_store

    @property
    def dispatcher(self) -> TaskWorker[Forge]:
        """The running task worker (the live view's lane counters).

        Raises:
            ForgeStateError: The workers are not running.
        """
        dispatcher = self.forge.current_dispatcher()
        if dispatcher is None:
            raise ForgeStateError("the demo's workers are not running")
        return dispatcher

    async def migrate(self) -> None:
        """Create the demo's tables if missing."""
        await self.forge.migrate()

    async def seed(self, *, batch: str | None = None) -> list[EnqueueResult]:
        """Enqueue the sample work (see :func:`seed_demo_tasks`)."""
        return await seed_demo_tasks(self.tasks, batch=batch)

    def build_runtime(self, *, install_signal_handlers: bool = True) -> AsterRuntime:
        """The forge's runtime: workers, scheduler, resources, database and HTTP."""
        return self.forge.runtime(
            http=self._listen,
            admin_token=self.settings.admin_token,
            install_signal_handlers=install_signal_handlers,
        )


def create_runtime() -> AsterRuntime:
    """Factory for ``aster-forge run aster_forge._demo:create_runtime`` (workers, no HTTP).

    Reads the database URL from ``ASTER_FORGE_DATABASE_URL`` (default: the SQLite file).
    """
    url = os.environ.get(DATABASE_URL_ENV, DEFAULT_DATABASE_URL)
    return DemoApp(DemoSettings(database_url=url)).build_runtime()


def bind_listen_socket(host: str, port: int) -> socket.socket:
    """Bind and listen on ``host:port`` now, so a busy port fails before anything starts.

    Raises:
        DemoPortInUseError: The address is taken or cannot be bound.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise DemoPortInUseError(f"{host}:{port} is already in use") from exc
        raise DemoPortInUseError(f"cannot listen on {host}:{port}: {exc.strerror}") from exc
    sock.set_inheritable(False)
    return sock


@dataclass(frozen=True, slots=True)
class DemoTables:
    """The demo's tables on one ``MetaData`` (for CLI commands on the demo database).

    Attributes:
        metadata: Holds every table (``metadata.create_all`` creates them all).
        tasks: The ``background_tasks`` table.
    """

    metadata: sa.MetaData
    tasks: sa.Table


def demo_tables() -> DemoTables:
    """The tables the demo's forge defines (tasks, catalog, leases, audit)."""
    forge, _ = build_demo_forge("memory://", temp_root=_default_temp_root())
    return DemoTables(metadata=forge.metadata, tasks=forge.backend.tasks_table)


def open_demo_engine(url: str) -> AsyncEngine:
    """An engine on the demo database for CLI commands (see :func:`create_database_engine`).

    The URL goes through :func:`aster_forge.db.normalize_database_url` first.

    Raises:
        aster_forge.db.InvalidDatabaseUrlError: The URL cannot be parsed or names a
            synchronous driver.
        aster_forge.db.DatabaseDriverMissingError: The async driver is not installed.
    """
    return create_database_engine(url)


async def migrate_demo_database(engine: AsyncEngine, tables: DemoTables | None = None) -> None:
    """Create every demo table and index that is missing (idempotent)."""
    target = tables or demo_tables()
    async with engine.begin() as conn:
        await conn.run_sync(lambda sync: target.metadata.create_all(sync, checkfirst=True))
