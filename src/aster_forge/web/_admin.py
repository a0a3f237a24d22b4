"""The admin JSON API under ``/api``: tasks, lanes, scheduled catalog, leases, components.

Every endpoint reads from an :class:`AdminSources` field; an endpoint whose source is
not configured answers 404 ``{"error": "not_configured"}``. With a token every
endpoint requires ``Authorization: Bearer <token>`` (401 otherwise, before anything
is read or written). Mutations (``POST``) additionally refuse a browser request
from another origin (403), so an unprotected local API cannot be driven cross-site.
Retry and cancel go through the store's conditional writes: they never touch a
running task's processing token.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from ..db import AsterForgeDbError
from ..metrics import DispatchStatsSource
from ..runtime import (
    AsterRuntime,
    Clock,
    HealthCheckScope,
    RuntimeComponentRegistry,
    SystemClock,
)
from ..tasks import (
    BackgroundTaskStore,
    DispatchStats,
    ScheduledTaskStore,
    TaskCancelOutcome,
    TaskDispatcher,
    TaskInvalidValueError,
    TaskNotFoundError,
    TaskStateError,
    TaskStatus,
)
from ..tasks._records import MAX_TASK_ID
from ._auth import BearerTokenGuard, HostAllowList, same_origin
from ._health import HealthSource, health_report, resolve_health_runner
from ._leases import RuntimeLeaseSource, leases_json
from ._openapi import openapi_document
from ._params import (
    BadRequestError,
    HealthQuery,
    ScheduledQuery,
    TaskListQuery,
    TaskRetryQuery,
    parse_query,
)
from ._serialize import (
    component_graph_json,
    scheduled_tasks_json,
    shutdown_report_json,
    startup_report_json,
)
from ._tasks_json import label_keys, lanes_json, task_actions, task_json

__all__ = ["AdminSources", "DispatcherSource", "LaneLimits", "admin_routes"]

logger = logging.getLogger("aster_forge.web.admin")

LaneLimits = Mapping[Any, int] | Callable[[], Mapping[Any, int]]
"""Lane concurrency limits: a mapping (lane or wire value -> limit) or a callable."""

DispatcherSource = TaskDispatcher[Any] | Callable[[], TaskDispatcher[Any] | None]
"""A dispatcher, or a callable returning the current one (``None`` while this
instance holds no runtime lease and so runs no dispatcher)."""

Endpoint = Callable[[Request], Awaitable[Response]]
_NO_STORE = {"Cache-Control": "no-store"}


@dataclass(frozen=True, slots=True)
class AdminSources:
    """Where the admin API reads from; every field is optional.

    Attributes:
        runtime: Supplies the component registry and the last startup/shutdown reports.
        components: The component registry (default: ``runtime.registry``).
        task_store: The task table (list, show, retry, cancel, lane counts).
        scheduled_store: The scheduled task catalog.
        leases: Lists runtime leases: any :class:`~aster_forge.runtime.RuntimeLeaseStore`
            (e.g. the process's :class:`~aster_forge.db.RuntimeLeaseDbStore`) or a
            :class:`RuntimeLeaseTableReader`.
        dispatcher: This process's dispatcher (lane limits, in-flight counts, stats),
            or a callable returning it.
        dispatch_stats: Dispatch statistics when there is no ``dispatcher``.
        lane_limits: Lane limits when there is no ``dispatcher``.
        lanes: Lanes to list even when they are idle (wire values or enum members).
        health: What ``/api/health`` runs; default ``runtime``, else ``components``.
        clock: Judges "due"/"claimed" for scheduled rows.
        title: The service title shown by the dashboard and in the OpenAPI document.
    """

    runtime: AsterRuntime | None = None
    components: RuntimeComponentRegistry | None = None
    task_store: BackgroundTaskStore | None = None
    scheduled_store: ScheduledTaskStore | None = None
    leases: RuntimeLeaseSource | None = None
    dispatcher: DispatcherSource | None = None
    dispatch_stats: DispatchStatsSource | None = None
    lane_limits: LaneLimits | None = None
    lanes: Sequence[Hashable] = ()
    health: HealthSource | None = None
    clock: Clock = field(default_factory=SystemClock)
    title: str = "aster-forge"

    @property
    def registry(self) -> RuntimeComponentRegistry | None:
        """The component registry to show (explicit, else the runtime's)."""
        if self.components is not None:
            return self.components
        return None if self.runtime is None else self.runtime.registry

    def health_source(self) -> HealthSource | None:
        """What the health view runs (explicit, else the runtime, else the registry)."""
        if self.health is not None:
            return self.health
        return self.runtime if self.runtime is not None else self.components

    def features(self) -> dict[str, bool]:
        """Which views are configured (the dashboard hides the others)."""
        return {
            "tasks": self.task_store is not None,
            "lanes": self.task_store is not None
            or self.dispatcher is not None
            or self.dispatch_stats is not None
            or self.lane_limits is not None,
            "scheduled": self.scheduled_store is not None,
            "leases": self.leases is not None,
            "components": self.registry is not None,
            "reports": self.registry is not None,
            "health": self.health_source() is not None,
        }

    def current_dispatcher(self) -> TaskDispatcher[Any] | None:
        """Return the dispatcher (calling the factory), or ``None``."""
        source = self.dispatcher
        if source is None or isinstance(source, TaskDispatcher):
            return source
        return source()

    def dispatch_view(self) -> tuple[dict[str, int], dict[str, DispatchStats]]:
        """Return lane limits and stats snapshots (in-flight counts included), by wire value."""
        dispatcher = self.current_dispatcher()
        if dispatcher is not None:
            limits = {c.lane: c.max_concurrency for c in dispatcher.lanes}
            stats = dict(dispatcher.stats.lanes())
            for config in dispatcher.lanes:
                # The dispatcher's own count is authoritative for "executing now".
                snapshot = stats.get(config.lane, DispatchStats())
                stats[config.lane] = replace(snapshot, in_flight=dispatcher.in_flight(config.lane))
            return label_keys(limits), label_keys(stats)
        limits_source = self.lane_limits
        mapping = (
            {}
            if limits_source is None
            else (limits_source() if callable(limits_source) else limits_source)
        )
        stats_source = self.dispatch_stats
        return (
            label_keys({lane: int(limit) for lane, limit in mapping.items()}),
            {} if stats_source is None else label_keys(stats_source.lanes()),
        )


def _error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": code, "message": message}, status_code=status, headers=_NO_STORE)


def _ok(body: Any) -> JSONResponse:
    return JSONResponse(body, headers=_NO_STORE)


def _not_configured(what: str) -> JSONResponse:
    return _error(404, "not_configured", f"no {what} is configured for this admin API")


class _NoSuchTask(Exception):
    """A path task id that cannot name a task (answered 404 ``task_not_found``)."""


def _id_value(raw: str) -> int | None:
    """``raw`` as a task id (decimal digits, ``1..MAX_TASK_ID``), else ``None``.

    Checked before any store call: a value beyond 64 bits would otherwise reach the
    driver (an ``OverflowError`` on SQLite, a misleading database error elsewhere).
    """
    if not (raw.isascii() and raw.isdigit()) or len(raw) > len(str(MAX_TASK_ID)):
        return None
    value = int(raw)
    return value if 1 <= value <= MAX_TASK_ID else None


def _task_id(request: Request) -> int:
    raw = request.path_params["task_id"]
    value = _id_value(raw)
    if value is None:
        raise _NoSuchTask(f"no background task has the id {raw[:40]!r}")
    return value


class _AdminApi:
    """The endpoint implementations, bound to one :class:`AdminSources`."""

    def __init__(
        self, sources: AdminSources, guard: BearerTokenGuard, hosts: HostAllowList
    ) -> None:
        self.sources = sources
        self.guard = guard
        self.hosts = hosts

    async def info(self, request: Request) -> Response:
        s = self.sources
        return _ok(
            {
                "title": s.title,
                "auth_required": self.guard.enabled,
                "features": s.features(),
                "now": s.clock.now().isoformat(),
            }
        )

    async def list_tasks(self, request: Request) -> Response:
        store = self.sources.task_store
        if store is None:
            return _not_configured("task store")
        query = parse_query(TaskListQuery, request.query_params)
        page = await store.list_tasks(
            status=query.status,
            kind=query.kind,
            lane=query.lane,
            limit=query.limit,
            before_id=query.before_id,
        )
        return _ok(
            {
                "items": [task_json(item) for item in page.items],
                "next_before_id": page.next_before_id,
                "limit": query.limit,
            }
        )

    async def get_task(self, request: Request) -> Response:
        store = self.sources.task_store
        if store is None:
            return _not_configured("task store")
        task_id = _task_id(request)
        record = await store.get_task(task_id)
        if record is None:
            return _error(404, "task_not_found", f"background task #{task_id} not found")
        return _ok(task_json(record, detail=True))

    async def retry_task(self, request: Request) -> Response:
        store = self.sources.task_store
        if store is None:
            return _not_configured("task store")
        force = parse_query(TaskRetryQuery, request.query_params).force
        task_id = _task_id(request)
        if not force:
            # The rule the task JSON advertises as "actions"; the store re-checks it
            # in its conditional write, so a race still ends in 409, never a retry.
            current = await store.get_task(task_id)
            if current is None:
                raise TaskNotFoundError(task_id)
            if "retry" not in task_actions(current):
                reason = (
                    "manual retry is not allowed"
                    if current.status is TaskStatus.FAILED
                    else "only failed or cancelled tasks retry"
                )
                raise TaskStateError(task_id, current.status.value, reason)
        record = await store.retry_task(task_id, force=force)
        return _ok(task_json(record, detail=True))

    async def cancel_task(self, request: Request) -> Response:
        store = self.sources.task_store
        if store is None:
            return _not_configured("task store")
        task_id = _task_id(request)
        outcome = await store.cancel_task(task_id)
        if outcome is TaskCancelOutcome.NOT_FOUND:
            return _error(404, "task_not_found", f"background task #{task_id} not found")
        record = await store.get_task(task_id)
        return _ok(
            {
                "outcome": outcome.value,
                "task": None if record is None else task_json(record, detail=True),
            }
        )

    async def lanes(self, request: Request) -> Response:
        s = self.sources
        if not s.features()["lanes"]:
            return _not_configured("lane source")
        limits, stats = s.dispatch_view()
        counts: Sequence[Any] = ()
        if s.task_store is not None:
            wanted = sorted({*limits, *stats, *label_keys(dict.fromkeys(s.lanes))})
            counts = await s.task_store.lane_counts(wanted or None)
        return _ok({"items": lanes_json(limits, stats, counts)})

    async def scheduled(self, request: Request) -> Response:
        store = self.sources.scheduled_store
        if store is None:
            return _not_configured("scheduled task store")
        namespace = parse_query(ScheduledQuery, request.query_params).namespace
        records = await store.list_scheduled_tasks(namespace)
        return _ok(scheduled_tasks_json(records, self.sources.clock.now()))

    async def leases(self, request: Request) -> Response:
        source = self.sources.leases
        if source is None:
            return _not_configured("runtime lease source")
        return _ok(leases_json(await source.list_runtime_leases()))

    async def components(self, request: Request) -> Response:
        registry = self.sources.registry
        if registry is None:
            return _not_configured("component registry")
        return _ok(component_graph_json(registry))

    async def reports(self, request: Request) -> Response:
        registry = self.sources.registry
        if registry is None:
            return _not_configured("component registry")
        return _ok(
            {
                "startup": startup_report_json(registry.last_startup_report),
                "shutdown": shutdown_report_json(registry.last_shutdown_report),
            }
        )

    async def health(self, request: Request) -> Response:
        source = self.sources.health_source()
        if source is None:
            return _not_configured("health source")
        scope = HealthCheckScope.parse(parse_query(HealthQuery, request.query_params).scope)
        shutdown = None if self.sources.runtime is None else self.sources.runtime.shutdown_token
        report = await health_report(scope, resolve_health_runner(source), shutdown)
        return _ok({"scope": scope.as_str(), **report.to_json_dict()})

    async def openapi(self, request: Request) -> Response:
        return _ok(openapi_document(self.sources.title, auth=self.guard.enabled))

    def wrap(self, endpoint: Endpoint, *, mutating: bool = False) -> Endpoint:
        """Map typed errors to status codes, then guard with the token (and origin)."""

        async def handled(request: Request) -> Response:
            if mutating and not same_origin(request):
                return _error(403, "cross_origin", "cross-origin requests may not modify tasks")
            try:
                return await endpoint(request)
            except BadRequestError as exc:
                return _error(400, "bad_request", str(exc))
            except _NoSuchTask as exc:
                return _error(404, "task_not_found", str(exc))
            except TaskNotFoundError as exc:
                return _error(404, "task_not_found", str(exc))
            except TaskStateError as exc:
                return _error(409, "task_state_conflict", str(exc))
            except TaskInvalidValueError as exc:
                return _error(400, "bad_request", str(exc))
            except AsterForgeDbError:
                logger.exception("admin API store operation failed")
                return _error(503, "store_unavailable", "the store is unavailable")

        return self.hosts.protect(self.guard.protect(handled))


def admin_routes(
    sources: AdminSources,
    *,
    admin_token: str | None = None,
    prefix: str = "/api",
    allowed_hosts: Sequence[str] | None = None,
) -> list[BaseRoute]:
    """Return the admin API routes (see the module docstring and ``docs/web.md``).

    Args:
        sources: What the API reads from.
        admin_token: When set, every endpoint requires it as a bearer token.
        prefix: The path prefix.
        allowed_hosts: ``Host`` names the API answers (403 ``host_not_allowed``
            otherwise); default the loopback names and the address the server is
            bound to (see :class:`HostAllowList`).

    Raises:
        ValueError: An empty or malformed ``admin_token``, an empty allowed host.
        TypeError: ``allowed_hosts`` is a bare string.
    """
    api = _AdminApi(sources, BearerTokenGuard(admin_token), HostAllowList(allowed_hosts))
    get: list[tuple[str, Endpoint]] = [
        ("/info", api.info),
        ("/tasks", api.list_tasks),
        ("/tasks/{task_id}", api.get_task),
        ("/lanes", api.lanes),
        ("/scheduled", api.scheduled),
        ("/leases", api.leases),
        ("/components", api.components),
        ("/reports", api.reports),
        ("/health", api.health),
        ("/openapi.json", api.openapi),
    ]
    post: list[tuple[str, Endpoint]] = [
        ("/tasks/{task_id}/retry", api.retry_task),
        ("/tasks/{task_id}/cancel", api.cancel_task),
    ]
    routes: list[BaseRoute] = [
        Route(prefix + path, api.wrap(fn), methods=["GET"]) for path, fn in get
    ]
    routes += [
        Route(prefix + path, api.wrap(fn, mutating=True), methods=["POST"]) for path, fn in post
    ]
    return routes
