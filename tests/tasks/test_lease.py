"""TaskLease, TaskLeaseGuard and TaskExecutionContext."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from aster_forge import TaskExecutionContext
from aster_forge.runtime import CancellationToken
from aster_forge.tasks import (
    TaskInvalidValueError,
    TaskLease,
    TaskLeaseGuard,
    TaskLeaseLostError,
    TaskStepSpec,
)
from aster_forge.tasks._lease import TaskLeaseTermination
from aster_forge.tasks._steps import (
    TaskStepStatus,
    initial_task_steps_from_specs,
    parse_task_steps_json,
)
from aster_forge.tasks.errors import (
    TaskIoError,
    TaskLeaseRenewalTimeoutError,
    TaskWorkerShutdownRequestedError,
)
from aster_forge.testing import ManualClock

from .fakes import FakeStepStore

TTL = timedelta(seconds=30)


def _guard(clock: ManualClock, shutdown: CancellationToken, token: str = "tok") -> TaskLeaseGuard:
    lease = TaskLease(7, token, clock.now() + TTL)
    return TaskLeaseGuard(lease, TTL, clock=clock, shutdown_token=shutdown)


def test_lease_value_rules() -> None:
    at = datetime(2030, 1, 1, tzinfo=UTC)
    lease = TaskLease(1, "a", at)
    assert lease.renewed(at + TTL).same_claim(lease)
    assert not TaskLease(1, "b", at).same_claim(lease)
    with pytest.raises(ValueError, match="non-empty"):
        TaskLease(1, "", at)
    with pytest.raises(ValueError, match="timezone-aware"):
        TaskLease(1, "a", datetime(2030, 1, 1))


async def test_guard_times_out_at_the_local_deadline_and_renewal_extends_it() -> None:
    clock = ManualClock()
    guard = _guard(clock, CancellationToken())
    await clock.advance(29)
    guard.ensure_active()
    guard.record_renewed(guard.lease.renewed(clock.now() + TTL), renewal_started_at=20.0)
    assert guard.deadline == 50.0
    await clock.advance(21)
    with pytest.raises(TaskLeaseRenewalTimeoutError):
        guard.ensure_active()
    assert guard.lease_lost and guard.token.cancelled
    assert guard.termination is TaskLeaseTermination.RENEWAL_TIMED_OUT


async def test_mark_lost_cancels_the_token_and_ignores_later_renewals() -> None:
    clock = ManualClock()
    guard = _guard(clock, CancellationToken())
    error = guard.mark_lost()
    assert isinstance(error, TaskLeaseLostError) and error.task_id == 7
    assert guard.token.cancelled and guard.lease_lost
    guard.record_renewed(guard.lease.renewed(clock.now() + TTL * 10), renewal_started_at=0.0)
    assert guard.deadline == 30.0
    with pytest.raises(TaskLeaseLostError):
        guard.ensure_active()
    with pytest.raises(TaskInvalidValueError, match="does not match"):
        guard.record_renewed(TaskLease(7, "other", clock.now()), renewal_started_at=0.0)


async def test_shutdown_is_seen_through_the_child_token() -> None:
    clock = ManualClock()
    shutdown = CancellationToken()
    guard = _guard(clock, shutdown)
    shutdown.cancel()
    assert guard.token.cancelled
    assert not guard.lease_lost
    with pytest.raises(TaskWorkerShutdownRequestedError):
        guard.ensure_active()
    assert isinstance(guard.mark_lost(), TaskLeaseLostError)  # loss wins over shutdown
    assert isinstance(guard.mark_shutdown_requested(), TaskLeaseLostError)


async def test_context_step_updates_are_fenced() -> None:
    clock = ManualClock()
    specs = (TaskStepSpec("load", "Load"), TaskStepSpec("save", "Save"))
    store = FakeStepStore(owner_token="tok")
    ctx = TaskExecutionContext(
        _guard(clock, CancellationToken()),
        attempt=2,
        store=store,
        steps=initial_task_steps_from_specs(specs, now=clock.now()),
    )
    assert (ctx.task_id, ctx.attempt, ctx.lease.processing_token) == (7, 2, "tok")
    await ctx.step_succeeded("load")
    await ctx.step_active("save", progress=(1, 4))
    assert len(store.steps_writes) == 2
    stored = parse_task_steps_json(store.steps_writes[-1], specs=specs)
    assert [s.status for s in stored] == [TaskStepStatus.SUCCEEDED, TaskStepStatus.ACTIVE]
    store.owner_token = "someone-else"  # another claim took the task over
    with pytest.raises(TaskLeaseLostError):
        await ctx.step_skipped("save")
    assert ctx.lease_lost and ctx.cancellation.cancelled
    assert ctx.steps[1].status is TaskStepStatus.ACTIVE  # nothing changed locally either
    with pytest.raises(TaskLeaseLostError):
        await ctx.step_active("save")
    assert len(store.steps_writes) == 2


async def test_context_sleep_stops_on_shutdown() -> None:
    clock = ManualClock()
    shutdown = CancellationToken()
    ctx = TaskExecutionContext(_guard(clock, shutdown), attempt=1)
    sleeper = asyncio.create_task(ctx.sleep(60), name="test-ctx-sleep")
    await clock.wait_for_sleepers(1)
    shutdown.cancel()
    with pytest.raises(TaskWorkerShutdownRequestedError):
        await sleeper
    assert ctx.shutdown_requested and not ctx.lease_lost


class RecordingTempDirs:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.created = 0

    async def create_task_temp_dir(self, lease: TaskLease) -> Path:
        self.created += 1
        path = self.root / f"task-{lease.task_id}-{lease.processing_token}"
        await asyncio.to_thread(path.mkdir, exist_ok=True)
        return path

    async def remove_task_temp_dir(self, lease: TaskLease) -> None:
        raise AssertionError("not used here")


async def test_temp_dir_is_created_lazily_once(tmp_path: Path) -> None:
    clock = ManualClock()
    provider = RecordingTempDirs(tmp_path)
    ctx = TaskExecutionContext(_guard(clock, CancellationToken()), attempt=1, temp_dirs=provider)
    created_before = ctx.temp_dir_created
    assert not created_before and provider.created == 0
    first = await ctx.temp_dir()
    assert await ctx.temp_dir() == first and provider.created == 1
    assert first.is_dir() and ctx.temp_dir_created
    bare = TaskExecutionContext(_guard(clock, CancellationToken()), attempt=1)
    with pytest.raises(TaskIoError, match="no task temp directory provider"):
        await bare.temp_dir()
