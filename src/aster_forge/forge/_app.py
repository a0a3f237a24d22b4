"""``Forge``: the application object a Python team meets first.

Declarations (lanes, tasks, periodic jobs, resources) are collected at import time
and frozen into a primitive :class:`~aster_forge.tasks.TaskRegistry` the first time
the forge is used; running (workers, lifespan, CLI, drain) is assembled from the
primitives by :class:`ForgeWorker`.
"""

from __future__ import annotations

import asyncio
import enum
import inspect
import re
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import datetime, timedelta
from typing import Any, TypeVar, overload

import sqlalchemy as sa

from ..runtime import (
    AsterRuntime,
    HealthCheckScope,
    HealthComponentReport,
    RuntimeComponentBundleRegistration,
    SystemHealthReport,
    runtime_component,
    runtime_component_with_shutdown,
)
from ..tasks import (
    BACKGROUND_TASKS_COMPONENT,
    EnqueueResult,
    TaskDispatcher,
    TaskErrorClassifier,
    TaskRegistry,
    TaskStepSpec,
)
from ._backend import ForgeBackend
from ._drain import ForgeDrainResult, drain_forge
from ._lifespan import run_forge
from ._new_task import new_task
from ._periodic import ForgePeriodic, periodic_schedule, periodic_shape
from ._signature import BodyShape, read_body
from ._task import ForgeTask
from ._worker import HTTP_COMPONENT, ForgeWorker, ForgeWorkerSettings
from .errors import ForgeDeclarationError, ForgeStateError

__all__ = ["DEFAULT_FORGE_URL", "Forge"]

DEFAULT_FORGE_URL = "sqlite:///./aster-forge.db"
"""The embedded default: a SQLite file in the working directory."""

_T = TypeVar("_T")
_F = TypeVar("_F", bound=Callable[..., Any])
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,63}$")


