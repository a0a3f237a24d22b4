"""Worker side of operator control on every store: cancel a running body, snooze, per-kind retry."""

from __future__ import annotations

import asyncio
import enum
import random
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import create_async_engine

from aster_forge import (
    BackgroundTaskRecord,
    TaskCancelOutcome,
    TaskExecutionContext,
    TaskRetryPolicy,
    TaskSnooze,
    TaskStatus,
)
from aster_forge.db import BackgroundTaskDbStore, create_background_tasks_table
from aster_forge.tasks import (
    BackgroundTaskStore,
    ClaimedTaskExecutionConfig,
    ClaimedTaskOutcome,
    NewTask,
    TaskRegistry,
    TaskSpec,
    TaskStepSpec,
)
from aster_forge.tasks._execution import ClaimedTaskReport
from aster_forge.tasks._heartbeat import task_heartbeat_interval
from aster_forge.tasks._records import TaskFailureReason
from aster_forge.tasks._steps import TaskStepStatus, parse_task_steps_json
from aster_forge.testing import InMemoryTaskStore, ManualClock
from aster_forge.web import AdminSources, admin_app

from ..conftest import drop_all_tables
from ..web._support import client
from ._dispatch_support import run_claimed

LEASE_TTL = timedelta(seconds=30)
INTERVAL = task_heartbeat_interval(LEASE_TTL)
#: A real-time safety net for one step of a test (never a measured duration).
STEP_TIMEOUT = 10.0


class Kind(enum.StrEnum):
    LOOP = "loop"
    GATED = "gated"
    SNOOZE = "snooze"
    FLAKY = "flaky"
    PATIENT = "patient"
    STEPPED = "stepped"
    THREADED = "threaded"


class Lane(enum.StrEnum):
    WORK = "work"


Body = Callable[[TaskExecutionContext, "State", int], Awaitable[str | None]]


@dataclass
class State:
    """What the bodies share with the test."""

    started: asyncio.Event = field(default_factory=asyncio.Event)
    finish: asyncio.Event = field(default_factory=asyncio.Event)
    contexts: list[TaskExecutionContext] = field(default_factory=list)
    cancelled_bodies: int = 0
    # A plain def body runs in a worker thread: threading events, not asyncio ones.
    thread_started: threading.Event = field(default_factory=threading.Event)
    thread_go_on: threading.Event = field(default_factory=threading.Event)
    thread_done: threading.Event = field(default_factory=threading.Event)
    side_effects: list[str] = field(default_factory=list)
    seen_from_thread: list[bool] = field(default_factory=list)


async def _loop(ctx: TaskExecutionContext, state: State, payload: int) -> str | None:
    state.contexts.append(ctx)
    state.started.set()
    try:
        while True:  # noqa: ASYNC110 - the scenario: a body that ignores ctx.cancellation
            await asyncio.sleep(0.005)
    except asyncio.CancelledError:
        state.cancelled_bodies += 1
        raise


async def _gated(ctx: TaskExecutionContext, state: State, payload: int) -> str | None:
    state.contexts.append(ctx)
    state.started.set()
    await state.finish.wait()
    return "done"


async def _stepped(ctx: TaskExecutionContext, state: State, payload: int) -> str | None:
    await ctx.step_succeeded("fetch")
    await ctx.step_active("write", progress=(1, 3))
    state.started.set()
    await state.finish.wait()
    return "written"


def _threaded(ctx: TaskExecutionContext, state: State, payload: int) -> str | None:
    state.thread_started.set()
    state.thread_go_on.wait(STEP_TIMEOUT)
    # Read from the worker thread, after the row was already written cancelled.
    cancelled = ctx.cancel_requested
    state.seen_from_thread.append(cancelled)
    if not cancelled:
        state.side_effects.append("charged the card")
    state.thread_done.set()
    return None


async def _snooze(ctx: TaskExecutionContext, state: State, payload: int) -> str | None:
    if payload == 1:
        ctx.snooze(timedelta(seconds=30))
    raise TaskSnooze(timedelta(0))  # due again at once (server clocks cannot be advanced)


async def _flaky(ctx: TaskExecutionContext, state: State, payload: int) -> str | None:
    raise RuntimeError("boom")


PATIENT_POLICY = TaskRetryPolicy(
    base_delay=timedelta(hours=1), max_delay=timedelta(hours=4), jitter=0.0, max_attempts=3
)
DEFAULT_POLICY = TaskRetryPolicy(base_delay=timedelta(seconds=2), jitter=0.0)


