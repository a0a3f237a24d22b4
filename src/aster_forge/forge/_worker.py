"""``ForgeWorker``: one run of a forge's workers, assembled from the primitives.

The task worker (``TaskWorker``: claims, runs and writes each task's outcome), the
PostgreSQL NOTIFY listener (``listen_for_task_notifications``), the leased scheduler
(``LeasedScheduledRuntimeConfig``) and the database and resources lifecycles, as
``AsterRuntime`` components. Nothing here claims, leases, heartbeats or schedules.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..db import database_component_after, database_health_component, listen_for_task_notifications
from ..db._internal import DEFAULT_TASK_NOTIFY_CHANNEL
from ..runtime import (
    CancellationToken,
    HealthCheckOptions,
    HealthCheckScopes,
    HealthComponentDetailValue,
    HealthComponentReport,
    RuntimeComponentKind,
    RuntimeComponentRegistry,
)
from ..runtime._internal import Clock, SystemClock
from ..tasks import (
    BACKGROUND_TASKS_COMPONENT,
    ClaimedTaskExecutionConfig,
    DispatchPollConfig,
    LeasedScheduledRuntimeConfig,
    ScheduledTaskOutcome,
    TaskLaneConfig,
    TaskTempDirs,
    TaskWorker,
    task_retention_worker,
)
from ..tasks._internal import TaskPruneReport, TaskRetryPolicy
from .errors import ForgeDeclarationError

if TYPE_CHECKING:
    from ._app import Forge
    from ._declarations import ForgeHealthCheck

__all__ = [
    "DATABASE_COMPONENT",
    "HTTP_COMPONENT",
    "RESOURCES_COMPONENT",
    "ForgeWorker",
    "ForgeWorkerSettings",
]

logger = logging.getLogger("aster_forge.forge")

DATABASE_COMPONENT = "database"
"""The component owning the forge's engine (created tables, health, disposal)."""

HTTP_COMPONENT = "http"
"""The HTTP service component of ``aster-forge worker --http``."""

RESOURCES_COMPONENT = "forge_resources"
"""The component that opens the product's resources before the workers and closes them after."""


@dataclass(frozen=True, slots=True)
class ForgeWorkerSettings:
    """Timings of a forge's workers (the defaults suit most services).

    Every field is checked when the settings are built: a wrong type or value raises
    :class:`~aster_forge.forge.errors.ForgeDeclarationError` naming the field and what to
    pass, before any worker starts.

    Attributes:
        poll: The dispatch poll (NOTIFY wakes idle workers sooner on PostgreSQL).
        task_lease_ttl: Each claimed task's lease; the heartbeat renews every third.
        retry: Backoff of retryable failures.
        shutdown_grace: How long running bodies may finish after shutdown begins.
        scheduler_lease_ttl: The scheduler lease (a standby takes over this long after
            a crash); renewed every third.
        scheduler_claim_ttl: A scheduled firing's claim (renewed while it runs).
        temp_root: Root of the per-task temp directories ``ctx.temp_dir()`` creates
            (``<temp_root>/_runtime/tasks/<id>-<token>``, removed after each execution);
            ``None``: bodies get no temp directory.
        redact_errors: Store and log only the exception type of a failure nobody
            classified (no message, no traceback); messages your code chose
            (``ClassifiedTaskError``, classifiers) are kept.
    """

    poll: DispatchPollConfig = field(
        default_factory=lambda: DispatchPollConfig(
            base_interval=timedelta(milliseconds=200), max_interval=timedelta(seconds=2)
        )
    )
    task_lease_ttl: timedelta = timedelta(seconds=30)
    retry: TaskRetryPolicy = field(default_factory=TaskRetryPolicy)
    shutdown_grace: timedelta = timedelta(seconds=10)
    scheduler_lease_ttl: timedelta = timedelta(seconds=15)
    scheduler_claim_ttl: timedelta = timedelta(seconds=120)
    temp_root: Path | None = None
    redact_errors: bool = False

    def __post_init__(self) -> None:
        # Checked here: a wrong value accepted now would only fail inside the running
        # worker, where nothing reports it until shutdown.
        _require(
            "poll",
            self.poll,
            DispatchPollConfig,
            "DispatchPollConfig(base_interval=timedelta(milliseconds=200))",
        )
        _require(
            "retry", self.retry, TaskRetryPolicy, "TaskRetryPolicy(base_delay=timedelta(seconds=5))"
        )
        _require_duration("task_lease_ttl", self.task_lease_ttl, allow_zero=False)
        _require_duration("shutdown_grace", self.shutdown_grace, allow_zero=True)
        _require_duration("scheduler_lease_ttl", self.scheduler_lease_ttl, allow_zero=False)
        _require_duration("scheduler_claim_ttl", self.scheduler_claim_ttl, allow_zero=False)
        if self.temp_root is not None:
            _require("temp_root", self.temp_root, Path, "Path('/var/tmp/app')")
        _require("redact_errors", self.redact_errors, bool, "True")


