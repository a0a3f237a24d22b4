"""The admin JSON API under ``/api``: tasks, lanes, scheduled catalog, leases, components.

Every endpoint reads from an :class:`AdminSources` field; an endpoint whose source is
not configured answers 404 ``{"error": "not_configured"}``. Access follows the admin
door (``_auth.AdminDoor``): with an admin token or the product's ``auth``, every
endpoint requires one (401 otherwise, before anything is read or written); with
neither, mutations and a task's detail (payload, result) answer only a client
connected from loopback (403 ``admin_access_not_configured`` otherwise). Mutations
(``POST``) additionally refuse a browser request from another origin (403), so an
unprotected local API cannot be driven cross-site. Retry and cancel go through the
store's conditional writes: they never touch a running task's processing token.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from ..db.errors import AsterForgeDbError
from ..runtime import HealthCheckScope
from ..tasks import TaskInvalidValueError
from ..tasks.errors import TaskNotFoundError, TaskStateError
from ._admin_tasks import TaskEndpoints
from ._auth import AdminAuth, AdminDoor, HostAllowList, same_origin
from ._health import health_report, resolve_health_runner
from ._lanes_control import lane_control_endpoints
from ._leases import leases_json
from ._openapi import openapi_document
from ._params import BadRequestError, HealthQuery, ScheduledQuery, parse_query
from ._responses import NoSuchTask, error, not_configured, ok
from ._serialize import (
    component_graph_json,
    scheduled_tasks_json,
    shutdown_report_json,
    startup_report_json,
)
from ._sources import AdminSources, DispatcherSource, LaneLimits
from ._tasks_json import label_keys, lanes_json

__all__ = ["AdminSources", "DispatcherSource", "LaneLimits", "admin_routes"]

logger = logging.getLogger("aster_forge.web.admin")

Endpoint = Callable[[Request], Awaitable[Response]]


class _AdminApi:
    """The endpoint implementations, bound to one :class:`AdminSources`."""

    def __init__(self, sources: AdminSources, door: AdminDoor, hosts: HostAllowList) -> None:
        self.sources = sources
        self.door = door
        self.hosts = hosts

    async def info(self, request: Request) -> Response:
        s = self.sources
        return ok(
            {
                "title": s.title,
                "auth_required": self.door.configured,
                "actions_allowed": await self.door.may_act(request),
                "features": s.features(),
                "now": s.clock.now().isoformat(),
            }
        )

    async def lanes(self, request: Request) -> Response:
        s = self.sources
        if not s.features()["lanes"]:
            return not_configured("lane source")
        limits, stats = s.dispatch_view()
        counts: Sequence[Any] = ()
        states: Sequence[Any] = ()
        if s.task_store is not None:
            wanted = sorted({*limits, *stats, *label_keys(dict.fromkeys(s.lanes))})
            counts = await s.task_store.lane_counts(wanted or None)
            states = await s.task_store.lane_states()
        items = lanes_json(
            limits,
            stats,
            counts,
            states,
            s.cluster_view(),
            s.partition_view(),
            s.rate_view(),
            s.clock.now(),
            s.partition_rate_view(),
        )
        return ok({"items": items})

    async def scheduled(self, request: Request) -> Response:
        store = self.sources.scheduled_store
        if store is None:
            return not_configured("scheduled task store")
        namespace = parse_query(ScheduledQuery, request.query_params).namespace
        records = await store.list_scheduled_tasks(namespace)
        return ok(scheduled_tasks_json(records, self.sources.clock.now()))

    async def leases(self, request: Request) -> Response:
        source = self.sources.leases
        if source is None:
            return not_configured("runtime lease source")
        return ok(leases_json(await source.list_runtime_leases()))

    async def components(self, request: Request) -> Response:
        registry = self.sources.registry
        if registry is None:
            return not_configured("component registry")
        return ok(component_graph_json(registry))

    async def reports(self, request: Request) -> Response:
        registry = self.sources.registry
        if registry is None:
            return not_configured("component registry")
        return ok(
            {
                "startup": startup_report_json(registry.last_startup_report),
                "shutdown": shutdown_report_json(registry.last_shutdown_report),
            }
        )

    async def health(self, request: Request) -> Response:
        source = self.sources.health_source()
        if source is None:
            return not_configured("health source")
        scope = HealthCheckScope.parse(parse_query(HealthQuery, request.query_params).scope)
        shutdown = None if self.sources.runtime is None else self.sources.runtime.shutdown_token
        report = await health_report(scope, resolve_health_runner(source), shutdown)
        return ok({"scope": scope.value, **report.to_json_dict()})

    async def openapi(self, request: Request) -> Response:
        return ok(openapi_document(self.sources.title, auth=self.door.configured))

    def wrap(
        self, endpoint: Endpoint, *, mutating: bool = False, sensitive: bool = False
    ) -> Endpoint:
        """Map typed errors to status codes, then guard with the door (and origin).

        ``mutating`` implies ``sensitive`` (see :meth:`AdminDoor.protect`).
        """

        async def handled(request: Request) -> Response:
            if mutating and not same_origin(request):
                return error(403, "cross_origin", "cross-origin requests may not modify tasks")
            try:
                return await endpoint(request)
            except BadRequestError as exc:
                return error(400, "bad_request", str(exc))
            except NoSuchTask as exc:
                return error(404, "task_not_found", str(exc))
            except TaskNotFoundError as exc:
                return error(404, "task_not_found", str(exc))
            except TaskStateError as exc:
                return error(409, "task_state_conflict", str(exc))
            except TaskInvalidValueError as exc:
                return error(400, "bad_request", str(exc))
            except AsterForgeDbError:
                logger.exception("admin API store operation failed")
                return error(503, "store_unavailable", "the store is unavailable")

        return self.hosts.protect(self.door.protect(handled, sensitive=sensitive or mutating))


def admin_routes(
    sources: AdminSources,
    *,
    admin_token: str | None = None,
    auth: AdminAuth | None = None,
    prefix: str = "/api",
    allowed_hosts: Sequence[str] | None = None,
) -> list[BaseRoute]:
    """Return the admin API routes (see the module docstring and ``docs/web.md``).

    Args:
        sources: What the API reads from.
        admin_token: When set, every endpoint accepts it as a bearer token.
        auth: The product's own check (``async def auth(request) -> bool``); when set,
            every endpoint accepts a request it lets in. With neither, mutations and
            task details answer loopback clients only.
        prefix: The path prefix.
        allowed_hosts: ``Host`` names the API answers (403 ``host_not_allowed``
            otherwise); default the loopback names and the address the server is
            bound to (see :class:`HostAllowList`).

    Raises:
        ValueError: An empty or malformed ``admin_token``, an empty allowed host.
        TypeError: ``allowed_hosts`` is a bare string, ``auth`` is not callable.
    """
    door = AdminDoor(token=admin_token, auth=auth)
    api = _AdminApi(sources, door, HostAllowList(allowed_hosts))
    tasks = TaskEndpoints(sources)
    get: list[tuple[str, Endpoint]] = [
        ("/info", api.info),
        ("/overview", tasks.overview),
        ("/tasks", tasks.list_tasks),
        ("/tasks/counts", tasks.count_tasks),
        ("/tasks/{task_id}", tasks.get_task),
        ("/tasks/{task_id}/workflow", tasks.workflow),
        ("/lanes", api.lanes),
        ("/scheduled", api.scheduled),
        ("/leases", api.leases),
        ("/components", api.components),
        ("/reports", api.reports),
        ("/health", api.health),
        ("/openapi.json", api.openapi),
    ]
    post: list[tuple[str, Endpoint]] = [
        ("/tasks/bulk/{action}", tasks.bulk),
        ("/tasks/{task_id}/retry", tasks.retry_task),
        ("/tasks/{task_id}/cancel", tasks.cancel_task),
        ("/tasks/{task_id}/workflow/cancel", tasks.cancel_workflow),
        *lane_control_endpoints(lambda: sources.task_store),
    ]
    # A task's detail carries its payload and result: the product's data.
    sensitive = {"/tasks/{task_id}"}
    routes: list[BaseRoute] = [
        Route(prefix + path, api.wrap(fn, sensitive=path in sensitive), methods=["GET"])
        for path, fn in get
    ]
    routes += [
        Route(prefix + path, api.wrap(fn, mutating=True), methods=["POST"]) for path, fn in post
    ]
    return routes
