"""``Forge``: the application object a Python team meets first.

Declarations (lanes, tasks, periodic jobs, resources) are collected at import time
and frozen into a primitive :class:`~aster_forge.tasks.TaskRegistry` the first time
the forge is used; running (workers, lifespan, CLI, drain) is assembled from the
primitives by :class:`ForgeWorker`.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from .. import _tracing
from ..runtime import (
    AsterRuntime,
    HealthCheckScope,
    HealthComponentReport,
    RuntimeComponentBundleRegistration,
    RuntimeComponentRegistry,
    RuntimeComponentWithShutdown,
    SystemHealthReport,
    new_runtime_lease_owner_id,
    runtime_component,
)
from ..tasks import (
    BACKGROUND_TASKS_COMPONENT,
    BackgroundTaskStore,
    NewTask,
    TaskDedupeKey,
    TaskPayloadError,
    TaskWorker,
)
from ..tasks._internal import EnqueueResult, TaskRetention
from ..tasks.errors import TaskCodecError
from ._backend import ForgeBackend
from ._declarations import ForgeDeclarations, check_name
from ._drain import ForgeDrainResult, drain_forge
from ._health import ProcessRole, web_process_health
from ._lifespan import run_forge
from ._operations import ForgeOperations
from ._task import ForgeTask
from ._worker import HTTP_COMPONENT, ForgeWorker, ForgeWorkerSettings
from ._workflow import ForgeWorkflows
from .errors import ForgeDeclarationError, ForgePayloadError, ForgeStateError

__all__ = ["DEFAULT_FORGE_URL", "Forge"]

DEFAULT_FORGE_URL = "sqlite:///./aster-forge.db"
"""The embedded default: a SQLite file in the working directory."""

_DEFAULT_RETENTION = TaskRetention()


class Forge(ForgeDeclarations, ForgeOperations, ForgeWorkflows):
    """Background tasks and periodic jobs for one application, on one database.

    Declaring (``lane``, ``task``, ``periodic``, ``resources``) comes from
    :class:`ForgeDeclarations`, the operations on tasks (``get_task``, ``list_tasks``,
    ``cancel_task``, ``retry_task``, ``prune``, ``pause_lane``, ``result``) from
    :class:`ForgeOperations`; running, enqueueing and testing are defined here.

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
        create_tables: Create missing tables on first use (the first enqueue, operation,
            drain or worker startup; default: on for SQLite and memory, off for servers,
            where Alembic or ``aster-forge migrate`` does it and a worker refuses to
            start without them).
        settings: Worker timings.
        retention: How long finished tasks are kept: the instance holding the scheduler
            lease deletes older ones every ``retention.interval`` (default
            :class:`~aster_forge.tasks.TaskRetention`'s: succeeded and cancelled tasks
            after 7 days, failed ones after 30, hourly); ``None`` keeps them all.

    Raises:
        UnsupportedDatabaseBackendError: The URL's backend is not supported.
        ForgeDeclarationError: ``retention`` is not a ``TaskRetention`` or ``None``.
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
        retention: TaskRetention | None = _DEFAULT_RETENTION,
    ) -> None:
        super().__init__(default_concurrency=default_concurrency)
        self._name = check_name(name, "forge")
        self._backend = ForgeBackend(
            url,
            metadata if metadata is not None else sa.MetaData(),
            tasks_table=tasks_table,
            create_tables=create_tables,
        )
        self._state = state
        self._settings = settings if settings is not None else ForgeWorkerSettings()
        if retention is not None and not isinstance(retention, TaskRetention):
            raise ForgeDeclarationError("retention= takes a TaskRetention, or None to keep tasks")
        self._retention = retention
        self._instance_id = new_runtime_lease_owner_id()
        self._workers: list[ForgeWorker] = []
        self._runtime: AsterRuntime | None = None
        self._web_health: RuntimeComponentRegistry | None = None

    @property
    def name(self) -> str:
        """The forge's name (catalog namespace, scheduler lease prefix)."""
        return self._name

    @property
    def instance_id(self) -> str:
        """This process's identity: the claim owner of its workers and the scheduler
        lease holder's id while it holds the lease (``<host>:<pid>:<random>``)."""
        return self._instance_id

    @property
    def url(self) -> str | None:
        """The database URL with its async driver (``None`` for ``memory://``)."""
        return self._backend.url

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
        """Whether the forge creates its missing tables (at the first enqueue, operation
        or worker startup); otherwise a worker refuses to start without them."""
        return self._backend.creates_tables

    @property
    def retention(self) -> TaskRetention | None:
        """How long finished tasks are kept (``None``: forever, no retention job)."""
        return self._retention

    @property
    def worker_settings(self) -> ForgeWorkerSettings:
        """The worker timings."""
        return self._settings

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
        dedupe_keys: Sequence[str | TaskDedupeKey | None],
        run_at: datetime | None,
        delay: timedelta,
        priority: int,
        max_attempts: int | None,
        partition: str | None = None,
        connection: AsyncConnection | AsyncSession | None = None,
    ) -> list[EnqueueResult]:
        """Validate every payload of ``task`` then enqueue them in one store call.

        Prefer :meth:`ForgeTask.enqueue`; this is what it calls.

        Raises:
            ForgePayloadError: A payload does not validate; nothing was written.
            ForgeStateError: ``connection`` was given to an in-memory forge.
        """
        with _tracing.enqueue_span(task.name, len(payloads)) as span:
            # Built inside the span: each request carries its context (trace_context).
            requests = self._requests(
                task,
                payloads,
                dedupe_keys=dedupe_keys,
                run_at=run_at,
                delay=delay,
                priority=priority,
                max_attempts=max_attempts,
                partition=partition,
            )
            if connection is not None:
                store = self._backend.database_task_store(f"task {task.name!r}: connection=")
                results = list(await store.enqueue_many(requests, connection=connection))
                # Awake workers find the rows once the transaction commits (or NOTIFY says so).
                self._wake_workers()
            else:
                backend = self._backend
                if not backend.tables_ready:
                    await backend.create_tables_once()
                results = await self._send(backend.task_store, requests)
            if span is not None and results:
                _traced(span, requests, results)
            return results

    def _requests(
        self,
        task: ForgeTask,
        payloads: Sequence[Any],
        *,
        dedupe_keys: Sequence[str | TaskDedupeKey | None],
        max_attempts: int | None,
        **options: Any,
    ) -> list[NewTask]:
        attempts = max_attempts if max_attempts is not None else task.max_attempts
        return [
            self._new_task(task, payload, dedupe_key=key, max_attempts=attempts, **options)
            for payload, key in zip(payloads, dedupe_keys, strict=True)
        ]

    async def _send(
        self, store: BackgroundTaskStore, requests: list[NewTask]
    ) -> list[EnqueueResult]:
        if len(requests) == 1:
            results = [await store.enqueue(requests[0])]
        else:
            results = list(await store.enqueue_many(requests)) if requests else []
        self._wake_workers()
        return results

    def _new_task(self, task: ForgeTask, payload: Any, **options: Any) -> NewTask:
        # The registry validates and encodes (the kind's lane, steps, strict JSON); the
        # forge only renames its payload errors, which name the kind and fields, never values.
        try:
            return self.registry.new_task(task.name, payload, **options)
        except TaskPayloadError as exc:
            raise ForgePayloadError(str(exc), task=task.name, fields=exc.fields) from exc
        except TaskCodecError as exc:
            raise ForgePayloadError(
                f"task {task.name!r}: the payload does not encode as JSON "
                f"({type(payload).__name__})",
                task=task.name,
                fields=(),
            ) from exc

    def enqueue_tasks_sync(
        self, task: ForgeTask, payloads: Sequence[Any], **options: Any
    ) -> list[EnqueueResult]:
        """:meth:`enqueue_tasks` from synchronous code (a thread with no running loop).

        The payloads are validated in the calling thread; the store call runs on the
        forge's synchronous-enqueue thread (one event loop and connection pool for
        every synchronous caller, see :meth:`ForgeBackend.run_sync`).

        Raises:
            ForgeStateError: The calling thread runs an event loop.
            ForgePayloadError: A payload does not validate; nothing was written.
        """
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise ForgeStateError(
                f"task {task.name!r}: enqueue_sync() inside an event loop; use await enqueue()"
            )
        with _tracing.enqueue_span(task.name, len(payloads)) as span:
            requests = self._requests(task, payloads, **options)
            results = self._backend.run_sync(lambda store: self._send(store, requests))
            if span is not None and results:
                _traced(span, requests, results)
            return results

    def attach_worker(self, worker: ForgeWorker) -> None:
        """Record a worker running in this process (enqueues here wake it)."""
        self._workers.append(worker)

    def detach_worker(self, worker: ForgeWorker) -> None:
        """Forget a worker that stopped."""
        if worker in self._workers:
            self._workers.remove(worker)

    def current_dispatcher(self) -> TaskWorker[Forge] | None:
        """The task worker running in this process, if any."""
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
        """The forge's workers as a component for ``AsterRuntime(components=[...])``.

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
        http: tuple[str, int] | socket.socket | None = None,
        admin_token: str | None = None,
    ) -> AsterRuntime:
        components: list[object] = []
        if http is not None:
            from ._http import http_service  # needs the web extra

            app = self.asgi_app(admin_token=admin_token)
            components.append(RuntimeComponentWithShutdown(http_service(app, http)))
        components.append(runtime_component(worker.register))
        self._runtime = AsterRuntime(
            components=components, install_signal_handlers=install_signal_handlers
        )
        return self._runtime

    def runtime(
        self,
        *,
        http: tuple[str, int] | socket.socket | None = None,
        admin_token: str | None = None,
        install_signal_handlers: bool = True,
    ) -> AsterRuntime:
        """An ``AsterRuntime`` running the forge (what ``aster-forge worker`` runs).

        Args:
            http: Serve :meth:`asgi_app` on ``(host, port)``, or on an already bound
                listening socket (the caller learns the port and a taken address before
                the runtime starts), as the runtime's ``http`` service.
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

    def _process_role(self) -> ProcessRole:
        # A worker once it built a runtime or a worker attached; the role then stays,
        # so workers that stopped read as "not running", never as a healthy web process.
        if self._runtime is None and not self._workers:
            return ProcessRole.WEB
        return ProcessRole.WORKER

    async def run_health(self, scope: HealthCheckScope) -> SystemHealthReport:
        """Run the health checks of this process's role.

        A worker process runs its runtime's checks, and is unhealthy (one
        ``background_tasks`` component, ``not running``) while its workers are not
        running. A web process (one that never started the workers: they run in
        ``aster-forge worker`` processes) is live, and ready while its database answers
        a ``SELECT 1`` within two seconds; its reports carry a ``role`` component.
        """
        if self._process_role() is ProcessRole.WEB:
            if self._web_health is None:
                self._web_health = web_process_health(self._backend)
            return await self._web_health.run_health(scope)
        if self._runtime is None or not self._workers:
            down = HealthComponentReport.unhealthy(BACKGROUND_TASKS_COMPONENT, "not running")
            return SystemHealthReport((down,))
        return await self._runtime.run_health(scope)

    def asgi_app(
        self,
        *,
        admin_token: str | None = None,
        auth: Callable[[Any], Awaitable[bool]] | None = None,
        allowed_hosts: Sequence[str] | None = None,
        title: str | None = None,
    ) -> Any:
        """The dashboard, admin API, health and metrics (mount under any prefix).

        Needs the ``web`` extra. ``app.mount("/ops", forge.asgi_app(admin_token=...))``.

        Who may change tasks: with neither ``admin_token`` nor ``auth`` (the default),
        the lists, counts, health and metrics answer anyone, and retry, cancel, lane
        pause and a task's payload and result answer only a client connected from this
        machine (403 ``admin_access_not_configured`` otherwise). With either, every
        admin endpoint requires one of them (401 otherwise).

        Args:
            admin_token: A bearer token the admin API accepts (``Authorization: Bearer
                <token>``; the dashboard asks for it).
            auth: The product's own check, ``async def auth(request) -> bool`` on the
                Starlette ``Request`` (its session cookie, a header); ``True`` lets the
                request in.
            allowed_hosts: ``Host`` names the admin API and dashboard answer (default:
                loopback and the server's bind address); list the name the operators
                use, e.g. ``["ops.example.com"]``.
            title: The dashboard's title (default: the forge's name).

        Raises:
            ValueError: A malformed ``admin_token`` (blank, surrounding whitespace).
            TypeError: ``auth`` is not callable.
        """
        from ._web import forge_asgi_app  # needs the web extra

        return forge_asgi_app(
            self, admin_token=admin_token, auth=auth, allowed_hosts=allowed_hosts, title=title
        )

    async def migrate(self) -> None:
        """Create every missing table and index of :attr:`metadata` (idempotent)."""
        await self._backend.create_tables()

    async def drain(self, *, max_tasks: int = 10_000) -> ForgeDrainResult:
        """Run every due task inline, one at a time, and return what happened.

        For product unit tests (best with ``Forge("memory://")``); a task retried with a
        backoff is not due again within the same drain. The declared
        :meth:`resources` are opened for the drain and closed after it, as a worker
        does, unless the forge already has a state (``state=``, or open resources).

        Args:
            max_tasks: Stop after this many executions (guards a task that re-enqueues).
        """
        if not self._backend.tables_ready:
            await self._backend.create_tables_once()
        return await drain_forge(self, max_tasks=max_tasks)

    async def aclose(self) -> None:
        """Close the database connections and stop the synchronous-enqueue thread (the
        forge stays usable: both start again on their next use)."""
        await self._backend.dispose()

    def __repr__(self) -> str:
        return f"Forge(name={self._name!r}, tasks={list(self._tasks)}, lanes={self.lanes})"


def _traced(span: Any, requests: Sequence[NewTask], results: Sequence[EnqueueResult]) -> None:
    """What an enqueue wrote, on its span."""
    ids = [results[0].task_id] if len(results) == 1 else []
    _tracing.enqueued(span, requests[0].lane, ids, created=results[0].created)