def _require(name: str, value: object, expected: type, example: str) -> None:
    """Refuse a setting of the wrong type, naming it and what to pass."""
    if not isinstance(value, expected):
        raise ForgeDeclarationError(
            f"ForgeWorkerSettings.{name} must be a {expected.__name__} such as {example}, "
            f"got {type(value).__name__}: {value!r}"
        )


def _require_duration(name: str, value: object, *, allow_zero: bool) -> None:
    """Refuse a duration setting that is not a ``timedelta`` or is out of range."""
    _require(name, value, timedelta, "timedelta(seconds=30)")
    assert isinstance(value, timedelta)
    if value < timedelta(0) or (value == timedelta(0) and not allow_zero):
        bound = "non-negative" if allow_zero else "positive"
        raise ForgeDeclarationError(f"ForgeWorkerSettings.{name} must be {bound}, got {value}")


def _on_exception(exc: Exception) -> ScheduledTaskOutcome:
    # A fixed text: the catalog row never carries an exception message.
    return ScheduledTaskOutcome.failed(f"enqueue raised {type(exc).__name__}")


class ForgeWorker:
    """The components one forge registers on an ``AsterRuntime``.

    Args:
        forge: The forge (its declarations are frozen by this call).
        after: Components of the product (e.g. its HTTP service) that must stop before
            the forge's resources and database close.
        clock: What the scheduler's lease loop and the retention job sleep on (a
            ``ManualClock`` in tests).
    """

    def __init__(
        self, forge: Forge, *, after: Sequence[str] = (), clock: Clock | None = None
    ) -> None:
        self._forge = forge
        self._after = tuple(after)
        self._clock = clock if clock is not None else SystemClock()
        registry = forge.registry
        settings = forge.worker_settings
        self._settings = settings
        self.dispatcher: TaskWorker[Forge] = TaskWorker(
            forge.backend.task_store,
            lanes=[
                TaskLaneConfig(
                    lane,
                    limit,
                    cluster_limit=forge.lane_cluster_limits.get(lane),
                    partition_limit=forge.lane_partition_limits.get(lane),
                    rate_limit=forge.lane_rate_limits.get(lane),
                    partition_rate_limit=forge.lane_partition_rate_limits.get(lane),
                )
                for lane, limit in forge.lanes.items()
            ],
            execution=ClaimedTaskExecutionConfig(
                state=forge,
                registry=registry,
                lease_ttl=settings.task_lease_ttl,
                retry_policy=settings.retry,
                shutdown_grace=settings.shutdown_grace,
                temp_dirs=None if settings.temp_root is None else TaskTempDirs(settings.temp_root),
                redact_errors=settings.redact_errors,
            ),
            poll=settings.poll,
            owner=forge.instance_id,
        )
        self.started = asyncio.Event()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.last_prune: TaskPruneReport | None = None
        """The last retention pass this instance ran (``None``: none yet, or it does not
        hold the scheduler lease)."""
        self.pruned = asyncio.Event()
        """Set after each retention pass this instance runs."""
        self._exit = AsyncExitStack()
        # The first of the forge's loops that crashed, for readiness.
        self._crash: tuple[str, BaseException] | None = None

    def wake(self) -> None:
        """Wake the dispatcher (an enqueue in this process)."""
        self.dispatcher.wake()

    async def _watched(self, name: str, loop: Awaitable[None]) -> None:
        """Run one of the forge's loops, remembering a crash for readiness."""
        try:
            await loop
        except Exception as exc:
            self._crash = self._crash or (name, exc)
            raise

    async def _dispatch(self, token: CancellationToken) -> None:
        await self._watched("dispatch", self.dispatcher.run(token))

    async def _listen(self, token: CancellationToken) -> None:
        engine = self._forge.backend.engine
        assert engine is not None
        await self._watched(
            "task_notifications",
            listen_for_task_notifications(
                engine, DEFAULT_TASK_NOTIFY_CHANNEL, lambda _lane: self.dispatcher.wake(), token
            ),
        )

    async def _schedule(self, token: CancellationToken) -> None:
        forge, settings = self._forge, self._settings
        backend = forge.backend
        # What runs once per cluster, on the instance holding the scheduler lease.
        workers: dict[str, Callable[[CancellationToken], Awaitable[object]]] = {}
        if forge.retention is not None:
            workers["task_retention"] = task_retention_worker(
                backend.task_store, forge.retention, on_report=self._pruned, clock=self._clock
            )
        config = LeasedScheduledRuntimeConfig(
            namespace=forge.name,
            lease_id=f"{forge.name}.scheduler",
            lease_store=backend.lease_store,
            scheduled_store=backend.scheduled_store,
            jobs=[periodic.job() for periodic in forge.periodics],
            workers=workers,
            on_exception=_on_exception,
            claim_ttl=settings.scheduler_claim_ttl,
            lease_ttl=settings.scheduler_lease_ttl,
            lease_renew_interval=settings.scheduler_lease_ttl / 3,
            lease_standby_retry_interval=settings.scheduler_lease_ttl / 3,
        )
        await self._watched(
            "scheduler", config.run(token, clock=self._clock, owner_id=forge.instance_id)
        )

    async def _pruned(self, report: TaskPruneReport) -> None:
        self.last_prune = report
        self.pruned.set()

    async def _ready(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._forge.attach_worker(self)
        self.started.set()

    async def _stopped(self) -> None:
        self._forge.detach_worker(self)

    def _crashed(self) -> str | None:
        """Which loop crashed, and with what type of error (``None``: none did)."""
        # The dispatcher says so before it releases its tasks; the others once they end.
        crashed = self.dispatcher.crashed
        if crashed is not None:
            return f"dispatch crashed ({type(crashed).__name__})"
        if self._crash is not None:
            name, error = self._crash
            return f"{name} crashed ({type(error).__name__})"
        return None

    async def _health(self) -> HealthComponentReport:
        total = self.dispatcher.stats.total()
        crashed = self._crashed()
        if crashed is not None:
            report = HealthComponentReport.unhealthy(BACKGROUND_TASKS_COMPONENT, crashed)
        elif total.claim_calls > 0 and total.claim_errors == total.claim_calls:
            report = HealthComponentReport.unhealthy(BACKGROUND_TASKS_COMPONENT, "claims fail")
        elif self.dispatcher.stopping:
            report = HealthComponentReport.degraded(BACKGROUND_TASKS_COMPONENT, "stopping")
        else:
            report = HealthComponentReport.healthy(BACKGROUND_TASKS_COMPONENT, "dispatching")
        return report.with_detail(
            "in_flight", HealthComponentDetailValue.unsigned(total.in_flight)
        ).with_detail("succeeded", HealthComponentDetailValue.unsigned(total.succeeded))

    async def _open_resources(self) -> None:
        factory = self._forge.resources_factory
        assert factory is not None
        manager: AbstractAsyncContextManager[Any] = factory()
        self._forge.state = await self._exit.enter_async_context(manager)

    async def _close_resources(self) -> None:
        try:
            await self._exit.aclose()
        finally:
            self._forge.clear_state()

    @staticmethod
    def _check_options(check: ForgeHealthCheck) -> HealthCheckOptions:
        if check.required:
            options = HealthCheckOptions.required(check.timeout)
            return options.with_scopes(HealthCheckScopes.readiness_and_diagnostics())
        options = HealthCheckOptions.optional(check.timeout)
        return options.with_scopes(HealthCheckScopes.diagnostics())

    def _run(self, check: ForgeHealthCheck) -> Callable[[], Awaitable[HealthComponentReport]]:
        async def run() -> HealthComponentReport:
            return await check.check(self._forge.state_or_none)

        return run

    def register(self, registry: RuntimeComponentRegistry) -> None:
        """Register the forge's components (what ``.component(forge.component())`` calls)."""
        forge, backend = self._forge, self._forge.backend
        workers, tasks_kind = BACKGROUND_TASKS_COMPONENT, RuntimeComponentKind.TASKS
        registry.component_startup(workers, tasks_kind, "forge_ready", self._ready)
        registry.component_health_with_options(
            workers,
            tasks_kind,
            BACKGROUND_TASKS_COMPONENT,
            HealthCheckOptions.required(timedelta(seconds=1)).with_scopes(
                HealthCheckScopes.readiness_and_diagnostics()
            ),
            self._health,
        )
        # A crashed loop stops the runtime: a process that claims nothing, or no longer
        # hears NOTIFY or fires schedules, should exit (non-zero) and be restarted.
        registry.component_task(workers, tasks_kind, "dispatch", self._dispatch, critical=True)
        if backend.is_postgres:
            registry.component_task(
                workers, tasks_kind, "task_notifications", self._listen, critical=True
            )
        if forge.periodics or forge.retention is not None:
            registry.component_task(workers, tasks_kind, "scheduler", self._schedule, critical=True)
        registry.component_shutdown(workers, tasks_kind, "forge_stopped", None, self._stopped)
        users = [BACKGROUND_TASKS_COMPONENT, *self._after]
        owner, owner_kind = workers, tasks_kind
        if forge.resources_factory is not None:
            owner, owner_kind = RESOURCES_COMPONENT, RuntimeComponentKind.PRODUCT
            registry.component(owner, owner_kind, depends_on=users)
            registry.component_startup(owner, owner_kind, "open_resources", self._open_resources)
            registry.component_shutdown(
                owner,
                owner_kind,
                "close_resources",
                None,
                self._close_resources,
                timeout=timedelta(seconds=10),
            )
            users.append(RESOURCES_COMPONENT)
        for check in forge.health_checks:
            registry.component_health_with_options(
                owner, owner_kind, check.name, self._check_options(check), self._run(check)
            )
        if backend.engine is None:
            return
        # The database starts first: without its tables the loops would only fail.
        registry.component_startup(
            DATABASE_COMPONENT,
            RuntimeComponentKind.DATABASE,
            "create_tables" if forge.create_tables else "check_tables",
            backend.create_tables if forge.create_tables else backend.check_tables,
        )
        database_health_component(backend.engine, component=DATABASE_COMPONENT).register(registry)
        database_component_after(backend.engine, users, component=DATABASE_COMPONENT).register(
            registry
        )
