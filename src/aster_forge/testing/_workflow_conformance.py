"""Conformance checks of a task store's workflows: the methods a Forge's workflows call."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar

from ..tasks import BackgroundTaskStore, NewTask, TaskDependency
from ..tasks._internal import BackgroundTaskRecord, TaskStatus
from ..tasks.errors import TaskEnqueueValueError
from ._task_control_conformance import LONG, lease_of

__all__ = ["WorkflowChecks"]


class WorkflowChecks:
    """The workflow checks :class:`~aster_forge.testing.TaskStoreConformance` runs:
    ``enqueue_workflow`` and ``dependency_records`` as a Forge's workflows use them.

    Mixed into the suite, which provides ``_make_store``, ``_lane`` and ``_get``.
    """

    if TYPE_CHECKING:
        _make_store: Callable[[], BackgroundTaskStore]

        @staticmethod
        def _lane() -> str:
            """A fresh lane name."""

        async def _get(self, store: BackgroundTaskStore, task_id: int) -> BackgroundTaskRecord:
            """The row, which must exist."""

    WORKFLOW_CHECKS: ClassVar[tuple[str, ...]] = (
        "check_workflow_step_waits_for_its_dependency",
        "check_workflow_failure_cancels_dependents_unless_run_anyway",
        "check_refused_workflow_writes_nothing",
    )

    @staticmethod
    def _steps(lane: str, *names: str) -> list[NewTask]:
        return [NewTask("conformance-kind", lane, payload_json=f'"{name}"') for name in names]

    @staticmethod
    async def _claim(store: BackgroundTaskStore, lane: str) -> list[BackgroundTaskRecord]:
        return list(await store.claim_due_for_lane(lane, 10, "conformance", LONG))

    async def check_workflow_step_waits_for_its_dependency(self) -> None:
        """A chain runs one step at a time; each reads the outcome of the one it waited for."""
        store, lane = self._make_store(), self._lane()
        made = await store.enqueue_workflow(
            self._steps(lane, "a", "b", "c"), [TaskDependency(1, 0), TaskDependency(2, 1)]
        )
        assert len(made) == 3 and all(result.created for result in made), made
        a, b, c = (result.task_id for result in made)
        assert len({a, b, c}) == 3, "each step is a new row"
        assert made[0].record.dependents_waiting, "a task others wait for says so"
        assert not made[2].record.dependents_waiting
        assert list(await store.dependency_records(a)) == []
        for step, result_json in ((a, '"A"'), (b, '"B"')):
            claimed = await self._claim(store, lane)
            assert [r.id for r in claimed] == [step], f"only {step} is due, got {claimed}"
            assert await store.mark_task_succeeded(lease_of(claimed[0]), result_json, None)
        claimed = await self._claim(store, lane)
        assert [r.id for r in claimed] == [c], f"the last step is due once b succeeded: {claimed}"
        dependencies = list(await store.dependency_records(c))
        assert [r.id for r in dependencies] == [b], f"c waited for b: {dependencies}"
        assert dependencies[0].status is TaskStatus.SUCCEEDED
        assert dependencies[0].result_json == '"B"', "a step reads its dependency's result"
        assert [r.id for r in await store.dependency_records(b)] == [a]
        assert list(await store.dependency_records(10_000_000)) == []

    async def check_workflow_failure_cancels_dependents_unless_run_anyway(self) -> None:
        """A failed dependency cancels what waits for it, transitively; a
        ``run_anyway`` edge runs its step with the failure to read."""
        store, lane = self._make_store(), self._lane()
        made = await store.enqueue_workflow(
            self._steps(lane, "a", "b", "callback", "after-b"),
            [
                TaskDependency(1, 0),
                TaskDependency(2, 0, run_anyway=True),
                TaskDependency(3, 1),
            ],
        )
        a, b, callback, after_b = (result.task_id for result in made)
        claimed = await self._claim(store, lane)
        assert [r.id for r in claimed] == [a], f"only the first step is due: {claimed}"
        written = await store.mark_task_failed(
            lease_of(claimed[0]), error="boom", steps_json=None, manual_retry=True
        )
        assert written
        for cancelled in (b, after_b):
            row = await self._get(store, cancelled)
            assert row.status is TaskStatus.CANCELLED, (cancelled, row.status)
        claimed = await self._claim(store, lane)
        assert [r.id for r in claimed] == [callback], f"a run_anyway step runs: {claimed}"
        outcomes = list(await store.dependency_records(callback))
        assert [(r.id, r.status) for r in outcomes] == [(a, TaskStatus.FAILED)], outcomes

    async def check_refused_workflow_writes_nothing(self) -> None:
        """A cycle, a bad index or a dedupe key refuses the whole workflow."""
        store, lane = self._make_store(), self._lane()
        steps = self._steps(lane, "a", "b")
        keyed = [NewTask("conformance-kind", lane, dedupe_key=f"{lane}-key")]
        refused = (
            (steps, [TaskDependency(1, 0), TaskDependency(0, 1)]),
            (steps, [TaskDependency(2, 0)]),
            (steps, [TaskDependency(0, 0)]),
            ([*steps, *keyed], [TaskDependency(2, 0)]),
        )
        for tasks, dependencies in refused:
            try:
                await store.enqueue_workflow(tasks, dependencies)
            except TaskEnqueueValueError:
                pass
            else:
                raise AssertionError(f"workflow {dependencies} was not refused")
        page = await store.list_tasks(lane=lane)
        assert list(page.items) == [], "a refused workflow writes no row"
