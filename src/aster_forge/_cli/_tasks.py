"""``aster-forge tasks list|show|retry|cancel|workflow`` on a reference task table (``--table``)."""

from __future__ import annotations

import json
import textwrap
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import sqlalchemy as sa
from rich.table import Table

from aster_forge import BackgroundTaskRecord, TaskCancelOutcome, TaskStateError, TaskStatus
from aster_forge._json import load_json
from aster_forge.db import BackgroundTaskDbStore, background_tasks_table
from aster_forge.tasks._internal import (
    MAX_WORKFLOW_NODES,
    TaskStepInfo,
    TaskWorkflowGraph,
    cancel_workflow_nodes,
    parse_task_steps_json,
)

from ._db import checked_engine, require_table
from ._errors import EXIT_FAILED, CliError
from ._output import console

__all__ = [
    "cancel_task",
    "list_tasks",
    "retry_task",
    "show_task",
    "show_workflow",
    "task_dict",
    "task_store",
]

_FORCE_HELPS = frozenset({TaskStatus.FAILED.value, TaskStatus.CANCELLED.value})


@asynccontextmanager
async def task_store(url: str, table: str) -> AsyncIterator[BackgroundTaskDbStore]:
    """A store on the task table ``table`` (which must exist) of the database at ``url``.

    The ``tasks`` and ``lanes`` commands work on an existing database: a SQLite file that
    does not exist is an error, not a new empty database.
    """
    async with checked_engine(url, must_exist=True) as engine:
        await require_table(engine, table, url)
        yield BackgroundTaskDbStore(engine, table=background_tasks_table(sa.MetaData(), table))


def _iso(value: Any) -> str | None:
    return None if value is None else value.isoformat()


def _steps(record: BackgroundTaskRecord) -> tuple[TaskStepInfo, ...]:
    if not record.steps_json:
        return ()
    try:
        return parse_task_steps_json(record.steps_json)
    except ValueError:
        return ()


def _stored_json(text: str | None) -> tuple[Any, bool]:
    """``(value, invalid)``: a stored text that does not decode shows as ``None``."""
    if text is None:
        return None, False
    try:
        return load_json(text, what="stored value", error=ValueError), False
    except ValueError:
        return None, True


def task_dict(record: BackgroundTaskRecord, *, detail: bool = False) -> dict[str, Any]:
    """A JSON-ready view of one task (with payload, result and steps when ``detail``)."""
    out: dict[str, Any] = {
        "id": record.id,
        "kind": record.kind,
        "lane": record.lane,
        "status": record.status.value,
        "attempt": record.attempt,
        "max_attempts": record.max_attempts,
        "run_at": _iso(record.run_at),
        "last_error": record.last_error,
        "failure_reason": None if record.failure_reason is None else record.failure_reason.value,
        "manual_retry_allowed": record.manual_retry_allowed,
        "cancel_requested": record.cancel_requested,
        "snooze_count": record.snooze_count,
        "claimed_by": record.claimed_by,
        "created_at": _iso(record.created_at),
        "updated_at": _iso(record.updated_at),
        "started_at": _iso(record.started_at),
        "finished_at": _iso(record.finished_at),
    }
    if detail:
        out["payload"], out["payload_invalid"] = _stored_json(record.payload_json)
        out["result"], out["result_invalid"] = _stored_json(record.result_json)
        out["dedupe_key"] = record.dedupe_key
        out["last_traceback"] = record.last_traceback
        out["steps"] = [
            {
                "key": s.key,
                "title": s.title,
                "status": s.status.value,
                "progress_current": s.progress_current,
                "progress_total": s.progress_total,
                "detail": s.detail,
            }
            for s in _steps(record)
        ]
    return out


def _progress(record: BackgroundTaskRecord) -> str:
    steps = _steps(record)
    if not steps:
        return ""
    done = sum(1 for s in steps if s.status.value in ("succeeded", "skipped"))
    active = next((s for s in steps if s.status.value in ("active", "failed")), None)
    label = f"{done}/{len(steps)}"
    return f"{label} {active.key}" if active is not None else label


async def list_tasks(
    url: str,
    table: str,
    *,
    status: str | None = None,
    kind: str | None = None,
    lane: str | None = None,
    limit: int = 50,
    as_json: bool = False,
) -> int:
    """Print one page of tasks, newest first."""
    async with task_store(url, table) as store:
        page = await store.list_tasks(
            status=None if status is None else TaskStatus(status),
            kind=kind,
            lane=lane,
            limit=limit,
        )
    if as_json:
        console().print_json(
            json.dumps(
                {
                    "items": [task_dict(r) for r in page.items],
                    "next_before_id": page.next_before_id,
                }
            )
        )
        return 0
    rows = Table("ID", "KIND", "LANE", "STATUS", "ATTEMPT", "STEPS", "LAST ERROR")
    for r in page.items:
        rows.add_row(
            str(r.id),
            r.kind,
            r.lane,
            r.status.value,
            f"{r.attempt}/{r.max_attempts}",
            _progress(r),
            (r.last_error or "")[:60],
        )
    console().print(rows)
    if not page.items:
        console().print("no tasks")
    return 0


async def _get(store: BackgroundTaskDbStore, task_id: int) -> BackgroundTaskRecord:
    record = await store.get_task(task_id)
    if record is None:
        raise CliError(f"task {task_id} not found", EXIT_FAILED)
    return record


