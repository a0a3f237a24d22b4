"""What executions log: expected failures without tracebacks, no payload values, blocked loops."""

from __future__ import annotations

import asyncio
import enum
import logging
import threading
from datetime import datetime

import pytest

from aster_forge import ClassifiedTaskError, TaskExecutionContext, TaskRetryClass, TaskStatus
from aster_forge.tasks import ClaimedTaskOutcome, NewTask, TaskRegistry, TaskSpec
from aster_forge.testing import InMemoryTaskStore, ManualClock

from ._dispatch_support import (
    LEASE_TTL,
    Harness,
    Job,
    Kind,
    Lane,
    claim_one,
    enqueue,
    make_config,
    new_task,
    run_claimed,
    until,
)

SECRET = "top-secret-4711"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def store(clock: ManualClock) -> InMemoryTaskStore:
    return InMemoryTaskStore(clock)


def _everything_logged(caplog: pytest.LogCaptureFixture) -> str:
    formatter = logging.Formatter("%(name)s %(levelname)s %(message)s")
    return "\n".join(formatter.format(record) for record in caplog.records)


async def _run_one(
    store: InMemoryTaskStore, clock: ManualClock, harness: Harness
) -> ClaimedTaskOutcome:
    record = await claim_one(store, Lane.FALLBACK)
    report = await run_claimed(store, record, make_config(harness, clock))
    return report.outcome


async def test_a_classified_failure_logs_one_warning_without_traceback(
    store: InMemoryTaskStore, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    harness = Harness()

    async def permanent(ctx: TaskExecutionContext, job: Job) -> int:
        raise ClassifiedTaskError("the order was cancelled", TaskRetryClass.PERMANENT)

    harness.actions["p"] = permanent
    await enqueue(store, new_task(Kind.MAIL, "p"))
    with caplog.at_level(logging.DEBUG):
        assert await _run_one(store, clock, harness) is ClaimedTaskOutcome.FAILED
    (warning,) = [r for r in caplog.records if r.name == "aster_forge.tasks.execution"]
    assert warning.levelno == logging.WARNING
    assert warning.exc_info is None and warning.exc_text is None
    assert "permanent" in warning.getMessage()
    assert "Traceback" not in caplog.text


async def test_an_unexpected_error_keeps_its_traceback(
    store: InMemoryTaskStore, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    harness = Harness()

    async def broken(ctx: TaskExecutionContext, job: Job) -> int:
        raise ZeroDivisionError

    harness.actions["z"] = broken
    await enqueue(store, new_task(Kind.MAIL, "z"))
    with caplog.at_level(logging.WARNING, logger="aster_forge.tasks.execution"):
        assert await _run_one(store, clock, harness) is ClaimedTaskOutcome.RETRIED
    (warning,) = caplog.records
    assert warning.exc_info is not None and "ZeroDivisionError" in caplog.text


async def test_no_log_record_carries_a_payload_value(
    store: InMemoryTaskStore, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    payload = f'{{"name": {{"card": "{SECRET}"}}, "value": "{SECRET}"}}'
    (task_id,) = await enqueue(store, new_task(Kind.MAIL, "bad", payload=payload))
    with caplog.at_level(logging.DEBUG):
        outcome = await _run_one(store, clock, Harness())
    assert outcome is ClaimedTaskOutcome.FAILED
    row = await store.get_task(task_id)
    assert row is not None and row.last_error is not None and "'name'" in row.last_error
    logged = _everything_logged(caplog)
    assert "attempt 1/5 failed" in logged
    assert SECRET not in logged and "input_value" not in logged
    assert SECRET not in row.last_error


class SyncKind(enum.StrEnum):
    BLOCKING = "blocking"


class SyncLane(enum.StrEnum):
    ONLY = "only"


async def test_a_plain_def_body_runs_in_a_worker_thread(
    store: InMemoryTaskStore, clock: ManualClock
) -> None:
    gate = threading.Event()
    seen: dict[str, int] = {}

    def blocking(ctx: TaskExecutionContext, state: Harness, job: Job) -> int:
        seen["thread"] = threading.get_ident()
        # Blocks its thread until the event loop (still running) opens the gate.
        assert gate.wait(timeout=30)
        return job.value + 1

    registry: TaskRegistry[Harness, SyncKind, SyncLane] = TaskRegistry(
        kind=SyncKind, lane=SyncLane, state=Harness
    )
    registry.register(TaskSpec(SyncKind.BLOCKING, Job, int, blocking))  # type: ignore[arg-type]
    registry.lane(SyncLane.ONLY, [SyncKind.BLOCKING])
    registry.validate()
    task = NewTask(
        kind=SyncKind.BLOCKING, lane=SyncLane.ONLY, payload_json='{"name": "x", "value": 41}'
    )
    (result,) = await store.enqueue_many([task])
    (record,) = await store.claim_due_for_lane(SyncLane.ONLY, 1, "w", LEASE_TTL)
    config = make_config(Harness(), clock, registry=registry)
    run = asyncio.create_task(run_claimed(store, record, config), name="t")
    await until(lambda: "thread" in seen, turns=10**6)
    assert seen["thread"] != threading.get_ident()
    assert not run.done()  # the loop keeps running while the body blocks its thread
    gate.set()
    report = await run
    assert report.outcome is ClaimedTaskOutcome.SUCCEEDED
    row = await store.get_task(result.record.id)
    assert row is not None and (row.status, row.result_json) == (TaskStatus.SUCCEEDED, "42")


class JumpingClock:
    """A manual clock whose monotonic reading a body can push forward, as if it blocked."""

    def __init__(self, inner: ManualClock) -> None:
        self.inner = inner
        self.jump = 0.0

    def now(self) -> datetime:
        return self.inner.now()

    def monotonic(self) -> float:
        return self.inner.monotonic() + self.jump

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


async def test_a_body_that_blocks_the_loop_is_named_in_the_log(
    store: InMemoryTaskStore, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    jumping = JumpingClock(clock)
    harness = Harness()

    async def hog(ctx: TaskExecutionContext, job: Job) -> int:
        jumping.jump += 2.5  # one step that "took" 2.5 s without yielding
        return 0

    harness.actions["hog"] = hog
    (task_id,) = await enqueue(store, new_task(Kind.MAIL, "hog"))
    record = await claim_one(store, Lane.FALLBACK)
    config = make_config(harness, jumping)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="aster_forge.tasks.execution"):
        report = await run_claimed(store, record, config)
    assert report.outcome is ClaimedTaskOutcome.SUCCEEDED
    (line,) = [r.getMessage() for r in caplog.records if "blocked the event loop" in r.getMessage()]
    assert f"task #{task_id} (mail) blocked the event loop for 2.500s" in line