def _check_name(name: object, what: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ForgeDeclarationError(
            f"{what} name {name!r} must be 1-64 characters: letters, digits, '_', '.', ':', '-'"
        )
    return name


def _steps(steps: Sequence[tuple[str, str] | TaskStepSpec], what: str) -> tuple[TaskStepSpec, ...]:
    try:
        specs = tuple(s if isinstance(s, TaskStepSpec) else TaskStepSpec(*s) for s in steps)
    except (TypeError, ValueError) as exc:
        raise ForgeDeclarationError(f"{what}: steps are (key, title) pairs ({exc})") from None
    keys = [step.key for step in specs]
    if len(set(keys)) != len(keys):
        raise ForgeDeclarationError(f"{what}: a step key is declared twice: {keys}")
    return specs


class Forge:
    """Background tasks and periodic jobs for one application, on one database.

    Declare at import time, run anywhere: ``aster-forge worker module:forge``,
    ``FastAPI(lifespan=forge.lifespan)``, ``forge.component()`` in an ``AsterRuntime``,
    or ``await forge.drain()`` in a unit test.

    Example:
        >>> from pydantic import BaseModel
        >>> forge = Forge("memory://")
        >>> class Thumbnail(BaseModel):
        ...     file_id: int
        >>> @forge.task(max_attempts=3)
        ... async def thumbnail(payload: Thumbnail) -> str:
        ...     return f"thumb-{payload.file_id}"
        >>> thumbnail.name, thumbnail.payload_type is Thumbnail
        ('thumbnail', True)

    Args:
        url: ``sqlite:///path``, ``postgresql://...``, ``mysql://...`` (the async driver
            is picked for you), or ``memory://`` for tests.
        name: Names the scheduled catalog namespace and the scheduler lease.
        state: The object task bodies receive as their third argument (and
            :attr:`state`); or declare :meth:`resources` to open it at startup.
        metadata: The ``MetaData`` to define the tables on (default: a new one; pass the
            product's own so Alembic sees one metadata).
        tasks_table: The task table's name.
        default_concurrency: The limit of the ``default`` lane (tasks without ``lane=``).
        create_tables: Create missing tables at startup (default: on for SQLite and
            memory, off for servers, where Alembic or ``aster-forge migrate`` does it).
        settings: Worker timings.

    Raises:
        UnsupportedDatabaseBackendError: The URL's backend is not supported.
    """

    def __init__(
        self,
        url: str = DEFAULT_FORGE_URL,
        *,
        name: str = "aster-forge",
        state: Any = None,
        metadata: sa.MetaData | None = None,
        tasks_table: str = "background_tasks",
        default_concurrency: int = 10,
        create_tables: bool | None = None,
        settings: ForgeWorkerSettings | None = None,
    ) -> None:
        self._name = _check_name(name, "forge")
        self._backend = ForgeBackend(
            url, metadata if metadata is not None else sa.MetaData(), tasks_table=tasks_table
        )
        self._state = state
        self._default_concurrency = default_concurrency
        embedded = self._backend.is_memory or self._backend.is_sqlite
        self._create_tables = create_tables if create_tables is not None else embedded
        self._settings = settings if settings is not None else ForgeWorkerSettings()
        self._lanes: dict[str, int] = {}
        self._tasks: dict[str, ForgeTask] = {}
        self._periodics: list[ForgePeriodic] = []
        self._resources: Callable[[], AbstractAsyncContextManager[Any]] | None = None
        self._registry: TaskRegistry[Forge, Any, Any] | None = None
        self._workers: list[ForgeWorker] = []
        self._runtime: AsterRuntime | None = None

    # -- declarations -------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The forge's name (catalog namespace, scheduler lease prefix)."""
        return self._name

    def lane(self, name: str, *, concurrency: int = 1) -> str:
        """Declare a lane: a concurrency group the worker limits separately.

        Returns:
            The lane's name, for ``@forge.task(lane=...)``.

        Raises:
            ForgeDeclarationError: Declared twice, a bad name or a concurrency below 1.
            ForgeStateError: The forge is already in use (declarations are frozen).
        """
        self._check_open()
        _check_name(name, "lane")
        if name in self._lanes:
            raise ForgeDeclarationError(f"lane {name!r} is declared twice")
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ForgeDeclarationError(f"lane {name!r}: concurrency must be an int >= 1")
        self._lanes[name] = concurrency
        return name

    @overload
    def task(self, fn: _F) -> ForgeTask: ...

    @overload
    def task(
        self,
        *,
        name: str | None = None,
        lane: str | None = None,
        max_attempts: int = 5,
        steps: Sequence[tuple[str, str] | TaskStepSpec] = (),
        timeout: timedelta | None = None,
        error_classifier: TaskErrorClassifier | None = None,
    ) -> Callable[[Callable[..., Any]], ForgeTask]: ...

    def task(
        self,
        fn: Callable[..., Any] | None = None,
        *,
        name: str | None = None,
        lane: str | None = None,
        max_attempts: int = 5,
        steps: Sequence[tuple[str, str] | TaskStepSpec] = (),
        timeout: timedelta | None = None,
        error_classifier: TaskErrorClassifier | None = None,
    ) -> ForgeTask | Callable[[Callable[..., Any]], ForgeTask]:
        """Declare a task kind (decorator, with or without arguments).

        The body is ``async def body(payload)``, ``(ctx, payload)``, ``(ctx, payload,
        state)``, ``(ctx)`` or ``()``; the payload and result types come from its
        annotations (pydantic validates them).

        Args:
            fn: The body (when used as ``@forge.task`` without parentheses).
            name: The stable wire name stored in each row (default: the function's name);
                pin it so renaming the function does not orphan stored rows.
            lane: A lane declared with :meth:`lane` (default: the ``default`` lane).
            max_attempts: Counted attempts before the task fails for good.
            steps: ``(key, title)`` pairs shown on the dashboard from the start.
            timeout: One execution's limit; past it the body is cancelled and the
                attempt fails as retryable.
            error_classifier: Maps the body's exceptions to a retry class and message.

        Raises:
            ForgeDeclarationError: A name declared twice, an undeclared lane, bad steps,
                attempts or timeout, or a body signature the forge cannot read.
            ForgeStateError: The forge is already in use (declarations are frozen).
        """

        def declare(body: Callable[..., Any]) -> ForgeTask:
            return self._declare_task(
                body,
                name=name,
                lane=lane,
                max_attempts=max_attempts,
                steps=steps,
                timeout=timeout,
                error_classifier=error_classifier,
            )

        return declare if fn is None else declare(fn)

    def periodic(
        self,
        *,
        every: timedelta | None = None,
        cron: str | None = None,
        timezone: str | None = None,
        initial_delay: timedelta | None = None,
        name: str | None = None,
        lane: str | None = None,
        max_attempts: int = 3,
        timeout: timedelta | None = None,
    ) -> Callable[[Callable[..., Any]], ForgePeriodic]:
        """Declare a periodic job, run once per firing across every instance.

        Each firing enqueues one task of the job's kind with the firing's dedupe key;
        the body is ``()``, ``(ctx)``, ``(ctx, state)``, ``(ctx, scheduled_at:
        datetime)`` or ``(ctx, scheduled_at: datetime, state)``. Firings
        missed while every instance was down run once, not once each.

        Args:
            every: The period (firings on a grid from the first one).
            cron: A cron expression, five fields or six with leading seconds (the
                ``cron`` extra); DST-safe on ``timezone``'s wall clock.
            timezone: The cron expression's IANA time zone (default UTC).
            initial_delay: Delay of the very first firing (``every=`` only).
            name: The job's stable name (default: the function's name).
            lane: The lane its task runs in.
            max_attempts: Attempts of each firing's task.
            timeout: Limit of one execution.

        Raises:
            ForgeDeclarationError: Neither or both of ``every``/``cron``, a non-positive
                interval, a bad cron expression or timezone, the ``cron`` extra missing,
                or any error :meth:`task` raises.
        """
        schedule = periodic_schedule(
            every=every, cron=cron, timezone=timezone, initial_delay=initial_delay
        )

        def declare(body: Callable[..., Any]) -> ForgePeriodic:
            job = name if name is not None else getattr(body, "__name__", "")
            shape = periodic_shape(job, read_body(body, what=f"periodic job {job!r}"))
            task = self._declare_task(
                body,
                shape=shape,
                name=job,
                lane=lane,
                max_attempts=max_attempts,
                steps=(),
                timeout=timeout,
                error_classifier=None,
            )
            periodic = ForgePeriodic(task, schedule=schedule)
            self._periodics.append(periodic)
            return periodic

        return declare

    def resources(
        self, factory: Callable[[], Any]
    ) -> Callable[[], AbstractAsyncContextManager[Any]]:
        """Declare the product's resources (decorator on an async generator function).

        The generator runs at startup, before the workers; what it yields becomes
        :attr:`state` (the bodies' third argument) until shutdown, after the workers
        stopped, resumes it to close the resources.

        Raises:
            ForgeDeclarationError: Declared twice, or not an async generator function or
                a function returning an async context manager.
        """
        self._check_open()
        if self._resources is not None:
            raise ForgeDeclarationError("resources are declared twice")
        if inspect.isasyncgenfunction(factory):
            manager: Callable[[], AbstractAsyncContextManager[Any]] = asynccontextmanager(factory)
        elif callable(factory):
            manager = factory
        else:
            raise ForgeDeclarationError("resources must be an async generator function")
        self._resources = manager
        return manager

    def _declare_task(
        self,
        body: Callable[..., Any],
        *,
        shape: BodyShape | None = None,
        name: str | None,
        lane: str | None,
        max_attempts: int,
        steps: Sequence[tuple[str, str] | TaskStepSpec],
        timeout: timedelta | None,
        error_classifier: TaskErrorClassifier | None,
    ) -> ForgeTask:
        self._check_open()
        wire = _check_name(name if name is not None else getattr(body, "__name__", ""), "task")
        what = f"task {wire!r}"
        if wire in self._tasks:
            raise ForgeDeclarationError(f"{what} is declared twice")
        if lane is not None and lane not in self._lanes:
            raise ForgeDeclarationError(
                f"{what}: lane {lane!r} is not declared (forge.lane({lane!r}, concurrency=...))"
            )
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
            raise ForgeDeclarationError(f"{what}: max_attempts must be an int >= 1")
        if timeout is not None and (not isinstance(timeout, timedelta) or timeout <= timedelta(0)):
            raise ForgeDeclarationError(f"{what}: timeout must be a positive timedelta")
        task = ForgeTask(
            self,
            body,
            shape if shape is not None else read_body(body, what=what),
            name=wire,
            lane=lane,
            max_attempts=max_attempts,
            steps=_steps(steps, what),
            timeout=timeout,
            error_classifier=error_classifier,
        )
        self._tasks[wire] = task
        return task

    def _check_open(self) -> None:
        if self._registry is not None:
            raise ForgeStateError(
                "the forge is already in use; declare lanes, tasks and jobs at import time"
            )

    # -- what was declared --------------------------------------------------------------

    @property
    def tasks(self) -> tuple[ForgeTask, ...]:
        """Every declared task (periodic jobs' tasks included), in declaration order."""
        return tuple(self._tasks.values())

    @property
    def periodics(self) -> tuple[ForgePeriodic, ...]:
        """Every declared periodic job."""
        return tuple(self._periodics)

    @property
    def lanes(self) -> dict[str, int]:
        """Each lane's concurrency limit (with ``default`` when a task uses it)."""
        lanes = dict(self._lanes)
        if any(task.lane is None for task in self._tasks.values()):
            lanes.setdefault("default", self._default_concurrency)
        return lanes

    @property
    def registry(self) -> TaskRegistry[Forge, Any, Any]:
        """The primitive registry built from the declarations (freezes them on first use).

        Raises:
            ForgeStateError: No task is declared.
        """
        if self._registry is None:
            if not self._tasks:
                raise ForgeStateError("the forge declares no task")
            lanes = self.lanes
            kind_type: Any = enum.StrEnum("ForgeTaskKind", [(n, n) for n in self._tasks])  # type: ignore[misc]
            lane_type: Any = enum.StrEnum("ForgeLane", [(n, n) for n in lanes])  # type: ignore[misc]
            registry: TaskRegistry[Forge, Any, Any] = TaskRegistry(kind=kind_type, lane=lane_type)
            for wire, task in self._tasks.items():
                registry.register(task.spec(kind_type(wire)))
            for lane in lanes:
                members = [w for w, t in self._tasks.items() if (t.lane or "default") == lane]
                registry.lane(lane_type(lane), [kind_type(w) for w in members])
            self._registry = registry.validate()
        return self._registry

    @property
    def backend(self) -> ForgeBackend:
        """The stores and engine the forge runs on."""
        return self._backend

    @property
    def metadata(self) -> sa.MetaData:
        """The ``MetaData`` holding every table (``target_metadata`` for Alembic)."""
        return self._backend.metadata

    @property
    def create_tables(self) -> bool:
        """Whether startup creates missing tables."""
        return self._create_tables

    @property
    def worker_settings(self) -> ForgeWorkerSettings:
        """The worker timings."""
        return self._settings

    @property
    def resources_factory(self) -> Callable[[], AbstractAsyncContextManager[Any]] | None:
        """The declared resources factory, if any."""
        return self._resources

    @property
    def state(self) -> Any:
        """The product's state (resources) the bodies receive.

        Raises:
            ForgeStateError: Neither ``state=`` was given nor the resources are open.
        """
        if self._state is None:
            raise ForgeStateError("forge.state is not set: pass state= or declare resources")
        return self._state

    @state.setter
    def state(self, value: Any) -> None:
        self._state = value

    @property
    def state_or_none(self) -> Any:
        """The product's state, or ``None`` when there is none."""
        return self._state

    def clear_state(self) -> None:
        """Forget the state (the resources closed)."""
        self._state = None

    # -- enqueue --------------------------------------------------------------------------

    async def enqueue_tasks(
        self,
        task: ForgeTask,
        payloads: Sequence[Any],
        *,
        dedupe_keys: Sequence[str | None],
        run_at: datetime | None,
        delay: timedelta,
        priority: int,
        max_attempts: int | None,
        sync: bool = False,
    ) -> list[EnqueueResult]:
        """Validate every payload of ``task`` then enqueue them in one store call.

        Prefer :meth:`ForgeTask.enqueue`; this is what it calls.

        Raises:
            ForgePayloadError: A payload does not validate; nothing was written.
        """
        registry = self.registry
        kind = registry.kind_type(task.name)
        requests = [
            new_task(
                registry,
                kind,
                payload,
                dedupe_key=key,
                run_at=run_at,
                delay=delay,
                priority=priority,
                max_attempts=max_attempts if max_attempts is not None else task.max_attempts,
            )
            for payload, key in zip(payloads, dedupe_keys, strict=True)
        ]
        store = self._backend.sync_task_store() if sync else self._backend.task_store
        if len(requests) == 1:
            results = [await store.enqueue(requests[0])]
        else:
            results = list(await store.enqueue_many(requests)) if requests else []
        self._wake_workers()
        return results

    def enqueue_tasks_sync(
        self, task: ForgeTask, payloads: Sequence[Any], **options: Any
    ) -> list[EnqueueResult]:
        """:meth:`enqueue_tasks` from synchronous code (a thread with no running loop).

        Raises:
            ForgeStateError: The calling thread runs an event loop.
        """
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise ForgeStateError(
                f"task {task.name!r}: enqueue_sync() inside an event loop; use await enqueue()"
            )
        return asyncio.run(self.enqueue_tasks(task, payloads, sync=True, **options))

    def attach_worker(self, worker: ForgeWorker) -> None:
        """Record a worker running in this process (enqueues here wake it)."""
        self._workers.append(worker)

    def detach_worker(self, worker: ForgeWorker) -> None:
        """Forget a worker that stopped."""
        if worker in self._workers:
            self._workers.remove(worker)

    def current_dispatcher(self) -> TaskDispatcher[Forge] | None:
        """The dispatcher of the worker running in this process, if any."""
        return self._workers[-1].dispatcher if self._workers else None

    def _wake_workers(self) -> None:
        try:
            current = asyncio.get_running_loop()
        except RuntimeError:
            current = None
        for worker in list(self._workers):
            if worker.loop is None or worker.loop is current:
                worker.wake()
            elif not worker.loop.is_closed():
                worker.loop.call_soon_threadsafe(worker.wake)

    # -- running --------------------------------------------------------------------------

    def component(self, *, after: Sequence[str] = ()) -> RuntimeComponentBundleRegistration[Any]:
        """The forge's workers as components for ``AsterRuntime.builder().component(...)``.

        Registers ``background_tasks`` (dispatcher, NOTIFY listener on PostgreSQL, leased
        scheduler when periodic jobs exist), the resources and the ``database``
        component (tables, health, disposal after the workers).

        Args:
            after: The product's components (e.g. ``"http"``) that must stop before the
                forge's resources and database close.
        """
        return runtime_component(ForgeWorker(self, after=after).register)

    def _build_runtime(
        self,
        worker: ForgeWorker,
        *,
        install_signal_handlers: bool,
        http: tuple[str, int] | None = None,
        admin_token: str | None = None,
    ) -> AsterRuntime:
        builder = AsterRuntime.builder().install_signal_handlers(install_signal_handlers)
        if http is not None:
            from ._http import http_service  # needs the web extra

            app = self.asgi_app(admin_token=admin_token)
            builder.component(runtime_component_with_shutdown(http_service(app, *http)))
        self._runtime = builder.component(runtime_component(worker.register)).build()
        return self._runtime

    def runtime(
        self,
        *,
        http: tuple[str, int] | None = None,
        admin_token: str | None = None,
        install_signal_handlers: bool = True,
    ) -> AsterRuntime:
        """An ``AsterRuntime`` running the forge (what ``aster-forge worker`` runs).

        Args:
            http: Serve :meth:`asgi_app` on ``(host, port)`` as the runtime's service.
            admin_token: Bearer token protecting the admin API.
            install_signal_handlers: Stop on SIGINT/SIGTERM.
        """
        return self._build_runtime(
            ForgeWorker(self, after=[HTTP_COMPONENT] if http is not None else []),
            install_signal_handlers=install_signal_handlers,
            http=http,
            admin_token=admin_token,
        )

    def running(self) -> AbstractAsyncContextManager[AsterRuntime]:
        """``async with forge.running():`` runs the workers in this process meanwhile."""
        return run_forge(self)

    @asynccontextmanager
    async def lifespan(self, app: object) -> AsyncIterator[None]:
        """The ASGI lifespan: ``FastAPI(lifespan=forge.lifespan)`` or Starlette's.

        The workers start with the web app and stop (releasing in-flight tasks) before
        it exits.
        """
        async with run_forge(self):
            yield

    async def run_health(self, scope: HealthCheckScope) -> SystemHealthReport:
        """Run the health checks of the forge's runtime in this process.

        Unhealthy (one ``background_tasks`` component) while no runtime is running.
        """
        if self._runtime is None or not self._workers:
            down = HealthComponentReport.unhealthy(BACKGROUND_TASKS_COMPONENT, "not running")
            return SystemHealthReport((down,))
        return await self._runtime.run_health(scope)

    def asgi_app(self, *, admin_token: str | None = None, title: str | None = None) -> Any:
        """The dashboard, admin API, health and metrics (mount under any prefix).

        Needs the ``web`` extra. ``app.mount("/ops", forge.asgi_app())``.

        Args:
            admin_token: When set, the admin API requires it as a bearer token.
            title: The dashboard's title (default: the forge's name).
        """
        from ._web import forge_asgi_app  # needs the web extra

        return forge_asgi_app(self, admin_token=admin_token, title=title)

    async def migrate(self) -> None:
        """Create every missing table and index of :attr:`metadata` (idempotent)."""
        await self._backend.create_tables()

    async def drain(self, *, max_tasks: int = 10_000) -> ForgeDrainResult:
        """Run every due task inline, one at a time, and return what happened.

        For product unit tests (best with ``Forge("memory://")``); a task retried with a
        backoff is not due again within the same drain.

        Args:
            max_tasks: Stop after this many executions (guards a task that re-enqueues).
        """
        if self._create_tables and self._backend.engine is not None:
            await self._backend.create_tables()
        return await drain_forge(self, max_tasks=max_tasks)

    async def aclose(self) -> None:
        """Close the database connections (the forge stays usable)."""
        await self._backend.dispose()

    def __repr__(self) -> str:
        return f"Forge(name={self._name!r}, tasks={list(self._tasks)}, lanes={self.lanes})"
