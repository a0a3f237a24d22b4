"""Workflows of :class:`InMemoryTaskStore`: DAG enqueue and settling dependents at once."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING

from .. import _tracing
from ..runtime._internal import NEVER_EXPIRES, Clock
from ..tasks import NewTask, TaskDependency
from ..tasks._internal import (
    BackgroundTaskRecord,
    EnqueueResult,
    TaskFailureReason,
    TaskStatus,
    TaskWorkflowEdge,
    TaskWorkflowGraph,
    TaskWorkflowNode,
    check_workflow_limit,
    walk_workflow,
)

__all__ = ["InMemoryTaskWorkflowMixin"]

# The same text the database store writes (aster_forge.db._task_deps).
_DEPENDENCY_CANCELLED_ERROR = "Cancelled: a task it depends on failed or was cancelled"


class InMemoryTaskWorkflowMixin:
    """The workflow half of :class:`~aster_forge.testing.InMemoryTaskStore`.

    Every ending settles the ended task's dependents in the same step (nothing awaits in
    between), as the database store does in the ending's transaction.
    """

    _rows: dict[int, BackgroundTaskRecord]
    _clock: Clock
    _dependents: dict[int, list[int]]
    _dependencies: dict[int, list[tuple[int, bool]]]

    if TYPE_CHECKING:

        def _checked(self, tasks: Sequence[NewTask]) -> list[NewTask]:
            """The registry-checked tasks (defined on the store)."""

        def _insert(self, task: NewTask, now: datetime, fresh: set[int]) -> EnqueueResult:
            """Insert one task (defined on the store)."""

    async def enqueue_workflow(
        self, tasks: Sequence[NewTask], dependencies: Sequence[TaskDependency]
    ) -> list[EnqueueResult]:
        """Write every task and edge at once (see
        :meth:`aster_forge.db.BackgroundTaskDbStore.enqueue_workflow`)."""
        edges = TaskDependency.checked(tasks, dependencies)
        waiting = {edge.task for edge in edges}
        checked = self._checked(tasks)
        now = self._clock.now()
        fresh: set[int] = set()
        results = [
            self._insert(
                replace(task, run_at=NEVER_EXPIRES) if index in waiting else task, now, fresh
            )
            for index, task in enumerate(checked)
        ]
        ids = [result.task_id for result in results]
        for edge in edges:
            self._dependents.setdefault(ids[edge.on], []).append(ids[edge.task])
            self._dependencies.setdefault(ids[edge.task], []).append(
                (ids[edge.on], edge.run_anyway)
            )
        awaited = {edge.on for edge in edges}
        out: list[EnqueueResult] = []
        for index, result in enumerate(results):
            if index in awaited:
                row = self._rows[result.task_id] = replace(
                    self._rows[result.task_id], dependents_waiting=True
                )
                result = EnqueueResult(row, created=True)
            out.append(result)
        return out

    async def dependency_records(self, task_id: int) -> list[BackgroundTaskRecord]:
        """The tasks ``task_id`` waits (or waited) for, by id."""
        ids = sorted(dep for dep, _ in self._dependencies.get(task_id, ()))
        return [self._rows[dep] for dep in ids if dep in self._rows]

    async def workflow_graph(self, task_id: int, *, limit: int = 500) -> TaskWorkflowGraph | None:
        """The tasks connected to ``task_id`` (see
        :meth:`aster_forge.tasks.protocols.TaskWorkflowStore.workflow_graph`)."""
        check_workflow_limit(limit)
        if task_id not in self._rows:
            return None

        async def edges_of(ids: list[int]) -> list[TaskWorkflowEdge]:
            found = [
                TaskWorkflowEdge(depends_on=dep, task_id=task, run_anyway=anyway)
                for task in ids
                for dep, anyway in self._dependencies.get(task, ())
            ]
            for dep in ids:
                for task in self._dependents.get(dep, ()):
                    anyway = dict(self._dependencies.get(task, ())).get(dep, False)
                    found.append(TaskWorkflowEdge(depends_on=dep, task_id=task, run_anyway=anyway))
            return found

        ids, edges, truncated = await walk_workflow(task_id, edges_of, limit=limit)
        rows = [self._rows[node] for node in ids if node in self._rows]
        present = {row.id for row in rows}
        return TaskWorkflowGraph(
            task_id=task_id,
            nodes=tuple(
                TaskWorkflowNode(
                    id=row.id,
                    kind=row.kind,
                    lane=row.lane,
                    status=row.status,
                    waiting=row.status is TaskStatus.PENDING and row.run_at == NEVER_EXPIRES,
                )
                for row in rows
            ),
            edges=tuple(e for e in edges if e.depends_on in present and e.task_id in present),
            truncated=truncated,
        )

    async def settle_dependencies(self) -> int:
        """Nothing to settle: every ending here settles its dependents at once."""
        return 0

    def _restore(self, task_ids: Sequence[int]) -> list[int]:
        """After an operator retry of ``task_ids``, bring back the dependents their
        endings cancelled (see :meth:`aster_forge.db.BackgroundTaskDbStore.retry_task`)."""
        retried = set(task_ids)
        candidates: set[int] = set()
        frontier = sorted(retried)
        while frontier:
            found = {
                dependent
                for task_id in frontier
                for dependent in self._dependents.get(task_id, ())
                if self._cancelled_by_dependency(dependent)
            }
            frontier = sorted(found - candidates - retried)
            candidates.update(frontier)
        blockers = {
            task_id: {
                dep
                for dep, anyway in self._dependencies.get(task_id, ())
                if not anyway
                and dep in self._rows
                and self._rows[dep].status in (TaskStatus.FAILED, TaskStatus.CANCELLED)
            }
            for task_id in candidates
        }
        kept = set(candidates)
        changed = True
        while changed:
            changed = False
            for task_id in sorted(kept):
                if blockers[task_id] - kept - retried:
                    kept.discard(task_id)
                    changed = True
        now = self._clock.now()
        for task_id in kept:
            self._rows[task_id] = replace(
                self._rows[task_id],
                status=TaskStatus.PENDING,
                run_at=NEVER_EXPIRES,
                failure_reason=None,
                last_error=None,
                finished_at=None,
                updated_at=now,
            )
        for task_id in retried | kept:
            if self._dependents.get(task_id) and task_id in self._rows:
                self._rows[task_id] = replace(self._rows[task_id], dependents_waiting=True)
        return sorted(kept)

    def _cancelled_by_dependency(self, task_id: int) -> bool:
        row = self._rows.get(task_id)
        return (
            row is not None
            and row.status is TaskStatus.CANCELLED
            and row.last_error == _DEPENDENCY_CANCELLED_ERROR
        )

    def _settle(self, task_ids: Sequence[int]) -> None:
        queue = list(task_ids)
        told: list[int] = []
        released: list[int] = []
        all_cancelled: list[int] = []
        while queue:
            cancelled: list[int] = []
            for task_id in sorted(set(queue)):
                row = self._rows.get(task_id)
                if row is None or not row.dependents_waiting or not row.status.is_terminal:
                    continue
                self._rows[task_id] = replace(row, dependents_waiting=False)
                told.append(task_id)
                for dependent in sorted(set(self._dependents.get(task_id, ()))):
                    decision = self._decide(dependent)
                    if decision is TaskStatus.CANCELLED:
                        cancelled.append(dependent)
                    elif decision is TaskStatus.PENDING:
                        released.append(dependent)
            all_cancelled += cancelled
            queue = cancelled
        _tracing.dependents_settled(ended=told, released=released, cancelled=all_cancelled)

    def _decide(self, task_id: int) -> TaskStatus | None:
        row = self._rows.get(task_id)
        if row is None or row.status is not TaskStatus.PENDING or row.run_at != NEVER_EXPIRES:
            return None
        decision = TaskDependency.decide(
            (self._rows[dep].status, anyway)
            for dep, anyway in self._dependencies.get(task_id, ())
            if dep in self._rows
        )
        now = self._clock.now()
        if decision is TaskStatus.PENDING:
            self._rows[task_id] = replace(row, run_at=now, updated_at=now)
        elif decision is TaskStatus.CANCELLED:
            self._rows[task_id] = replace(
                row,
                status=TaskStatus.CANCELLED,
                failure_reason=TaskFailureReason.CANCELLED,
                last_error=_DEPENDENCY_CANCELLED_ERROR,
                finished_at=now,
                updated_at=now,
            )
        return decision
