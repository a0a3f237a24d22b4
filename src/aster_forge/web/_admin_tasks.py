"""The admin API's task endpoints: list/search, counts, detail, retry, cancel, bulk, overview.

Every write goes through the store's conditional writes and is logged on
``aster_forge.web.admin`` (who asked, which task ids; never payload values).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from ..tasks import BackgroundTaskStore
from ..tasks._internal import (
    MAX_WORKFLOW_NODES,
    TaskAdminStore,
    TaskBulkResult,
    TaskCancelOutcome,
    TaskLaneCounts,
    TaskStatus,
    TaskWorkflowGraph,
    TaskWorkflowStore,
    cancel_workflow_nodes,
)
from ..tasks.errors import TaskNotFoundError, TaskStateError
from ._params import (
    BadRequestError,
    TaskBulkBody,
    TaskCountQuery,
    TaskListQuery,
    TaskRetryQuery,
    parse_body,
    parse_query,
)
from ._responses import error, not_configured, ok, task_id_param
from ._serialize import iso
from ._sources import AdminSources
from ._tasks_json import task_actions, task_json

__all__ = ["THROUGHPUT_MINUTES", "WORKFLOW_NODES", "TaskEndpoints", "workflow_json"]

logger = logging.getLogger("aster_forge.web.admin")

THROUGHPUT_MINUTES = 60
"""The overview chart's window (minutes)."""

WORKFLOW_NODES = 500
"""The most tasks ``GET /api/tasks/{task_id}/workflow`` shows."""

_BULK_ACTIONS = ("retry", "cancel")


def _client(request: Request) -> str:
    return "unknown" if request.client is None else request.client.host


def bulk_json(action: str, result: TaskBulkResult, *, dry_run: bool) -> dict[str, Any]:
    """The JSON answer of a bulk action."""
    return {
        "action": action,
        "dry_run": dry_run,
        "matched": result.matched,
        "eligible": result.eligible,
        "changed": list(result.changed),
    }


def workflow_json(graph: TaskWorkflowGraph, *, limit: int) -> dict[str, Any]:
    """The JSON answer of a workflow graph."""
    return {
        "task_id": graph.task_id,
        "nodes": [
            {
                "id": node.id,
                "kind": node.kind,
                "lane": node.lane,
                "status": node.status.value,
                "waiting": node.waiting,
            }
            for node in graph.nodes
        ],
        "edges": [
            {"from": edge.depends_on, "to": edge.task_id, "run_anyway": edge.run_anyway}
            for edge in graph.edges
        ],
        "dependencies": graph.dependencies(graph.task_id),
        "dependents": graph.dependents(graph.task_id),
        "truncated": graph.truncated,
        "limit": limit,
    }


