"""The demo's entrypoint: its resources and an ``AsterRuntime`` of ``.component(...)`` calls."""

from __future__ import annotations

import os
import socket
import tempfile
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from aster_forge.db import BackgroundTaskDbStore, RuntimeLeaseDbStore, ScheduledTaskDbStore
from aster_forge.runtime import (
    AsterRuntime,
    CancellationToken,
    HealthCheckScope,
    SystemHealthReport,
    new_runtime_lease_owner_id,
    runtime_component_with_shutdown,
)
from aster_forge.tasks import (
    BackgroundTasks,
    ClaimedTaskExecutionConfig,
    DispatchPollConfig,
    TaskDispatcher,
    TaskLaneConfig,
    TaskRetryPolicy,
    TaskTempDirs,
    background_task_component_with_definitions_from_shutdown,
    run_dispatch_worker,
)

from ._audit import AuditLog
from ._components import (
    audit_log_component,
    database_component,
    dispatcher_component,
    sample_work_component,
)
from ._database import (
    DEFAULT_DATABASE_URL,
    demo_tables,
    migrate_demo_database,
    open_demo_engine,
    purge_finished_tasks,
)
from ._model import LANE_LIMITS
from ._runtime_tasks import RUNTIME_TASKS
from ._schedule import DemoSchedule, declare_schedules, scheduled_runtime_config
from ._seed import seed_demo_tasks
from ._state import DemoState
from ._tasks import build_task_registry

__all__ = ["DATABASE_URL_ENV", "DemoApp", "DemoSettings", "create_runtime"]

DATABASE_URL_ENV = "ASTER_FORGE_DATABASE_URL"
"""The environment variable :func:`create_runtime` reads the database URL from."""


def _default_temp_root() -> Path:
    return Path(tempfile.gettempdir()) / "aster-forge-demo"