def _registry() -> TaskRegistry[State, Kind, Lane]:
    registry: TaskRegistry[State, Kind, Lane] = TaskRegistry(kind=Kind, lane=Lane, state=State)
    registry.register(TaskSpec(Kind.LOOP, int, str | None, _loop))
    registry.register(TaskSpec(Kind.GATED, int, str | None, _gated))
    registry.register(TaskSpec(Kind.SNOOZE, int, str | None, _snooze))
    registry.register(TaskSpec(Kind.FLAKY, int, str | None, _flaky))
    registry.register(TaskSpec(Kind.PATIENT, int, str | None, _flaky, retry_policy=PATIENT_POLICY))
    steps = (TaskStepSpec("fetch", "Fetch"), TaskStepSpec("write", "Write"))
    registry.register(TaskSpec(Kind.STEPPED, int, str | None, _stepped, steps=steps))
    # A plain def body (run in a worker thread); the spec's type names only coroutines.
    registry.register(TaskSpec(Kind.THREADED, int, str | None, _threaded))  # type: ignore[arg-type]
    registry.lane(Lane.WORK, list(Kind))
    return registry.validate()


REGISTRY = _registry()


@dataclass
class Stack:
    store: BackgroundTaskStore
    clock: ManualClock
    state: State = field(default_factory=State)

    def config(self, **options: Any) -> ClaimedTaskExecutionConfig[State]:
        return ClaimedTaskExecutionConfig(
            state=self.state,
            registry=REGISTRY,
            lease_ttl=LEASE_TTL,
            retry_policy=DEFAULT_POLICY,
            clock=self.clock,
            **options,
        )

    async def claim(self, kind: Kind, payload: int = 0, **task: Any) -> BackgroundTaskRecord:
        await self.store.enqueue(NewTask(kind, Lane.WORK, payload_json=str(payload), **task))
        (record,) = await self.store.claim_due_for_lane(Lane.WORK, 1, "worker", LEASE_TTL)
        return record

    async def row(self, task_id: int) -> BackgroundTaskRecord:
        record = await self.store.get_task(task_id)
        assert record is not None
        return record


@pytest.fixture(
    params=[
        pytest.param("memory", id="memory"),
        pytest.param("sqlite", id="sqlite"),
        pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
        pytest.param("mysql", id="mysql", marks=pytest.mark.mysql),
    ]
)
async def stack(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Stack]:
    clock = ManualClock()
    if request.param == "memory":
        yield Stack(InMemoryTaskStore(clock), clock)
        return
    if request.param == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp_path / 'tasks.db'}"
    else:
        url = str(request.getfixturevalue(f"{request.param}_url"))
    engine = create_async_engine(url)
    try:
        await create_background_tasks_table(engine)
        yield Stack(BackgroundTaskDbStore(engine, clock=clock), clock)
    finally:
        await drop_all_tables(engine)
        await engine.dispose()


async def _tick_until_done(stack: Stack, run: asyncio.Task[Any], ticks: int) -> int:
    """Advance one heartbeat interval at a time; return how many ticks ``run`` needed."""
    for tick in range(1, ticks + 1):
        parked = asyncio.create_task(
            stack.clock.wait_for_sleepers(1, limit=STEP_TIMEOUT), name="test-parked"
        )
        done, _ = await asyncio.wait({run, parked}, return_when=asyncio.FIRST_COMPLETED)
        if run in done:
            parked.cancel()
            await asyncio.gather(parked, return_exceptions=True)
            return tick - 1
        await parked  # the heartbeat sleeps until its next tick
        await stack.clock.advance(INTERVAL)
        done, _ = await asyncio.wait({run}, timeout=STEP_TIMEOUT)
        if done:
            return tick
    run.cancel()  # do not leave it running past the test
    await asyncio.gather(run, return_exceptions=True)
    raise AssertionError(f"the execution did not end within {ticks} heartbeat intervals")


async def test_admin_cancel_stops_a_looping_body_within_two_heartbeats(stack: Stack) -> None:
    record = await stack.claim(Kind.LOOP)
    run = asyncio.create_task(run_claimed(stack.store, record, stack.config()), name="test-run")
    await asyncio.wait_for(stack.state.started.wait(), STEP_TIMEOUT)
    async with client(admin_app(AdminSources(task_store=stack.store), dashboard=False)) as http:
        response = await http.post(f"/api/tasks/{record.id}/cancel")
    assert response.json()["outcome"] == "cancel_requested"
    ticks = await _tick_until_done(stack, run, 2)
    report: ClaimedTaskReport = run.result()
    assert ticks <= 2
    assert report.outcome is ClaimedTaskOutcome.CANCELLED
    assert stack.state.cancelled_bodies == 1, "the body itself must be cancelled"
    (ctx,) = stack.state.contexts
    assert ctx.cancel_requested and ctx.cancellation.cancelled and not ctx.shutdown_requested
    row = await stack.row(record.id)
    assert row.status is TaskStatus.CANCELLED
    assert row.failure_reason is TaskFailureReason.CANCELLED
    assert row.attempt == 0 and row.processing_token is None and row.finished_at is not None


