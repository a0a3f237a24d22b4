"""A framework-agnostic conformance suite for :class:`~aster_forge.tasks.BackgroundTaskStore`."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import ClassVar

from ..tasks import BackgroundTaskStore, NewTask, TaskInvalidValueError, TaskLease, TaskStepSpec
from ..tasks._internal import (
    LEASE_EXPIRED_ERROR,
    BackgroundTaskRecord,
    TaskCancelOutcome,
    TaskCompletion,
    TaskFailureReason,
    TaskStatus,
    TaskStepStatus,
    initial_task_steps_from_specs,
    mark_active_step_failed,
    parse_task_steps_json,
    serialize_task_steps_json,
    set_task_step_active,
    set_task_step_succeeded,
)
from ..tasks.errors import TaskEnqueueValueError, TaskStateError
from ._cluster_limit_conformance import ClusterLimitChecks
from ._conformance import StoreConformance
from ._partition_conformance import PartitionChecks
from ._partition_rate_conformance import PartitionRateChecks
from ._rate_limit_conformance import RateLimitChecks
from ._task_control_conformance import LONG as _LONG
from ._task_control_conformance import TaskControlChecks
from ._task_control_conformance import lease_of as _lease
from ._workflow_conformance import WorkflowChecks

__all__ = ["TaskStoreConformance"]


class TaskStoreConformance(
    TaskControlChecks,
    ClusterLimitChecks,
    PartitionChecks,
    RateLimitChecks,
    PartitionRateChecks,
    WorkflowChecks,
    StoreConformance[BackgroundTaskStore],
):
    """Checks every :class:`~aster_forge.tasks.BackgroundTaskStore` must pass (seed 测试要求).

    Each ``check_*`` coroutine raises ``AssertionError`` on a violation. Every check
    uses fresh lane names, so one store (one table) serves them all.

    Args:
        make_store: Returns a store; called several times where a check simulates
            several workers (instances must share state, e.g. one database).
        advance: Moves the stores' time: ``ManualClock.advance`` for stores on an
            injected clock, ``asyncio.sleep`` for stores on a server clock.
        short_ttl: The lease TTL of expiry checks (small on a server clock).
        expiry_slack: Extra time advanced past ``short_ttl`` before expecting expiry.
        contenders: How many concurrent enqueuers/claimers the race checks use.

    Example:
        >>> from aster_forge.testing import InMemoryTaskStore, ManualClock
        >>> clock = ManualClock()
        >>> store = InMemoryTaskStore(clock)
        >>> suite = TaskStoreConformance(lambda: store, advance=clock.advance)
        >>> "check_claim_fence" in suite.CHECKS
        True
    """

    CHECKS: ClassVar[tuple[str, ...]] = (
        "check_claim_fence",
        "check_lost_lease_never_writes_success",
        "check_a_retry_after_a_rescue_is_not_a_rescue",
        "check_shutdown_release_returns_to_pending_without_attempt",
        "check_retryable_failure_backs_off_and_counts",
        "check_permanent_and_manual_failure_classification",
        "check_failure_traceback_is_stored_beside_the_error",
        "check_steps_json_persisted_and_failed_step_marked",
        "check_dedupe_returns_existing_row",
        "check_concurrent_dedupe_has_one_row",
        "check_rescue_counts_attempt_and_fails_at_max",
        "check_claimed_record_is_the_stored_row",
        "check_lane_filtering",
        "check_priority_and_run_at_order",
        "check_limit_respected",
        "check_concurrent_claims_never_share_a_task",
        "check_cancel_semantics",
        "check_batched_success_is_fenced_per_entry",
        "check_admin_reads",
        "check_invalid_input_is_rejected",
        *TaskControlChecks.CONTROL_CHECKS,
        *ClusterLimitChecks.CLUSTER_LIMIT_CHECKS,
        *PartitionChecks.PARTITION_CHECKS,
        *RateLimitChecks.RATE_LIMIT_CHECKS,
        *PartitionRateChecks.PARTITION_RATE_CHECKS,
        *WorkflowChecks.WORKFLOW_CHECKS,
    )

    def __init__(
        self,
        make_store: Callable[[], BackgroundTaskStore],
        *,
        advance: Callable[[timedelta], Awaitable[None]],
        short_ttl: timedelta = timedelta(milliseconds=400),
        expiry_slack: timedelta = timedelta(milliseconds=200),
        contenders: int = 20,
    ) -> None:
        super().__init__(
            make_store,
            advance=advance,
            short_ttl=short_ttl,
            expiry_slack=expiry_slack,
            contenders=contenders,
        )

    @staticmethod
    def _lane() -> str:
        return f"lane-{uuid.uuid4().hex[:16]}"

    async def _one(
        self, store: BackgroundTaskStore, lane: str, ttl: timedelta = _LONG, **kw: object
    ) -> BackgroundTaskRecord:
        await store.enqueue(NewTask("conformance-kind", lane, **kw))  # type: ignore[arg-type]
        claimed = await store.claim_due_for_lane(lane, 1, "worker-a", ttl)
        assert len(claimed) == 1, f"expected one claim, got {len(claimed)}"
        return claimed[0]

    async def _get(self, store: BackgroundTaskStore, task_id: int) -> BackgroundTaskRecord:
        record = await store.get_task(task_id)
        assert record is not None, f"task #{task_id} vanished"
        return record

    @staticmethod
    async def _all_fenced_writes_refused(store: BackgroundTaskStore, lease: TaskLease) -> None:
        assert await store.renew_task_lease(lease, _LONG) is None, "stale renew must fail"
        assert await store.update_task_steps(lease, "[]") is False, "stale steps write"
        assert await store.mark_task_succeeded(lease, '"late"', None) is False, "stale success"
        assert (
            await store.mark_task_retry(
                lease, delay=timedelta(0), error="late", steps_json=None, count_attempt=True
            )
            is False
        ), "stale retry"
        assert (
            await store.mark_task_failed(lease, error="late", steps_json=None, manual_retry=True)
            is False
        ), "stale failure"
        assert await store.release_task_for_shutdown(lease) is False, "stale release"

    async def check_claim_fence(self) -> None:
        """A claim sets a fresh token and expiry; a wrong token writes nothing."""
        store, lane = self._make_store(), self._lane()
        await store.enqueue_many([NewTask("k", lane), NewTask("k", lane)])
        claimed = await store.claim_due_for_lane(lane, 10, "worker-a", _LONG)
        assert len(claimed) == 2
        tokens = {record.processing_token for record in claimed}
        assert None not in tokens and len(tokens) == 2, "each claimed row needs its own token"
        for record in claimed:
            assert record.status is TaskStatus.RUNNING and record.claimed_by == "worker-a"
            assert record.lease_expires_at is not None and record.lease_expires_at.tzinfo
            assert record.rescued is False and record.attempt == 0
        assert await store.claim_due_for_lane(lane, 10, "worker-b", _LONG) == [], (
            "a live lease must not be claimed again"
        )
        first = _lease(claimed[0])
        forged = TaskLease(first.task_id, "forged-" + uuid.uuid4().hex, first.expires_at)
        await self._all_fenced_writes_refused(store, forged)
        after = await self._get(store, first.task_id)
        assert after.status is TaskStatus.RUNNING
        assert after.processing_token == first.processing_token
        assert await store.mark_task_succeeded(first, '{"ok": true}', None) is True
        done = await self._get(store, first.task_id)
        assert done.status is TaskStatus.SUCCEEDED and done.result_json == '{"ok": true}'
        assert done.processing_token is None and done.lease_expires_at is None
        assert done.finished_at is not None
        await self._all_fenced_writes_refused(store, first)

    async def check_lost_lease_never_writes_success(self) -> None:
        """After expiry and a rescue claim, the old owner's writes all fail."""
        first, second, lane = self._make_store(), self._make_store(), self._lane()
        record = await self._one(first, lane, ttl=self.short_ttl)
        old = _lease(record)
        await self._expire()
        rescued = await second.claim_due_for_lane(lane, 5, "worker-b", _LONG)
        assert [r.id for r in rescued] == [record.id], "an expired lease must be claimable"
        new = rescued[0]
        assert new.rescued is True, "the claim must report the rescue"
        assert new.attempt == 1, "a rescue counts the lost execution"
        assert new.failure_reason is TaskFailureReason.LEASE_EXPIRED
        assert new.processing_token != old.processing_token
        await self._all_fenced_writes_refused(first, old)
        assert await second.mark_task_succeeded(_lease(new), None, None) is True
        done = await self._get(first, record.id)
        assert done.status is TaskStatus.SUCCEEDED
        assert done.rescued is True, "a task that ends keeps that its last run was a rescue"

    async def check_a_retry_after_a_rescue_is_not_a_rescue(self) -> None:
        """A rescued run that fails retryably leaves a next claim that is no rescue."""
        first, second, lane = self._make_store(), self._make_store(), self._lane()
        record = await self._one(first, lane, ttl=self.short_ttl, max_attempts=5)
        await self._expire()
        [rescued] = await second.claim_due_for_lane(lane, 5, "worker-b", _LONG)
        assert rescued.rescued is True
        assert await second.mark_task_retry(
            _lease(rescued), delay=timedelta(0), error="e", steps_json=None, count_attempt=True
        )
        assert (await self._get(second, record.id)).rescued is False
        [again] = await second.claim_due_for_lane(lane, 5, "worker-b", _LONG)
        assert again.id == record.id and again.rescued is False, "not a rescue: counted once"

    async def check_shutdown_release_returns_to_pending_without_attempt(self) -> None:
        """A shutdown release puts the task back, due now, attempt and error unchanged."""
        store, lane = self._make_store(), self._lane()
        record = await self._one(store, lane)
        lease = _lease(record)
        assert await store.mark_task_retry(
            lease, delay=timedelta(0), error="first error", steps_json=None, count_attempt=True
        )
        again = (await store.claim_due_for_lane(lane, 1, "worker-a", _LONG))[0]
        assert again.attempt == 1
        assert await store.release_task_for_shutdown(_lease(again)) is True
        released = await self._get(store, record.id)
        assert released.status is TaskStatus.PENDING and released.processing_token is None
        assert released.attempt == 1, "a shutdown release must not count an attempt"
        assert released.last_error == "first error"
        assert await store.release_task_for_shutdown(_lease(again)) is False
        reclaimed = await store.claim_due_for_lane(lane, 1, "worker-b", _LONG)
        assert [r.id for r in reclaimed] == [record.id], "a released task is due at once"

    async def check_retryable_failure_backs_off_and_counts(self) -> None:
        """A retry is pending after the delay, counts an attempt only when asked."""
        store, lane = self._make_store(), self._lane()
        record = await self._one(store, lane, max_attempts=3)
        assert await store.mark_task_retry(
            _lease(record),
            delay=timedelta(hours=1),
            error="boom",
            steps_json=None,
            count_attempt=True,
        )
        pending = await self._get(store, record.id)
        assert pending.status is TaskStatus.PENDING and pending.attempt == 1
        assert pending.last_error == "boom"
        assert pending.failure_reason is TaskFailureReason.PRODUCT_ERROR
        assert pending.run_at > record.run_at + timedelta(minutes=59)
        assert await store.claim_due_for_lane(lane, 5, "worker-a", _LONG) == [], (
            "a retry must wait for its delay"
        )
        other = await self._one(store, self._lane())
        assert await store.mark_task_retry(
            _lease(other), delay=timedelta(0), error="io", steps_json=None, count_attempt=False
        )
        assert (await self._get(store, other.id)).attempt == 0

    async def check_permanent_and_manual_failure_classification(self) -> None:
        """A final failure counts, stores whether manual retry is allowed; retry_task obeys it."""
        store, lane = self._make_store(), self._lane()
        permanent = await self._one(store, lane)
        assert await store.mark_task_failed(
            _lease(permanent), error="bad input", steps_json=None, manual_retry=False
        )
        failed = await self._get(store, permanent.id)
        assert failed.status is TaskStatus.FAILED and failed.attempt == 1
        assert failed.manual_retry_allowed is False and failed.last_error == "bad input"
        assert failed.failure_reason is TaskFailureReason.PRODUCT_ERROR
        try:
            await store.retry_task(permanent.id)
        except TaskStateError:
            pass
        else:
            raise AssertionError("retry_task must refuse a failure stored without manual retry")
        forced = await store.retry_task(permanent.id, force=True)
        assert forced.status is TaskStatus.PENDING and forced.attempt == 0
        manual = await self._one(store, self._lane())
        assert await store.mark_task_failed(
            _lease(manual), error="quota", steps_json=None, manual_retry=True
        )
        retried = await store.retry_task(manual.id)
        assert retried.status is TaskStatus.PENDING and retried.attempt == 0
        assert retried.failure_reason is None and retried.last_error == "quota"
        try:
            await store.retry_task(manual.id)
        except TaskStateError:
            pass
        else:
            raise AssertionError("retry_task must refuse a pending task")

    async def check_failure_traceback_is_stored_beside_the_error(self) -> None:
        """A retry or failure stores its traceback as given; a rescue clears it.

        A write without one stores none; an operator retry keeps it, as it keeps
        ``last_error``; a claim returns it as stored.
        """
        store, lane = self._make_store(), self._lane()
        frame = '  File "/srv/app/jobs.py", line 12, in fetch — données ✓\n'
        trace = "Traceback (most recent call last):\n" + frame * 150 + "ValueError: 😱\n"
        record = await self._one(store, lane, ttl=self.short_ttl, max_attempts=9)
        assert await store.mark_task_retry(
            _lease(record),
            delay=timedelta(0),
            error="ValueError: 😱",
            steps_json=None,
            count_attempt=True,
            traceback=trace,
        )
        stored = await self._get(store, record.id)
        assert stored.last_traceback == trace, "the traceback must round-trip unchanged"
        assert stored.last_error == "ValueError: 😱"
        again = (await store.claim_due_for_lane(lane, 1, "worker-a", self.short_ttl))[0]
        assert again.last_traceback == trace, "a claim returns the stored traceback"
        await self._expire()
        await store.claim_due_for_lane(lane, 1, "worker-b", _LONG)
        rescued = await self._get(store, record.id)
        assert rescued.last_error == LEASE_EXPIRED_ERROR
        assert rescued.last_traceback is None, "a rescue's error has no traceback"
        other = await self._one(store, self._lane())
        assert await store.mark_task_failed(
            _lease(other), error="boom", steps_json=None, manual_retry=True, traceback=trace
        )
        assert (await self._get(store, other.id)).last_traceback == trace
        retried = await store.retry_task(other.id)
        assert retried.last_traceback == trace, "an operator retry keeps the failure's history"
        third = await self._one(store, self._lane())
        assert await store.mark_task_retry(
            _lease(third), delay=timedelta(0), error="x", steps_json=None, count_attempt=True
        )
        assert (await self._get(store, third.id)).last_traceback is None

    async def check_steps_json_persisted_and_failed_step_marked(self) -> None:
        """Step progress round-trips; a failure stores the active step marked failed."""
        store, lane = self._make_store(), self._lane()
        specs = (TaskStepSpec("fetch", "Fetch"), TaskStepSpec("write", "Write"))
        at = datetime(2030, 1, 1, tzinfo=UTC)
        initial = serialize_task_steps_json(initial_task_steps_from_specs(specs, now=at))
        record = await self._one(store, lane, steps_json=initial)
        assert record.steps_json is not None
        steps = set_task_step_succeeded(parse_task_steps_json(record.steps_json), "fetch", now=at)
        steps = set_task_step_active(steps, "write", now=at)
        assert await store.update_task_steps(_lease(record), serialize_task_steps_json(steps))
        stored = await self._get(store, record.id)
        assert stored.steps_json is not None
        assert parse_task_steps_json(stored.steps_json) == steps
        failed_steps = serialize_task_steps_json(
            mark_active_step_failed(steps, "disk full", now=at)
        )
        assert await store.mark_task_failed(
            _lease(record), error="disk full", steps_json=failed_steps, manual_retry=True
        )
        final = await self._get(store, record.id)
        assert final.steps_json is not None
        by_key = {step.key: step for step in parse_task_steps_json(final.steps_json)}
        assert by_key["fetch"].status is TaskStepStatus.SUCCEEDED
        assert by_key["write"].status is TaskStepStatus.FAILED
        assert by_key["write"].detail == "disk full"

    async def check_dedupe_returns_existing_row(self) -> None:
        """A second enqueue with the same key returns the existing row; no key, no dedupe."""
        store, lane = self._make_store(), self._lane()
        key = f"conformance:{uuid.uuid4().hex}"
        first = await store.enqueue(NewTask("k", lane, payload_json='{"n": 1}', dedupe_key=key))
        second = await store.enqueue(NewTask("k", lane, payload_json='{"n": 2}', dedupe_key=key))
        assert first.created is True and second.created is False
        assert second.record.id == first.record.id and second.record.payload_json == '{"n": 1}'
        batch = await store.enqueue_many(
            [
                NewTask("k", lane, dedupe_key=key),
                NewTask("k", lane, dedupe_key=key + "-b"),
                NewTask("k", lane, dedupe_key=key + "-b"),
                NewTask("k", lane),
                NewTask("k", lane),
            ]
        )
        assert [r.created for r in batch] == [False, True, False, True, True]
        assert batch[0].record.id == first.record.id
        assert batch[1].record.id == batch[2].record.id
        assert batch[3].record.id != batch[4].record.id
        page = await store.list_tasks(lane=lane, limit=100)
        assert len(page.items) == 4

    async def check_concurrent_dedupe_has_one_row(self) -> None:
        """Racing enqueues of one key (separate store instances) yield exactly one row."""
        lane, key = self._lane(), f"race:{uuid.uuid4().hex}"
        stores = [self._make_store() for _ in range(self.contenders)]
        results = await asyncio.gather(
            *(s.enqueue(NewTask("k", lane, dedupe_key=key)) for s in stores)
        )
        assert sum(r.created for r in results) == 1, "exactly one racer creates the row"
        assert len({r.record.id for r in results}) == 1, "every racer gets the same row"

    async def check_rescue_counts_attempt_and_fails_at_max(self) -> None:
        """A task that loses its worker every time ends FAILED with reason lease expiry."""
        store, lane = self._make_store(), self._lane()
        record = await self._one(store, lane, ttl=self.short_ttl, max_attempts=2)
        await self._expire()
        rescued = await store.claim_due_for_lane(lane, 5, "worker-b", self.short_ttl)
        assert len(rescued) == 1 and rescued[0].rescued and rescued[0].attempt == 1
        await self._expire()
        assert await store.claim_due_for_lane(lane, 5, "worker-c", _LONG) == [], (
            "a task out of attempts must not be claimed again"
        )
        final = await self._get(store, record.id)
        assert final.status is TaskStatus.FAILED and final.attempt == 2
        assert final.failure_reason is TaskFailureReason.LEASE_EXPIRED
        assert final.last_error == LEASE_EXPIRED_ERROR and final.processing_token is None
        assert final.finished_at is not None

    async def check_claimed_record_is_the_stored_row(self) -> None:
        """A claim returns each task as the store then holds it, a rescued one too."""
        store, lane = self._make_store(), self._lane()
        first = await self._one(
            store, lane, ttl=self.short_ttl, payload_json='{"n": 1}', priority=3, dedupe_key=lane
        )
        assert first == await self._get(store, first.id), "a claimed record differs from its row"
        await self._expire()
        rescued = await store.claim_due_for_lane(lane, 5, "worker-b", _LONG)
        assert len(rescued) == 1 and rescued[0].rescued
        assert rescued[0].failure_reason is TaskFailureReason.LEASE_EXPIRED
        assert rescued[0] == await self._get(store, first.id), "a rescued record differs"
        flags = (rescued[0].rescued, rescued[0].cancel_requested, rescued[0].manual_retry_allowed)
        assert all(type(flag) is bool for flag in flags), f"flags must be bools: {flags!r}"

    async def check_lane_filtering(self) -> None:
        """A claim only returns tasks of its lane."""
        store, lane_a, lane_b = self._make_store(), self._lane(), self._lane()
        await store.enqueue_many([NewTask("k", lane_a), NewTask("k", lane_b), NewTask("k", lane_a)])
        claimed = await store.claim_due_for_lane(lane_a, 10, "worker-a", _LONG)
        assert len(claimed) == 2 and {r.lane for r in claimed} == {lane_a}
        other = await store.claim_due_for_lane(lane_b, 10, "worker-a", _LONG)
        assert len(other) == 1 and other[0].lane == lane_b

    async def check_priority_and_run_at_order(self) -> None:
        """Claims follow priority (high first), then run_at, then id; future tasks wait."""
        store, lane = self._make_store(), self._lane()
        base = datetime.now(UTC) - timedelta(hours=3)
        made = await store.enqueue_many(
            [
                NewTask("k", lane, run_at=base + timedelta(hours=2)),
                NewTask("k", lane, run_at=base + timedelta(hours=1)),
                NewTask("k", lane, run_at=base + timedelta(hours=2), priority=5),
                NewTask("k", lane, delay=timedelta(hours=1), priority=100),
                NewTask("k", lane, run_at=base + timedelta(hours=1)),
            ]
        )
        ids = [r.task_id for r in made]
        assert ids == [r.record.id for r in made], "task_id is the record's id"
        one = await store.enqueue(NewTask("k", lane, delay=timedelta(days=1)))
        assert one.task_id == one.record.id and one.task_id not in ids
        claimed = await store.claim_due_for_lane(lane, 10, "worker-a", _LONG)
        assert [r.id for r in claimed] == [ids[2], ids[1], ids[4], ids[0]], "claim order"

    async def check_limit_respected(self) -> None:
        """A claim returns at most ``limit`` tasks; ``limit <= 0`` claims nothing."""
        store, lane = self._make_store(), self._lane()
        await store.enqueue_many([NewTask("k", lane) for _ in range(5)])
        assert await store.claim_due_for_lane(lane, 0, "worker-a", _LONG) == []
        assert await store.claim_due_for_lane(lane, -1, "worker-a", _LONG) == []
        assert len(await store.claim_due_for_lane(lane, 2, "worker-a", _LONG)) == 2
        assert len(await store.claim_due_for_lane(lane, 2, "worker-a", _LONG)) == 2
        assert len(await store.claim_due_for_lane(lane, 2, "worker-a", _LONG)) == 1

    async def check_concurrent_claims_never_share_a_task(self) -> None:
        """Racing claimers (separate store instances) never receive the same task."""
        lane, total = self._lane(), 3 * self.contenders
        await self._make_store().enqueue_many([NewTask("k", lane) for _ in range(total)])
        stores = [self._make_store() for _ in range(self.contenders)]

        async def drain(store: BackgroundTaskStore, me: int) -> list[int]:
            got: list[int] = []
            while batch := await store.claim_due_for_lane(lane, 2, f"worker-{me}", _LONG):
                got.extend(r.id for r in batch)
            return got

        results = await asyncio.gather(*(drain(s, i) for i, s in enumerate(stores)))
        every = [task_id for ids in results for task_id in ids]
        assert len(every) == len(set(every)), "a task was claimed twice"
        assert len(every) == total, f"claimed {len(every)} of {total}"

    async def check_cancel_semantics(self) -> None:
        """Pending cancels at once; running is flagged, the owner's fence keeps working."""
        store, lane = self._make_store(), self._lane()
        pending = (await store.enqueue(NewTask("k", lane, delay=timedelta(hours=1)))).record
        assert await store.cancel_task(pending.id) is TaskCancelOutcome.CANCELLED
        assert (await self._get(store, pending.id)).status is TaskStatus.CANCELLED
        assert await store.cancel_task(pending.id) is TaskCancelOutcome.ALREADY_FINISHED
        assert await store.cancel_task(2**62) is TaskCancelOutcome.NOT_FOUND
        running = await self._one(store, lane)
        lease = _lease(running)
        assert await store.cancel_task(running.id) is TaskCancelOutcome.CANCEL_REQUESTED
        flagged = await self._get(store, running.id)
        assert flagged.status is TaskStatus.RUNNING and flagged.cancel_requested
        assert flagged.processing_token == lease.processing_token, "cancel must not touch the fence"
        assert await store.renew_task_lease(lease, _LONG) is not None
        assert await store.mark_task_retry(
            lease, delay=timedelta(0), error="stop", steps_json=None, count_attempt=True
        )
        assert (await self._get(store, running.id)).status is TaskStatus.CANCELLED
        finishing = await self._one(store, lane)
        assert await store.cancel_task(finishing.id) is TaskCancelOutcome.CANCEL_REQUESTED
        assert await store.mark_task_succeeded(_lease(finishing), None, None)
        assert (await self._get(store, finishing.id)).status is TaskStatus.SUCCEEDED

    async def check_batched_success_is_fenced_per_entry(self) -> None:
        """``mark_tasks_succeeded_many`` writes exactly the entries whose fence holds."""
        store, lane = self._make_store(), self._lane()
        await store.enqueue_many([NewTask("k", lane) for _ in range(3)])
        claimed = await store.claim_due_for_lane(lane, 3, "worker-a", _LONG)
        leases = [_lease(r) for r in claimed]
        stale = TaskLease(leases[1].task_id, "stale-" + uuid.uuid4().hex, leases[1].expires_at)
        done = await store.mark_tasks_succeeded_many(
            [
                TaskCompletion(leases[0], '"a"', None),
                TaskCompletion(stale, '"b"', None),
                TaskCompletion(leases[2], None, "[]"),
            ]
        )
        assert list(done) == [True, False, True]
        assert (await self._get(store, leases[0].task_id)).result_json == '"a"'
        assert (await self._get(store, leases[1].task_id)).status is TaskStatus.RUNNING
        assert (await self._get(store, leases[2].task_id)).steps_json == "[]"
        assert list(await store.mark_tasks_succeeded_many([])) == []

    async def check_admin_reads(self) -> None:
        """list_tasks filters and pages; lane_counts reports due, running and the oldest."""
        store, lane = self._make_store(), self._lane()
        old = datetime.now(UTC) - timedelta(days=1)
        await store.enqueue_many(
            [
                NewTask("a", lane, run_at=old),
                NewTask("b", lane, priority=1),
                NewTask("a", lane),
                NewTask("a", lane, delay=timedelta(hours=1)),
            ]
        )
        await store.claim_due_for_lane(lane, 1, "worker-a", _LONG)
        counts = {c.lane: c for c in await store.lane_counts([lane, lane + "-empty"])}
        mine = counts[lane]
        assert (mine.pending, mine.due, mine.running, mine.expired) == (3, 2, 1, 0), mine
        assert mine.oldest_due_run_at is not None and mine.queue_lag > timedelta(0)
        assert counts[lane + "-empty"].pending == 0
        page1 = await store.list_tasks(lane=lane, limit=2)
        assert len(page1.items) == 2 and page1.next_before_id is not None
        page2 = await store.list_tasks(lane=lane, limit=2, before_id=page1.next_before_id)
        ids = [r.id for r in (*page1.items, *page2.items)]
        assert ids == sorted(ids, reverse=True) and len(set(ids)) == 4
        assert page2.next_before_id is None
        only_a = await store.list_tasks(lane=lane, kind="a", status=TaskStatus.PENDING)
        assert {r.kind for r in only_a.items} == {"a"} and len(only_a.items) == 3
        running = await store.list_tasks(lane=lane, status=TaskStatus.RUNNING)
        assert len(running.items) == 1

    async def check_invalid_input_is_rejected(self) -> None:
        """Bad claim and enqueue input raises typed errors and writes nothing."""
        store, lane = self._make_store(), self._lane()
        bad_claims: Sequence[tuple[object, object, object]] = (
            ("", "w", _LONG),
            (lane, "", _LONG),
            (lane, "w", timedelta(0)),
            (lane, "w", 5),
        )
        for bad_lane, owner, ttl in bad_claims:
            try:
                await store.claim_due_for_lane(bad_lane, 1, owner, ttl)  # type: ignore[arg-type]
            except TaskInvalidValueError:
                continue
            raise AssertionError(f"claim({bad_lane!r}, {owner!r}, {ttl!r}) must be refused")
        for kwargs in (
            {"payload_json": "{not json"},
            {"max_attempts": 0},
            {"run_at": datetime(2030, 1, 1)},
            {"priority": 2**40},
        ):
            try:
                NewTask("k", lane, **kwargs)
            except TaskEnqueueValueError:
                continue
            raise AssertionError(f"NewTask({kwargs}) must be refused")
        assert (await store.list_tasks(lane=lane)).items == []
