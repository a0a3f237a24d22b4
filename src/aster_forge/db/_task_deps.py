"""The dependency table beside a task table, and how a finished task settles its dependents.

A dependent is written ``pending`` with ``run_at`` at ``NEVER_EXPIRES`` and its count of
dependencies in ``dependencies_left``: no claim takes it, and no claim statement had to
change for it. Its dependencies carry ``dependents_waiting``; the transaction that ends
one of them (or the sweep, for an ending no lease wrote, such as a lease rescue or an
operator's cancel) clears the flag and, for each dependent, locks the dependent's row
before reading and lowering its count. Two dependencies ending at once on two
connections therefore count in turn, the second reading the first's count committed,
and exactly one of them takes it to zero and makes the join due.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from .. import _tracing
from ..tasks import TaskDependency
from ..tasks._internal import TaskFailureReason, TaskStatus, TaskWorkflowEdge, TaskWorkflowNode
from ._tasks_results import execute_ending
from ._tasks_sql import DbNow, TaskSql
from ._time import NEVER_EXPIRES, UtcDateTime

__all__ = [
    "DEPENDENCY_CANCELLED_ERROR",
    "TaskDependencySql",
]

DEPENDENCY_CANCELLED_ERROR = "Cancelled: a task it depends on failed or was cancelled"
"""The ``last_error`` of a task its dependency's failure cancelled."""

_TERMINAL = (TaskStatus.SUCCEEDED.value, TaskStatus.FAILED.value, TaskStatus.CANCELLED.value)
#: How many finished tasks one sweep settles.
SWEEP_LIMIT = 500