class TaskEndpoints:
    """The task endpoints, bound to one :class:`AdminSources`."""

    def __init__(self, sources: AdminSources) -> None:
        self.sources = sources

    def _admin_store(self) -> TaskAdminStore | None:
        store = self.sources.task_store
        return store if isinstance(store, TaskAdminStore) else None

    async def _lane_counts(self) -> Sequence[TaskLaneCounts]:
        store = self.sources.task_store
        return () if store is None else await store.lane_counts()

    async def list_tasks(self, request: Request) -> Response:
        """``GET /api/tasks``."""
        store = self.sources.task_store
        if store is None:
            return not_configured("task store")
        query = parse_query(TaskListQuery, request.query_params)
        admin = self._admin_store()
        if admin is not None:
            page = await admin.search_tasks(
                query.task_query(),
                limit=query.limit,
                before_id=query.before_id,
                after_id=query.after_id,
            )
            items, older, newer = page.items, page.next_before_id, page.prev_after_id
        else:
            if query.needs_search() or query.after_id is not None:
                raise BadRequestError("this task store supports only status, kind and lane filters")
            legacy = await store.list_tasks(
                status=query.status,
                kind=query.kind,
                lane=query.lane,
                limit=query.limit,
                before_id=query.before_id,
            )
            items, older, newer = tuple(legacy.items), legacy.next_before_id, None
        now = self.sources.clock.now()
        return ok(
            {
                "items": [task_json(item, now=now) for item in items],
                "next_before_id": older,
                "prev_after_id": newer,
                "limit": query.limit,
            }
        )

    async def count_tasks(self, request: Request) -> Response:
        """``GET /api/tasks/counts``."""
        admin = self._admin_store()
        if admin is None:
            return not_configured("task store with operator queries")
        query = parse_query(TaskCountQuery, request.query_params)
        counts = await admin.count_tasks(query.task_query())
        return ok(
            {
                "counts": {status.value: counts.get(status, 0) for status in TaskStatus},
                "total": sum(counts.values()),
            }
        )

    async def get_task(self, request: Request) -> Response:
        """``GET /api/tasks/{task_id}``."""
        store = self.sources.task_store
        if store is None:
            return not_configured("task store")
        task_id = task_id_param(request)
        record = await store.get_task(task_id)
        if record is None:
            return error(404, "task_not_found", f"background task #{task_id} not found")
        return ok(task_json(record, now=self.sources.clock.now(), detail=True))

    async def retry_task(self, request: Request) -> Response:
        """``POST /api/tasks/{task_id}/retry``."""
        store = self.sources.task_store
        if store is None:
            return not_configured("task store")
        force = parse_query(TaskRetryQuery, request.query_params).force
        task_id = task_id_param(request)
        if not force:
            await _check_retry_allowed(store, task_id)
        record = await store.retry_task(task_id, force=force)
        logger.info("admin: task #%d retried (force=%s) by %s", task_id, force, _client(request))
        return ok(task_json(record, now=self.sources.clock.now(), detail=True))

    async def cancel_task(self, request: Request) -> Response:
        """``POST /api/tasks/{task_id}/cancel``."""
        store = self.sources.task_store
        if store is None:
            return not_configured("task store")
        task_id = task_id_param(request)
        outcome = await store.cancel_task(task_id)
        if outcome is TaskCancelOutcome.NOT_FOUND:
            return error(404, "task_not_found", f"background task #{task_id} not found")
        logger.info(
            "admin: cancel of task #%d: %s, by %s", task_id, outcome.value, _client(request)
        )
        record = await store.get_task(task_id)
        return ok(
            {
                "outcome": outcome.value,
                "task": None
                if record is None
                else task_json(record, now=self.sources.clock.now(), detail=True),
            }
        )

    async def _workflow_graph(self, request: Request, limit: int) -> TaskWorkflowGraph | Response:
        # Typed as object: mypy reads the two protocols' intersection as impossible.
        store: object = self.sources.task_store
        if not isinstance(store, TaskWorkflowStore):
            return not_configured("task store with workflows")
        task_id = task_id_param(request)
        graph = await store.workflow_graph(task_id, limit=limit)
        if graph is None:
            return error(404, "task_not_found", f"background task #{task_id} not found")
        return graph

    async def workflow(self, request: Request) -> Response:
        """``GET /api/tasks/{task_id}/workflow``: the connected tasks and their edges."""
        graph = await self._workflow_graph(request, WORKFLOW_NODES)
        if isinstance(graph, Response):
            return graph
        return ok(workflow_json(graph, limit=WORKFLOW_NODES))

    async def cancel_workflow(self, request: Request) -> Response:
        """``POST /api/tasks/{task_id}/workflow/cancel``: cancel every unfinished task
        connected to the task (pending ones end cancelled, running ones are asked to stop)."""
        store = self.sources.task_store
        if store is None:
            return not_configured("task store")
        graph = await self._workflow_graph(request, MAX_WORKFLOW_NODES)
        if isinstance(graph, Response):
            return graph
        cancelled, requested = await cancel_workflow_nodes(store, graph)
        logger.info(
            "admin: workflow of task #%d cancelled by %s: %d cancelled, %d asked to stop",
            graph.task_id,
            _client(request),
            len(cancelled),
            len(requested),
        )
        return ok(
            {
                "task_id": graph.task_id,
                "cancelled": cancelled,
                "cancel_requested": requested,
                "truncated": graph.truncated,
            }
        )

    async def bulk(self, request: Request) -> Response:
        """``POST /api/tasks/bulk/{action}`` (``retry`` or ``cancel``)."""
        action = request.path_params["action"]
        if action not in _BULK_ACTIONS:
            return error(404, "not_found", "bulk actions are retry and cancel")
        admin = self._admin_store()
        if admin is None:
            return not_configured("task store with operator queries")
        body = parse_body(TaskBulkBody, await request.body())
        run = admin.retry_tasks if action == "retry" else admin.cancel_tasks
        result = await run(body.task_query(), limit=body.limit, dry_run=body.dry_run)
        if not body.dry_run:
            logger.info(
                "admin: bulk %s by %s: %d selected, %d changed: %s",
                action,
                _client(request),
                result.matched,
                len(result.changed),
                ", ".join(f"#{task_id}" for task_id in result.changed) or "none",
            )
        return ok(bulk_json(action, result, dry_run=body.dry_run))

    async def overview(self, request: Request) -> Response:
        """``GET /api/overview``: status counts per lane (running tasks whose lease expired
        as ``lease_expired``) and the throughput chart's data."""
        admin = self._admin_store()
        if admin is None:
            return not_configured("task store with operator queries")
        lanes = await admin.lane_status_counts()
        rows = await admin.task_throughput(minutes=THROUGHPUT_MINUTES)
        expired = {c.lane: c.expired for c in await self._lane_counts()}
        now = lanes[0].now if lanes else self.sources.clock.now()
        start = now.replace(second=0, microsecond=0) - timedelta(minutes=THROUGHPUT_MINUTES - 1)
        series: dict[str, dict[str, list[int]]] = {}
        for lane in sorted({*(c.lane for c in lanes), *(r.lane for r in rows)}):
            series[lane] = {
                name: [0] * THROUGHPUT_MINUTES for name in ("succeeded", "failed", "retried")
            }
        for row in rows:
            index = int((row.minute - start).total_seconds() // 60)
            if 0 <= index < THROUGHPUT_MINUTES:
                for name in ("succeeded", "failed", "retried"):
                    series[row.lane][name][index] += getattr(row, name)
        return ok(
            {
                "now": now.isoformat(),
                "minutes": THROUGHPUT_MINUTES,
                "start": start.isoformat(),
                "lanes": [
                    {
                        "lane": c.lane,
                        "counts": {status.value: c.counts.get(status, 0) for status in TaskStatus},
                        "lease_expired": expired.get(c.lane, 0),
                        "oldest_pending_created_at": iso(c.oldest_pending_created_at),
                        "oldest_pending_age_seconds": None
                        if c.oldest_pending_created_at is None
                        else max(0.0, (c.now - c.oldest_pending_created_at).total_seconds()),
                    }
                    for c in lanes
                ],
                "throughput": [{"lane": lane, **values} for lane, values in series.items()],
            }
        )


async def _check_retry_allowed(store: BackgroundTaskStore, task_id: int) -> None:
    """The rule the task JSON advertises as ``actions``; the store re-checks it.

    Raises:
        TaskNotFoundError: No such task.
        TaskStateError: Retry is not one of the task's actions now.
    """
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