@dataclass(frozen=True, slots=True)
class DemoSettings:
    """How to run the demo.

    Attributes:
        database_url: SQLAlchemy async URL (default: SQLite file ``./aster-forge.db``).
        host: HTTP bind address (loopback by default).
        port: HTTP port (0 picks a free one).
        admin_token: Bearer token protecting the admin API and dashboard data.
        seed: Enqueue the sample work at startup.
        pace: Seconds per unit of simulated work (fetch chunk, transform pass).
        temp_root: Root of the per-task temp directories.
        schedule: Intervals of the scheduled tasks.
        lease_ttl: Runtime lease TTL (a standby takes over this long after a crash).
        task_lease_ttl: Per-task processing lease TTL.
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
    lease_ttl: timedelta = timedelta(seconds=6)
    task_lease_ttl: timedelta = timedelta(seconds=10)
    retry_delay: timedelta = timedelta(seconds=2)


class DemoApp:
    """The demo's resources (engine, stores, dispatcher, audit log) and its runtime.

    Create it inside the running event loop; nothing connects until the runtime starts
    (the database component migrates in its startup phase).

    Args:
        settings: The settings.
        listen: An already bound listening socket (see ``bind_listen_socket``); the
            HTTP service is left out when ``None``.
    """

    def __init__(self, settings: DemoSettings, *, listen: socket.socket | None = None) -> None:
        self.settings = settings
        self.instance = new_runtime_lease_owner_id()
        self.engine = open_demo_engine(settings.database_url)
        self.tables = demo_tables()
        self.task_store = BackgroundTaskDbStore(self.engine, table=self.tables.tasks)
        self.scheduled_store = ScheduledTaskDbStore(self.engine)
        self.lease_store = RuntimeLeaseDbStore(self.engine)
        self.registry = build_task_registry()
        self.audit = AuditLog(self.engine, self.tables.audit)
        self._listen = listen
        self._runtime: AsterRuntime | None = None
        self.state = DemoState(
            instance=self.instance,
            pace=settings.pace,
            temp_root=settings.temp_root,
            store=self.task_store,
            audit=self.audit,
            run_health=self._run_health,
            purge_finished=self._purge,
        )
        self.dispatcher: TaskDispatcher[DemoState] = TaskDispatcher(
            [TaskLaneConfig(lane, limit) for lane, limit in LANE_LIMITS.items()],
            ClaimedTaskExecutionConfig(
                state=self.state,
                registry=self.registry,
                lease_ttl=settings.task_lease_ttl,
                retry_policy=TaskRetryPolicy(base_delay=settings.retry_delay),
                temp_dirs=TaskTempDirs(settings.temp_root),
                shutdown_grace=timedelta(seconds=3),
            ),
            owner=self.instance,
        )

    @property
    def runtime(self) -> AsterRuntime | None:
        """The runtime once :meth:`build_runtime` ran."""
        return self._runtime

    async def _run_health(self, scope: HealthCheckScope) -> SystemHealthReport:
        if self._runtime is None:
            raise RuntimeError("the demo runtime is not built")
        return await self._runtime.run_health(scope)

    async def _purge(self, older_than: timedelta) -> int:
        return await purge_finished_tasks(self.engine, self.tables.tasks, older_than)

    async def migrate(self) -> None:
        """Create the demo's tables if missing."""
        await migrate_demo_database(self.engine, self.tables)

    async def seed(self) -> int:
        """Enqueue the sample work; returns how many tasks were created."""
        results = await seed_demo_tasks(self.task_store, self.registry)
        await self.state.record("demo.seeded", detail=f"{len(results)} sample tasks")
        self.dispatcher.wake()
        return sum(1 for r in results if r.created)

    async def _dispatch(self, token: CancellationToken) -> None:
        await run_dispatch_worker(
            self.task_store,
            self.dispatcher,
            token,
            poll=DispatchPollConfig(
                base_interval=timedelta(seconds=0.5), max_interval=timedelta(seconds=2)
            ),
        )

    def _spawn_scheduler(self, token: CancellationToken) -> BackgroundTasks:
        config = scheduled_runtime_config(
            lease_store=self.lease_store,
            scheduled_store=self.scheduled_store,
            state=self.state,
            lease_ttl=self.settings.lease_ttl,
        )
        group = BackgroundTasks(token, shutdown_grace=timedelta(seconds=5))

        async def scheduler(worker_token: CancellationToken) -> None:
            await config.run(
                worker_token,
                lambda runtime: declare_schedules(
                    runtime,
                    store=self.task_store,
                    registry=self.registry,
                    schedule=self.settings.schedule,
                ),
                owner_id=self.instance,
            )

        group.spawn("leased_scheduler", scheduler)
        return group

    def build_runtime(self, *, install_signal_handlers: bool = True) -> AsterRuntime:
        """Build the runtime: the entrypoint only declares components.

        Args:
            install_signal_handlers: Let ``run()`` handle SIGINT/SIGTERM (off in tests).
        """
        builder = (
            AsterRuntime.builder()
            .install_signal_handlers(install_signal_handlers)
            .component(database_component(self.engine, self.migrate))
            .component(sample_work_component(self._seed_phase))
            .component(audit_log_component(self.audit))
            .component(dispatcher_component(self.dispatcher, self._dispatch))
            .component(
                background_task_component_with_definitions_from_shutdown(
                    RUNTIME_TASKS.definitions(), self._spawn_scheduler
                )
            )
        )
        if self._listen is not None:
            builder.component(runtime_component_with_shutdown(self._http()))
        self._runtime = builder.build()
        return self._runtime

    async def _seed_phase(self) -> None:
        if self.settings.seed:
            await self.seed()

    def _http(self) -> Any:
        from ._http import build_web_app, http_service  # needs the web extra

        sock = self._listen
        assert sock is not None

        def app() -> Any:
            from aster_forge.web import AdminSources

            return build_web_app(
                AdminSources(
                    runtime=self._runtime,
                    task_store=self.task_store,
                    scheduled_store=self.scheduled_store,
                    leases=self.lease_store,
                    dispatch_stats=self.dispatcher.stats,
                    lane_limits=dict(LANE_LIMITS),
                    lanes=tuple(LANE_LIMITS),
                    title="aster-forge demo",
                ),
                admin_token=self.settings.admin_token,
                stats=self.dispatcher.stats,
                lane_limits={lane.value: limit for lane, limit in LANE_LIMITS.items()},
            )

        return http_service(app, sock)


def create_runtime() -> AsterRuntime:
    """Factory for ``aster-forge run aster_forge.demo:create_runtime`` (workers, no HTTP).

    Reads the database URL from ``ASTER_FORGE_DATABASE_URL`` (default: the SQLite file).
    """
    url = os.environ.get(DATABASE_URL_ENV, DEFAULT_DATABASE_URL)
    return DemoApp(DemoSettings(database_url=url)).build_runtime()