class TaskDependencySql:
    """The dependency statements of one task table (edges, settling, the sweep).

    Args:
        sql: The store's transaction and clock helpers.
        tasks: The task table.
        deps: Its dependency table.
    """

    def __init__(self, sql: TaskSql, tasks: sa.Table, deps: sa.Table) -> None:
        self._sql = sql
        self._t = tasks
        self._d = deps
        self._blocked = sa.literal(NEVER_EXPIRES, UtcDateTime())

    @property
    def blocked_run_at(self) -> Any:
        """The ``run_at`` a waiting dependent is written with (never due)."""
        return NEVER_EXPIRES

    async def write_edges(
        self,
        conn: AsyncConnection,
        ids: Sequence[int],
        edges: Sequence[TaskDependency],
    ) -> None:
        """Store ``edges`` (indexes into ``ids``) and flag every task something waits for."""
        if not edges:
            return
        t = self._t
        awaited = sorted({ids[edge.on] for edge in edges})
        await conn.execute(sa.update(t).where(t.c.id.in_(awaited)).values(dependents_waiting=True))
        rows = [
            {
                "task_id": ids[edge.task],
                "depends_on": ids[edge.on],
                "run_anyway": edge.run_anyway,
            }
            for edge in edges
        ]
        await conn.execute(sa.insert(self._d), rows)
        counts: dict[int, int] = {}
        for edge in edges:
            counts[ids[edge.task]] = counts.get(ids[edge.task], 0) + 1
        by_count: dict[int, list[int]] = {}
        for task_id, count in counts.items():
            by_count.setdefault(count, []).append(task_id)
        for count, dependents in by_count.items():
            await conn.execute(
                sa.update(t).where(t.c.id.in_(dependents)).values(dependencies_left=count)
            )

    async def settle(self, conn: AsyncConnection, now: DbNow, task_ids: Sequence[int]) -> list[int]:
        """Tell the dependents of ``task_ids`` that finished, in the caller's transaction.

        Tasks not finished or whose dependents were already told are skipped, so a
        call for any task is safe. Each dependent still waiting is locked, then: a
        failed or cancelled dependency it does not run anyway cancels it (and it settles
        its own dependents in turn); otherwise its count of unfinished dependencies goes
        down, and the write that takes it to zero makes it due now.

        Returns:
            The dependents this call made due.
        """
        queue = sorted(set(task_ids))
        made_due: list[int] = []
        told: list[int] = []
        cancelled: list[int] = []
        while queue:
            ended = await self._take_flags(conn, queue)
            if not ended:
                break
            told += ended
            due, queue = await self._tell(conn, now, ended)
            made_due += due
            cancelled += queue
        _tracing.dependents_settled(ended=told, released=made_due, cancelled=cancelled)
        return made_due

    async def _take_flags(self, conn: AsyncConnection, queue: list[int]) -> dict[int, TaskStatus]:
        """Clear the flag of the finished tasks of ``queue`` that carry it; their statuses."""
        t = self._t
        flagged = sa.and_(
            t.c.id.in_(queue), t.c.dependents_waiting == sa.true(), t.c.status.in_(_TERMINAL)
        )
        clear = sa.update(t).values(dependents_waiting=False)
        return await self._sql.backend_sql.take_flags(conn, t, flagged, clear)

    async def _tell(
        self, conn: AsyncConnection, now: DbNow, ended: dict[int, TaskStatus]
    ) -> tuple[list[int], list[int]]:
        """Count the endings in ``ended`` off their waiting dependents; (made due, cancelled)."""
        t, d = self._t, self._d
        # The lock first: a concurrent ending of another dependency waits here, then
        # reads the count this transaction leaves, committed.
        waiting = (
            sa.select(t.c.id, t.c.dependencies_left, d.c.depends_on, d.c.run_anyway)
            .select_from(d.join(t, t.c.id == d.c.task_id))
            .where(d.c.depends_on.in_(list(ended)))
            .where(t.c.status == TaskStatus.PENDING.value, t.c.run_at == self._blocked)
            .order_by(t.c.id)
        )
        waiting = self._locked(waiting)
        left: dict[int, int] = {}
        cancel: set[int] = set()
        for task_id, count, depends_on, run_anyway in (await conn.execute(waiting)).all():
            task_id = int(task_id)
            left[task_id] = left.get(task_id, int(count)) - 1
            if ended[int(depends_on)] is not TaskStatus.SUCCEEDED and not run_anyway:
                cancel.add(task_id)
        due = sorted(
            task_id for task_id, count in left.items() if count <= 0 and task_id not in cancel
        )
        if cancel:
            ending = (
                sa.update(t)
                .where(t.c.id.in_(sorted(cancel)))
                .values(
                    status=TaskStatus.CANCELLED.value,
                    failure_reason=TaskFailureReason.CANCELLED.value,
                    last_error=DEPENDENCY_CANCELLED_ERROR,
                    finished_at=now.expr,
                    updated_at=now.expr,
                )
            )
            await execute_ending(conn, self._sql, ending)
        if due:
            values: dict[str, Any] = {
                "dependencies_left": 0,
                "run_at": now.expr,
                "updated_at": now.expr,
            }
            values.update(self._sql.backend_sql.waiting(False))
            await conn.execute(sa.update(t).where(t.c.id.in_(due)).values(**values))
        by_count: dict[int, list[int]] = {}
        for task_id, count in left.items():
            if count > 0 and task_id not in cancel:
                by_count.setdefault(count, []).append(task_id)
        for count, ids in by_count.items():
            await conn.execute(sa.update(t).where(t.c.id.in_(ids)).values(dependencies_left=count))
        return due, sorted(cancel)

    async def restore(
        self, conn: AsyncConnection, now: DbNow, task_ids: Sequence[int]
    ) -> list[int]:
        """After an operator retry of ``task_ids`` (pending again in the caller's
        transaction), bring back the dependents their ending cancelled.

        A dependent the dependency rule cancelled waits again (recursively) unless
        another dependency it does not run anyway still stands failed or cancelled.
        Every waiting dependent of a retried or restored task is then recounted: its
        unfinished dependencies are those not finished or whose ending it has not been
        told (``dependents_waiting``), so one that runs anyway and already counted the
        failure waits for the retry's ending instead. Finished dependents never run
        again. Locks each dependent before counting, as :meth:`settle` does.

        Returns:
            The dependents made to wait again, by id.
        """
        retried = sorted(set(task_ids))
        if not retried:
            return []
        t, d = self._t, self._d
        candidates: set[int] = set()
        frontier = retried
        while frontier:
            cancelled = self._locked(
                sa.select(d.c.task_id)
                .select_from(d.join(t, t.c.id == d.c.task_id))
                .where(d.c.depends_on.in_(frontier))
                .where(
                    t.c.status == TaskStatus.CANCELLED.value,
                    t.c.last_error == DEPENDENCY_CANCELLED_ERROR,
                )
                .order_by(d.c.task_id)
            )
            found = {int(row[0]) for row in await conn.execute(cancelled)}
            frontier = sorted(found - candidates - set(retried))
            candidates.update(frontier)
        kept = await self._standing(conn, candidates, set(retried))
        if kept:
            values: dict[str, Any] = {
                "status": TaskStatus.PENDING.value,
                "run_at": self._blocked,
                "failure_reason": None,
                "last_error": None,
                "finished_at": None,
                "updated_at": now.expr,
            }
            values.update(self._sql.backend_sql.waiting(True))
            await conn.execute(sa.update(t).where(t.c.id.in_(kept)).values(**values))
        awaited = sa.select(d.c.depends_on).where(d.c.depends_on.in_([*retried, *kept])).distinct()
        flagged = sorted(int(row[0]) for row in await conn.execute(awaited))
        if flagged:
            await conn.execute(
                sa.update(t).where(t.c.id.in_(flagged)).values(dependents_waiting=True)
            )
            await self._recount(conn, flagged)
        return kept

    def _locked(self, query: Any) -> Any:
        return self._sql.backend_sql.locked(query, self._t)

    async def _standing(
        self, conn: AsyncConnection, candidates: set[int], retried: set[int]
    ) -> list[int]:
        """The candidates no other failed or cancelled dependency (not run anyway) keeps
        cancelled, to a fixed point."""
        if not candidates:
            return []
        t, d = self._t, self._d
        query = (
            sa.select(d.c.task_id, d.c.depends_on, t.c.status)
            .select_from(d.join(t, t.c.id == d.c.depends_on))
            .where(d.c.task_id.in_(sorted(candidates)), d.c.run_anyway == sa.false())
        )
        blockers: dict[int, set[int]] = {}
        for task_id, depends_on, status in (await conn.execute(query)).all():
            if status in (TaskStatus.FAILED.value, TaskStatus.CANCELLED.value):
                blockers.setdefault(int(task_id), set()).add(int(depends_on))
        kept = set(candidates)
        changed = True
        while changed:
            changed = False
            for task_id in sorted(kept):
                if blockers.get(task_id, set()) - kept - retried:
                    kept.discard(task_id)
                    changed = True
        return sorted(kept)

    async def _recount(self, conn: AsyncConnection, awaited: list[int]) -> None:
        """Set each waiting dependent of ``awaited`` to its count of untold dependencies."""
        t, d = self._t, self._d
        waiting = self._locked(
            sa.select(t.c.id)
            .select_from(d.join(t, t.c.id == d.c.task_id))
            .where(d.c.depends_on.in_(awaited))
            .where(t.c.status == TaskStatus.PENDING.value, t.c.run_at == self._blocked)
            .order_by(t.c.id)
        )
        dependents = sorted({int(row[0]) for row in await conn.execute(waiting)})
        if not dependents:
            return
        dep = t.alias("dep")
        untold = (
            sa.select(d.c.task_id, sa.func.count())
            .select_from(d.join(dep, dep.c.id == d.c.depends_on))
            .where(d.c.task_id.in_(dependents))
            .where(sa.or_(dep.c.status.not_in(_TERMINAL), dep.c.dependents_waiting == sa.true()))
            .group_by(d.c.task_id)
        )
        counts = {int(task_id): int(count) for task_id, count in await conn.execute(untold)}
        by_count: dict[int, list[int]] = {}
        for task_id in dependents:
            by_count.setdefault(counts.get(task_id, 0), []).append(task_id)
        for count, ids in sorted(by_count.items()):
            await conn.execute(sa.update(t).where(t.c.id.in_(ids)).values(dependencies_left=count))

    async def sweep(self, *, limit: int = SWEEP_LIMIT) -> int:
        """Settle up to ``limit`` finished tasks whose dependents were not yet told.

        For endings no lease wrote (a rescue that ended a task, an operator's cancel,
        a dependency added after its claim). Returns how many were settled.
        """
        t = self._t
        flagged = (
            sa.select(t.c.id)
            .where(t.c.dependents_waiting == sa.true(), t.c.status.in_(_TERMINAL))
            .order_by(t.c.id)
            .limit(limit)
            .with_for_update(skip_locked=True)  # nothing to lock on SQLite: one writer
        )

        async def body(conn: AsyncConnection) -> int:
            ids = [int(row[0]) for row in await conn.execute(flagged)]
            if ids:
                await self.settle(conn, await self._sql.now(conn), ids)
            return len(ids)

        return await self._sql.run("settle task dependencies", body)

    async def dependencies_of(self, conn: AsyncConnection, task_id: int) -> list[Any]:
        """The rows of the tasks ``task_id`` waits for (core columns), by id."""
        t, d = self._t, self._d
        query = (
            sa.select(t)
            .select_from(d.join(t, t.c.id == d.c.depends_on))
            .where(d.c.task_id == task_id)
            .order_by(t.c.id)
        )
        return list((await conn.execute(query)).all())

    async def edges_touching(
        self, conn: AsyncConnection, ids: Sequence[int]
    ) -> list[TaskWorkflowEdge]:
        """The edges with either end in ``ids`` (by the key's prefix and ``ix_<deps>_task``)."""
        d = self._d
        query = sa.select(d.c.depends_on, d.c.task_id, d.c.run_anyway).where(
            sa.or_(d.c.depends_on.in_(list(ids)), d.c.task_id.in_(list(ids)))
        )
        return [
            TaskWorkflowEdge(depends_on=int(dep), task_id=int(task), run_anyway=bool(anyway))
            for dep, task, anyway in (await conn.execute(query)).all()
        ]

    async def nodes(self, conn: AsyncConnection, ids: Sequence[int]) -> list[TaskWorkflowNode]:
        """The graph nodes of the tasks ``ids`` that still exist, by id."""
        t = self._t
        query = (
            sa.select(t.c.id, t.c.kind, t.c.lane, t.c.status, t.c.run_at)
            .where(t.c.id.in_(list(ids)))
            .order_by(t.c.id)
        )
        return [
            TaskWorkflowNode(
                id=int(task_id),
                kind=str(kind),
                lane=str(lane),
                status=TaskStatus(status),
                waiting=status == TaskStatus.PENDING.value and run_at == NEVER_EXPIRES,
            )
            for task_id, kind, lane, status, run_at in (await conn.execute(query)).all()
        ]