async def test_a_cancelled_task_ends_its_active_step_cancelled(stack: Stack) -> None:
    steps = REGISTRY.spec_for(Kind.STEPPED).initial_steps_json()
    record = await stack.claim(Kind.STEPPED, steps_json=steps)
    run = asyncio.create_task(run_claimed(stack.store, record, stack.config()), name="test-run")
    await asyncio.wait_for(stack.state.started.wait(), STEP_TIMEOUT)
    assert await stack.store.cancel_task(record.id) is TaskCancelOutcome.CANCEL_REQUESTED
    await _tick_until_done(stack, run, 2)
    assert run.result().outcome is ClaimedTaskOutcome.CANCELLED
    row = await stack.row(record.id)
    assert row.status is TaskStatus.CANCELLED and row.steps_json is not None
    fetch, write = parse_task_steps_json(row.steps_json)
    assert fetch.status is TaskStepStatus.SUCCEEDED
    assert (write.status, write.detail) == (TaskStepStatus.CANCELLED, "Cancelled by an operator")
    assert write.finished_at is not None and write.progress_current == 1  # as far as it got


async def test_a_plain_def_body_sees_the_cancel_from_its_thread(stack: Stack) -> None:
    # A thread cannot be stopped: the row ends cancelled while the body still runs, and
    # the body must look at ctx.cancel_requested before a side effect.
    record = await stack.claim(Kind.THREADED)
    run = asyncio.create_task(run_claimed(stack.store, record, stack.config()), name="test-run")
    assert await asyncio.to_thread(stack.state.thread_started.wait, STEP_TIMEOUT)
    try:
        assert await stack.store.cancel_task(record.id) is TaskCancelOutcome.CANCEL_REQUESTED
        await _tick_until_done(stack, run, 2)
        assert run.result().outcome is ClaimedTaskOutcome.CANCELLED
        assert (await stack.row(record.id)).status is TaskStatus.CANCELLED
        assert not stack.state.thread_done.is_set(), "the thread is still running"
    finally:
        stack.state.thread_go_on.set()
        assert await asyncio.to_thread(stack.state.thread_done.wait, STEP_TIMEOUT)
    assert stack.state.seen_from_thread == [True]
    assert stack.state.side_effects == []


class _CountingStore:
    """Counts the fenced outcome writes that a store applied (returned ``True``)."""

    _OUTCOME_WRITES = (
        "mark_task_succeeded",
        "mark_task_retry",
        "mark_task_failed",
        "release_task_for_shutdown",
        "mark_task_cancelled",
        "mark_task_snoozed",
    )

    def __init__(self, inner: BackgroundTaskStore) -> None:
        self._inner = inner
        self.applied = 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name not in self._OUTCOME_WRITES:
            return attr

        async def counted(*args: Any, **kwargs: Any) -> Any:
            result = await attr(*args, **kwargs)
            self.applied += bool(result)
            return result

        return counted


async def _spin(turns: int) -> None:
    for _ in range(turns):
        await asyncio.sleep(0)


async def _heartbeat_tick(stack: Stack, run: asyncio.Task[Any]) -> None:
    """Advance one interval once the heartbeat is parked (nothing to do once ``run`` ended)."""
    while not run.done():
        if stack.clock.sleepers >= 1:
            await stack.clock.advance(INTERVAL)
            return
        await asyncio.sleep(0)