async def show_task(url: str, table: str, task_id: int, *, as_json: bool = False) -> int:
    """Print one task with its times and steps."""
    async with task_store(url, table) as store:
        record = await _get(store, task_id)
    data = task_dict(record, detail=True)
    if as_json:
        console().print_json(json.dumps(data))
        return 0
    out = console()
    for key in ("id", "kind", "lane", "status", "attempt", "max_attempts", "run_at"):
        out.print(f"{key:>14}: {data[key]}")
    optional = ("created_at", "started_at", "finished_at", "updated_at", "claimed_by")
    for key in (*optional, "last_error", "failure_reason", "dedupe_key"):
        if data[key] is not None:
            out.print(f"{key:>14}: {data[key]}")
    if data["last_traceback"]:
        out.print(f"{'traceback':>14}:")
        trace = textwrap.indent(data["last_traceback"].rstrip("\n"), " " * 16)
        out.print(trace)
    if data["snooze_count"]:
        out.print(f"{'snooze_count':>14}: {data['snooze_count']}")
    for key in ("payload", "result"):
        if data[f"{key}_invalid"]:
            out.print(f"{key:>14}: (stored {key} is not decodable JSON)")
        elif key == "payload" or data[key] is not None:
            out.print(f"{key:>14}: {json.dumps(data[key])}")
    for step in data["steps"]:
        total = step["progress_total"]
        progress = f" {step['progress_current']}/{total}" if total else ""
        detail = f" - {step['detail']}" if step["detail"] else ""
        out.print(f"{'step':>14}: [{step['status']}] {step['title']}{progress}{detail}")
    return 0


async def retry_task(url: str, table: str, task_id: int, *, force: bool = False) -> int:
    """Put a failed/cancelled task back to pending.

    Raises:
        CliError: Unknown task, or a refusal (saying ``--force`` when it would help).
    """
    async with task_store(url, table) as store:
        try:
            record = await store.retry_task(task_id, force=force)
        except TaskStateError as exc:
            # A failed or cancelled task is refused only for its manual-retry flag,
            # which --force overrides; other statuses are refused whatever the flag.
            if force or exc.status not in _FORCE_HELPS:
                raise
            raise CliError(
                f"{exc}; 'aster-forge tasks retry {task_id} --force' retries it anyway",
                EXIT_FAILED,
            ) from None
    console().print(f"task {record.id} is {record.status.value} again")
    return 0


async def cancel_task(url: str, table: str, task_id: int) -> int:
    """Cancel a pending task, or request cancellation of a running one."""
    async with task_store(url, table) as store:
        outcome = await store.cancel_task(task_id)
    if outcome is TaskCancelOutcome.NOT_FOUND:
        raise CliError(f"task {task_id} not found", EXIT_FAILED)
    messages = {
        TaskCancelOutcome.CANCELLED: f"task {task_id} cancelled",
        TaskCancelOutcome.CANCEL_REQUESTED: (
            f"task {task_id} is running; cancellation requested (it ends cancelled "
            "instead of being retried)"
        ),
        TaskCancelOutcome.ALREADY_FINISHED: f"task {task_id} already finished; nothing changed",
    }
    console().print(messages[outcome])
    return 0 if outcome is not TaskCancelOutcome.ALREADY_FINISHED else EXIT_FAILED


def _workflow_dict(graph: TaskWorkflowGraph) -> dict[str, Any]:
    return {
        "task_id": graph.task_id,
        "nodes": [
            {
                "id": n.id,
                "kind": n.kind,
                "lane": n.lane,
                "status": n.status.value,
                "waiting": n.waiting,
            }
            for n in graph.nodes
        ],
        "edges": [
            {"from": e.depends_on, "to": e.task_id, "run_anyway": e.run_anyway} for e in graph.edges
        ],
        "truncated": graph.truncated,
    }


async def show_workflow(
    url: str,
    table: str,
    task_id: int,
    *,
    limit: int = 500,
    cancel: bool = False,
    as_json: bool = False,
) -> int:
    """Print the tasks connected to ``task_id`` by dependencies, each with what it waits
    for; with ``cancel``, first cancel every unfinished one."""
    async with task_store(url, table) as store:
        cancelled: list[int] = []
        requested: list[int] = []
        if cancel:
            whole = await store.workflow_graph(task_id, limit=MAX_WORKFLOW_NODES)
            if whole is None:
                raise CliError(f"task {task_id} not found", EXIT_FAILED)
            cancelled, requested = await cancel_workflow_nodes(store, whole)
        graph = await store.workflow_graph(task_id, limit=limit)
    if graph is None:
        raise CliError(f"task {task_id} not found", EXIT_FAILED)
    if as_json:
        data = _workflow_dict(graph)
        if cancel:
            data["cancelled"], data["cancel_requested"] = cancelled, requested
        console().print_json(json.dumps(data))
        return 0
    out = console()
    if cancel:
        out.print(f"{len(cancelled)} cancelled, {len(requested)} running asked to stop")
    rows = Table("ID", "KIND", "LANE", "STATUS", "WAITS FOR")
    for node in graph.nodes:
        waits = [
            f"{e.depends_on}{' (anyway)' if e.run_anyway else ''}"
            for e in graph.edges
            if e.task_id == node.id
        ]
        status = "waiting" if node.waiting else node.status.value
        marker = "*" if node.id == graph.task_id else ""
        rows.add_row(f"{node.id}{marker}", node.kind, node.lane, status, ", ".join(waits))
    out.print(rows)
    if graph.truncated:
        out.print(f"more tasks are connected than --limit {limit} shows")
    return 0
