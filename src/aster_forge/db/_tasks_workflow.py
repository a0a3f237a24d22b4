"""Workflows for :class:`~aster_forge.db.BackgroundTaskDbStore`: DAG enqueue, settling, reads."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from ..tasks import NewTask, TaskDependency, TaskLease
from ..tasks._internal import (
    MAX_TASK_ID,
    BackgroundTaskRecord,
    EnqueueResult,
    TaskCompletion,
    TaskWorkflowEdge,
    TaskWorkflowGraph,
    check_workflow_limit,
    walk_workflow,
)
from ._postgres import PgTaskStatements, success_params
from ._tables import record_from_row
from ._task_deps import TaskDependencySql
from ._tasks_sql import TaskSql

__all__ = ["TaskWorkflowMixin"]


class TaskWorkflowMixin:
    """The workflow half of :class:`~aster_forge.db.BackgroundTaskDbStore`.

    The store remembers the claims it handed out whose rows have dependents waiting
    (``dependents_waiting`` on the claimed record); only their finishing writes run in a
    transaction that settles the dependents. Every other task finishes as before.
    """

    _sql: TaskSql
    _table: sa.Table
    _pg: PgTaskStatements | None
    _deps: TaskDependencySql
    _awaited: dict[int, str]

    if TYPE_CHECKING:

        def _success_values(
            self, result_json: str | None, steps_json: str | None
        ) -> dict[str, Any]:
            """The values of a fenced success (defined on the store)."""

        def _checked(self, tasks: Sequence[NewTask]) -> list[NewTask]:
            """The registry-checked tasks (defined by the enqueue half)."""

        async def _enqueue(
            self, conn: AsyncConnection, tasks: Sequence[NewTask], *, locking_read: bool = False
        ) -> list[EnqueueResult]:
            """Insert in the caller's transaction (defined by the enqueue half)."""

    async def enqueue_workflow(
        self, tasks: Sequence[NewTask], dependencies: Sequence[TaskDependency]
    ) -> list[EnqueueResult]:
        """Write every task and edge of a workflow in one transaction; results in input order.

        A task with dependencies is stored ``pending`` but never due (``run_at`` at the
        far end of time) until its dependencies finish as its edges require: then it
        is made due, or cancelled, in the transaction of the ending that decided it.

        Raises:
            TaskWorkflowError: When the dependencies are not a DAG over ``tasks`` (see
                :meth:`~aster_forge.tasks.TaskDependency.checked`); nothing is written.
        """
        edges = TaskDependency.checked(tasks, dependencies)
        waiting = {edge.task for edge in edges}
        blocked = self._deps.blocked_run_at
        rows = [
            dataclasses.replace(task, run_at=blocked) if index in waiting else task
            for index, task in enumerate(self._checked(tasks))
        ]
        awaited = {edge.on for edge in edges}

        async def body(conn: AsyncConnection) -> list[EnqueueResult]:
            results = await self._enqueue(conn, rows)
            await self._deps.write_edges(conn, [r.task_id for r in results], edges)
            return results

        results = await self._sql.run("enqueue workflow", body)
        return [
            EnqueueResult(dataclasses.replace(result.record, dependents_waiting=True), created=True)
            if index in awaited
            else result
            for index, result in enumerate(results)
        ]

    async def dependency_records(self, task_id: int) -> list[BackgroundTaskRecord]:
        """The tasks ``task_id`` waits (or waited) for, by id; empty for a task without."""

        async def body(conn: AsyncConnection) -> list[BackgroundTaskRecord]:
            return [record_from_row(row) for row in await self._deps.dependencies_of(conn, task_id)]

        return await self._sql.run("read task dependencies", body, single_statement=True)

    async def workflow_graph(self, task_id: int, *, limit: int = 500) -> TaskWorkflowGraph | None:
        """The tasks connected to ``task_id`` by dependency edges, nearest first, up to
        ``limit`` (see :meth:`aster_forge.tasks.protocols.TaskWorkflowStore.workflow_graph`).

        One read transaction: a statement per step outwards, then one for the nodes.
        """
        check_workflow_limit(limit)
        if not isinstance(task_id, int) or not 1 <= task_id <= MAX_TASK_ID:
            return None  # no BIGINT row can have it; never hand it to the driver
        deps = self._deps
        t = self._table

        async def body(conn: AsyncConnection) -> TaskWorkflowGraph | None:
            exists = await conn.execute(sa.select(t.c.id).where(t.c.id == task_id))
            if exists.first() is None:
                return None

            async def edges_of(ids: list[int]) -> list[TaskWorkflowEdge]:
                return await deps.edges_touching(conn, ids)

            ids, edges, truncated = await walk_workflow(task_id, edges_of, limit=limit)
            nodes = await deps.nodes(conn, ids)
            present = {node.id for node in nodes}
            return TaskWorkflowGraph(
                task_id=task_id,
                nodes=tuple(nodes),
                edges=tuple(e for e in edges if e.depends_on in present and e.task_id in present),
                truncated=truncated,
            )

        return await self._sql.run("read workflow graph", body)

    async def settle_dependencies(self) -> int:
        """Settle the dependents of tasks whose ending no lease wrote; how many were settled.

        A lease rescue that ends a task, or a dependency added while it ran, leaves its
        dependents to this call; :meth:`stage_waiting_tasks` makes it about once a second
        from a worker.
        """
        return await self._deps.sweep()

    async def _succeed_awaited(
        self, completions: Sequence[TaskCompletion], indexes: Sequence[int]
    ) -> dict[int, bool]:
        """The successes at ``indexes`` (claims with dependents) and the settling of their
        dependents, in one transaction; written or not, by index."""
        chosen = [completions[i] for i in indexes]
        for c in chosen:
            self._take_awaited(*claim_of(c.lease))
        t = self._table
        pg = self._pg

        async def body(conn: AsyncConnection) -> list[bool]:
            now = await self._sql.now(conn)
            if pg is not None:
                # One statement for every success (its RETURNING says which were written).
                rows = await conn.execute(pg.succeed_many, success_params(chosen))
                applied = applied_of(chosen, {(int(row[0]), str(row[1])) for row in rows})
            else:
                applied = []
                for c in chosen:
                    values = self._success_values(c.result_json, c.steps_json)
                    resolved = {k: (v(now) if callable(v) else v) for k, v in values.items()}
                    update = sa.update(t).where(self._sql.fence(c.lease))
                    result = await conn.execute(update.values(updated_at=now.expr, **resolved))
                    applied.append(result.rowcount == 1)
            ended = [c.lease.task_id for c, ok in zip(chosen, applied, strict=True) if ok]
            if ended:
                await self._deps.settle(conn, now, ended)
            return applied

        applied = await self._sql.run("mark tasks succeeded", body)
        return dict(zip(indexes, applied, strict=True))

    def _note_claims(self, records: Sequence[BackgroundTaskRecord]) -> None:
        for record in records:
            if record.dependents_waiting and record.processing_token is not None:
                self._awaited[record.id] = record.processing_token

    def _take_awaited(self, task_id: int, token: str) -> bool:
        """Whether the claim ``(task_id, token)`` has dependents to settle (forgotten now)."""
        if self._awaited.get(task_id) != token:
            return False
        del self._awaited[task_id]
        return True

    def _awaited_indexes(self, completions: Sequence[TaskCompletion]) -> list[int]:
        awaited = self._awaited
        return [
            index
            for index, c in enumerate(completions)
            if awaited.get(c.lease.task_id) == c.lease.processing_token
        ]


def claim_of(lease: TaskLease) -> tuple[int, str]:
    """The claim a lease names: task id and processing token."""
    return lease.task_id, lease.processing_token


def applied_of(completions: Sequence[TaskCompletion], written: set[tuple[int, str]]) -> list[bool]:
    """Which completions a statement wrote, from the ``(id, token)`` pairs it returned."""
    return [(c.lease.task_id, c.lease.processing_token) in written for c in completions]


def merged(count: int, apart: dict[int, bool], rest: Sequence[bool]) -> list[bool]:
    """Results in input order from those written apart (by index) and the rest in order."""
    others = iter(rest)
    return [apart[index] if index in apart else next(others) for index in range(count)]


def without(items: Sequence[Any], indexes: Sequence[int]) -> list[Any]:
    """``items`` without the entries at ``indexes``."""
    skip = set(indexes)
    return [item for index, item in enumerate(items) if index not in skip]