# When the body wins the race while the heartbeat's renewal is in flight, the heartbeat
# abandons that renewal (its contract); on MariaDB the cancelled aiomysql statement
# strands its pooled connection, which the garbage collector reports. That is the
# heartbeat's, not this outcome check's, and is reported separately.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
async def test_cancel_racing_the_body_finishing_writes_exactly_one_outcome(stack: Stack) -> None:
    """Cancel vs finish, 200 rounds: finish first, a true race, cancel first; one outcome each."""
    rng = random.Random(18)
    outcomes: dict[TaskStatus, int] = {TaskStatus.SUCCEEDED: 0, TaskStatus.CANCELLED: 0}
    for round_ in range(200):
        stack.state = State()
        counting = _CountingStore(stack.store)
        record = await stack.claim(Kind.GATED, round_)
        run = asyncio.create_task(
            run_claimed(counting, record, stack.config()),
            name=f"race-{round_}",
        )
        await asyncio.wait_for(stack.state.started.wait(), STEP_TIMEOUT)
        mode = round_ % 3
        if mode == 0:  # the body finishes first, the cancel arrives while it is writing
            stack.state.finish.set()
            await _spin(rng.randrange(4))
            await stack.store.cancel_task(record.id)
        elif mode == 1:  # the heartbeat learns the cancel while the body is finishing
            await stack.store.cancel_task(record.id)
            await _heartbeat_tick(stack, run)
            await _spin(rng.randrange(40))
            stack.state.finish.set()
        else:  # the cancel reaches a body that would never finish
            await stack.store.cancel_task(record.id)
            await _heartbeat_tick(stack, run)
        if not run.done():
            await _tick_until_done(stack, run, 2)
        report = await run
        row = await stack.row(record.id)
        assert counting.applied == 1, f"round {round_}: {counting.applied} outcome writes"
        assert row.status in outcomes, f"round {round_}: {row.status}"
        outcomes[row.status] += 1
        if row.status is TaskStatus.SUCCEEDED:
            assert report.outcome is ClaimedTaskOutcome.SUCCEEDED and row.result_json == '"done"'
        else:
            assert report.outcome is ClaimedTaskOutcome.CANCELLED and row.result_json is None
        assert mode != 0 or row.status is TaskStatus.SUCCEEDED, "a finished body keeps its outcome"
        assert mode != 2 or row.status is TaskStatus.CANCELLED, "a cancelled body ends cancelled"
    assert all(outcomes.values()), f"both outcomes must occur: {outcomes}"


async def test_snooze_reruns_later_without_an_attempt(stack: Stack) -> None:
    record = await stack.claim(Kind.SNOOZE, 1, max_attempts=1)
    report = await run_claimed(stack.store, record, stack.config())
    assert report.outcome is ClaimedTaskOutcome.SNOOZED
    row = await stack.row(record.id)
    assert row.status is TaskStatus.PENDING and row.attempt == 0 and row.snooze_count == 1
    assert row.processing_token is None
    assert row.run_at >= record.run_at + timedelta(seconds=29), "due after the snooze delay"
    assert row.last_error is None and row.failure_reason is None, "a snooze is not a failure"


async def test_snoozing_past_the_cap_fails_the_task(stack: Stack) -> None:
    record = await stack.claim(Kind.SNOOZE, 2)
    config = stack.config(max_snoozes=2)
    for expected in (1, 2):
        report = await run_claimed(stack.store, record, config)
        assert report.outcome is ClaimedTaskOutcome.SNOOZED
        assert (await stack.row(record.id)).snooze_count == expected
        (record,) = await stack.store.claim_due_for_lane(Lane.WORK, 1, "worker", LEASE_TTL)
    report = await run_claimed(stack.store, record, config)
    assert report.outcome is ClaimedTaskOutcome.FAILED
    row = await stack.row(record.id)
    assert row.status is TaskStatus.FAILED and row.snooze_count == 2
    assert row.last_error is not None and "snooze" in row.last_error
    assert row.manual_retry_allowed is True


async def test_retry_policy_comes_from_the_kind_else_the_worker(stack: Stack) -> None:
    patient = await stack.claim(Kind.PATIENT)
    report = await run_claimed(stack.store, patient, stack.config())
    assert report.outcome is ClaimedTaskOutcome.RETRIED
    assert report.retry_delay == timedelta(hours=1), "the kind's own policy"
    row = await stack.row(patient.id)
    assert row.run_at >= patient.run_at + timedelta(minutes=59)
    flaky = await stack.claim(Kind.FLAKY)
    report = await run_claimed(stack.store, flaky, stack.config())
    assert report.outcome is ClaimedTaskOutcome.RETRIED
    assert report.retry_delay == timedelta(seconds=2), "the worker's policy by default"


def test_the_kinds_policy_sets_the_attempt_budget_of_new_tasks() -> None:
    assert REGISTRY.new_task(Kind.PATIENT, 1).max_attempts == PATIENT_POLICY.max_attempts
    assert REGISTRY.new_task(Kind.PATIENT, 1, max_attempts=9).max_attempts == 9
    assert REGISTRY.new_task(Kind.FLAKY, 1).max_attempts == NewTask("k", "l").max_attempts
