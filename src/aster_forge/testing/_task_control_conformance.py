"""Conformance checks of a task store's operator control: cancel, snooze, lanes, retention."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar

from ..tasks import BackgroundTaskStore, NewTask, TaskInvalidValueError, TaskLease, TaskStepSpec
from ..tasks._internal import (
    BackgroundTaskRecord,
    TaskCancelOutcome,
    TaskFailureReason,
    TaskStatus,
    TaskStepStatus,
    initial_task_steps_from_specs,
    parse_task_steps_json,
    serialize_task_steps_json,
)

__all__ = ["LONG", "TaskControlChecks", "lease_of"]

LONG = timedelta(minutes=10)
"""A lease TTL no check outlives."""


def lease_of(record: BackgroundTaskRecord) -> TaskLease:
    """The lease a claimed ``record`` carries (asserting the claim set token and expiry)."""
    assert record.processing_token and record.lease_expires_at, "a claim must set token and expiry"
    return TaskLease(record.id, record.processing_token, record.lease_expires_at)


class TaskControlChecks:
    """The control checks :class:`~aster_forge.testing.TaskStoreConformance` runs.

    Mixed into the suite, which provides ``_make_store``, ``_lane``, ``_one``, ``_get``
    and ``_expire``.
    """

    if TYPE_CHECKING:
        _make_store: Callable[[], BackgroundTaskStore]
        short_ttl: timedelta

        @staticmethod
        def _lane() -> str:
            """A fresh lane name."""

        async def _one(
            self, store: BackgroundTaskStore, lane: str, ttl: timedelta = LONG, **kw: Any
        ) -> BackgroundTaskRecord:
            """Enqueue and claim one task."""

        async def _get(self, store: BackgroundTaskStore, task_id: int) -> BackgroundTaskRecord:
            """The row, which must exist."""

        async def _expire(self) -> None:
            """Advance past the short TTL."""

    CONTROL_CHECKS: ClassVar[tuple[str, ...]] = (
        "check_renewal_reports_cancel_request",
        "check_cancel_and_finish_write_one_outcome",
        "check_a_task_cancelled_while_pending_shows_no_active_step",
        "check_snooze_keeps_attempt_and_counts",
        "check_paused_lane_is_skipped_by_every_instance",
        "check_retention_deletes_only_old_finished_tasks",
    )

    async def check_renewal_reports_cancel_request(self) -> None:
        """A renewal returns the row's cancel flag; the fenced cancel ends it ``cancelled``."""
        store, lane = self._make_store(), self._lane()
        record = await self._one(store, lane, max_attempts=3)
        lease = lease_of(record)
        renewed = await store.renew_task_lease(lease, LONG)
        assert renewed is not None and renewed.cancel_requested is False
        assert await store.cancel_task(record.id) is TaskCancelOutcome.CANCEL_REQUESTED
        renewed = await store.renew_task_lease(lease, LONG)
        assert renewed is not None, "a cancel request must not break the owner's fence"
        assert renewed.cancel_requested is True, "the renewal must report the cancel request"
        [batched] = await store.renew_task_leases_many([lease], LONG)
        assert batched is not None and batched.cancel_requested is True, "batched renewal"
        forged = TaskLease(lease.task_id, "forged-" + uuid.uuid4().hex, lease.expires_at)
        assert await store.mark_task_cancelled(forged, steps_json=None) is False
        assert await store.mark_task_cancelled(lease, steps_json="[]") is True
        done = await self._get(store, record.id)
        assert done.status is TaskStatus.CANCELLED, done.status
        assert done.failure_reason is TaskFailureReason.CANCELLED
        assert done.attempt == 0, "a cancel is not a counted attempt"
        assert done.processing_token is None and done.lease_expires_at is None
        assert done.finished_at is not None and done.steps_json == "[]"
        assert await store.mark_task_cancelled(lease, steps_json=None) is False, "twice"
        assert await store.renew_task_lease(lease, LONG) is None

    async def check_a_task_cancelled_while_pending_shows_no_active_step(self) -> None:
        """Its "Waiting for worker" step ends ``cancelled``, not left ``active``."""
        store, lane = self._make_store(), self._lane()
        steps = initial_task_steps_from_specs(
            (TaskStepSpec("load", "Load"), TaskStepSpec("render", "Render"))
        )
        made = await store.enqueue(
            NewTask("conformance-kind", lane, steps_json=serialize_task_steps_json(steps))
        )
        assert await store.cancel_task(made.record.id) is TaskCancelOutcome.CANCELLED
        row = await self._get(store, made.record.id)
        stored = parse_task_steps_json(row.steps_json or "[]")
        assert [s.status for s in stored] == [TaskStepStatus.CANCELLED, TaskStepStatus.PENDING]

    async def check_cancel_and_finish_write_one_outcome(self) -> None:
        """Whichever fenced write lands first is the outcome; the other writes nothing."""
        store, lane = self._make_store(), self._lane()
        finished = await self._one(store, lane)
        await store.cancel_task(finished.id)
        assert await store.mark_task_succeeded(lease_of(finished), '"done"', None) is True
        assert await store.mark_task_cancelled(lease_of(finished), steps_json=None) is False
        row = await self._get(store, finished.id)
        assert row.status is TaskStatus.SUCCEEDED and row.result_json == '"done"'
        cancelled = await self._one(store, lane)
        await store.cancel_task(cancelled.id)
        assert await store.mark_task_cancelled(lease_of(cancelled), steps_json=None) is True
        assert await store.mark_task_succeeded(lease_of(cancelled), '"late"', None) is False
        assert (
            await store.mark_task_failed(
                lease_of(cancelled), error="late", steps_json=None, manual_retry=True
            )
            is False
        )
        row = await self._get(store, cancelled.id)
        assert row.status is TaskStatus.CANCELLED and row.result_json is None

    async def check_snooze_keeps_attempt_and_counts(self) -> None:
        """A snooze is pending after its delay, counts a snooze, never an attempt."""
        store, lane = self._make_store(), self._lane()
        record = await self._one(store, lane, max_attempts=1)
        lease = lease_of(record)
        assert record.snooze_count == 0
        assert await store.mark_task_snoozed(lease, delay=timedelta(hours=1), steps_json=None)
        snoozed = await self._get(store, record.id)
        assert snoozed.status is TaskStatus.PENDING and snoozed.snooze_count == 1
        assert snoozed.attempt == 0, "a snooze must not consume an attempt"
        assert snoozed.processing_token is None and snoozed.finished_at is None
        assert snoozed.run_at > record.run_at + timedelta(minutes=59)
        assert await store.claim_due_for_lane(lane, 5, "worker-a", LONG) == [], "delay"
        assert await store.mark_task_snoozed(lease, delay=timedelta(0), steps_json=None) is False
        other = await self._one(store, lane)
        assert await store.mark_task_snoozed(lease_of(other), delay=timedelta(0), steps_json="[]")
        again = await store.claim_due_for_lane(lane, 5, "worker-b", LONG)
        assert [r.id for r in again] == [other.id], "a zero snooze is due at once"
        assert again[0].snooze_count == 1 and again[0].steps_json == "[]"
        await store.cancel_task(other.id)
        assert await store.mark_task_snoozed(
            lease_of(again[0]), delay=timedelta(0), steps_json=None
        )
        ended = await self._get(store, other.id)
        assert ended.status is TaskStatus.CANCELLED, "a snooze after a cancel request ends it"
        try:
            await store.mark_task_snoozed(lease, delay=timedelta(seconds=-1), steps_json=None)
        except TaskInvalidValueError:
            pass
        else:
            raise AssertionError("a negative snooze delay must be refused")

    async def check_paused_lane_is_skipped_by_every_instance(self) -> None:
        """Claims on any instance skip a paused lane; running tasks finish; resume claims."""
        first, second = self._make_store(), self._make_store()
        lane, other = self._lane(), self._lane()
        running = await self._one(first, lane)
        await first.enqueue_many([NewTask("k", lane), NewTask("k", other)])
        state = await first.pause_lane(lane)
        assert state.lane == lane and state.paused and state.paused_at is not None
        assert (await first.pause_lane(lane)).paused_at == state.paused_at, "idempotent"
        assert await second.claim_due_for_lane(lane, 5, "worker-b", LONG) == [], "paused"
        assert len(await second.claim_due_for_lane(other, 5, "worker-b", LONG)) == 1
        assert await first.renew_task_lease(lease_of(running), LONG) is not None
        assert await first.mark_task_succeeded(lease_of(running), None, None), "in-flight finishes"
        states = {s.lane: s for s in await second.lane_states([lane, other])}
        assert states[lane].paused is True and states[other].paused is False
        assert lane in {s.lane for s in await second.lane_states()}
        resumed = await second.resume_lane(lane)
        assert resumed.paused is False and resumed.paused_at is None
        claimed = await first.claim_due_for_lane(lane, 5, "worker-a", LONG)
        assert len(claimed) == 1, "a resumed lane is claimed again"
        try:
            await first.pause_lane("")
        except TaskInvalidValueError:
            pass
        else:
            raise AssertionError("pause_lane('') must be refused")

    async def check_retention_deletes_only_old_finished_tasks(self) -> None:
        """Only finished rows of the status, older than the age, go, in bounded batches."""
        store, lane = self._make_store(), self._lane()
        old = [await self._one(store, lane) for _ in range(3)]
        for record in old:
            assert await store.mark_task_succeeded(lease_of(record), None, None)
        failed = await self._one(store, lane)
        await store.mark_task_failed(
            lease_of(failed), error="x", steps_json=None, manual_retry=True
        )
        await self._expire()
        young = await self._one(store, lane)
        running = await self._one(store, lane)
        pending = (await store.enqueue(NewTask("k", lane))).record
        assert await store.delete_finished_tasks(TaskStatus.SUCCEEDED, LONG * 1000, limit=10) == 0
        # Finished just before the prune: on a loaded machine the calls above may take
        # longer than the age, and a young row must stay young however slow they were.
        assert await store.mark_task_succeeded(lease_of(young), None, None)
        age = self.short_ttl
        deleted = [await store.delete_finished_tasks(TaskStatus.SUCCEEDED, age, limit=2)]
        assert 1 <= deleted[0] <= 2, deleted
        while deleted[-1] == 2:
            deleted.append(await store.delete_finished_tasks(TaskStatus.SUCCEEDED, age, limit=2))
        assert sum(deleted) >= len(old)
        for record in old:
            assert await store.get_task(record.id) is None, "an old succeeded task must go"
        for keep in (young, failed, running, pending):
            assert await store.get_task(keep.id) is not None, f"#{keep.id} must be kept"
        assert await store.delete_finished_tasks(TaskStatus.FAILED, timedelta(0), limit=100) >= 1
        assert await store.get_task(failed.id) is None
        for status, limit in ((TaskStatus.PENDING, 1), (TaskStatus.RUNNING, 1), ("done", 1)):
            try:
                await store.delete_finished_tasks(status, timedelta(0), limit=limit)  # type: ignore[arg-type]
            except TaskInvalidValueError:
                continue
            raise AssertionError(f"pruning {status!r} must be refused")
        try:
            await store.delete_finished_tasks(TaskStatus.SUCCEEDED, timedelta(0), limit=0)
        except TaskInvalidValueError:
            pass
        else:
            raise AssertionError("a prune limit of 0 must be refused")
