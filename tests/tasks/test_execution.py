"""Claimed execution: one fenced outcome per task, classification, shutdown, heartbeat."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
from datetime import timedelta

import pytest

from aster_forge import ClassifiedTaskError, TaskExecutionContext, TaskRetryClass, TaskStatus
from aster_forge.runtime import CancellationToken
from aster_forge.tasks import (
    ClaimedTaskExecution,
    ClaimedTaskExecutionConfig,
    ClaimedTaskOutcome,
    SharedTaskHeartbeat,
    TaskInvalidValueError,
    TaskLeaseLostError,
)
from aster_forge.tasks._execution import ClaimedTaskReport
from aster_forge.tasks.errors import TaskRegistryError
from aster_forge.testing import InMemoryTaskStore, ManualClock

from ._dispatch_support import (
    LEASE_TTL,
    REGISTRY,
    Harness,
    Job,
    Kind,
    Lane,
    ProxyStore,
    claim_one,
    enqueue,
    make_config,
    new_task,
    run_claimed,
    until,
)


async def _run_once(
    store: InMemoryTaskStore, config: ClaimedTaskExecutionConfig[Harness]
) -> ClaimedTaskReport:
    """Claim the one due fallback-lane task and run it to its stored outcome."""
    return await run_claimed(store, await claim_one(store, Lane.FALLBACK), config)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def store(clock: ManualClock) -> InMemoryTaskStore:
    return InMemoryTaskStore(clock)


async def test_success_writes_result_and_steps(
    store: InMemoryTaskStore, clock: ManualClock
) -> None:
    harness = Harness()

    async def report(ctx: TaskExecutionContext, job: Job) -> int:
        await ctx.step_succeeded("collect")
        await ctx.step_active("render", progress=(1, 2))
        return 42

    harness.actions["r"] = report
    (task_id,) = await enqueue(store, new_task(Kind.REPORT, "r"))
    record = await claim_one(store, Lane.FALLBACK)
    report_ = await run_claimed(store, record, make_config(harness, clock))
    assert report_.outcome is ClaimedTaskOutcome.SUCCEEDED
    assert report_.attempt == 1
    row = await store.get_task(task_id)
    assert row is not None
    assert row.status is TaskStatus.SUCCEEDED
    assert row.result_json == "42"
    assert row.processing_token is None
    assert row.steps_json is not None
    steps = json.loads(row.steps_json)
    assert [step["status"] for step in steps] == ["succeeded", "active"]
    assert steps[1]["progress_current"] == 1


async def test_record_kind_may_be_the_enum_member(
    store: InMemoryTaskStore, clock: ManualClock
) -> None:
    config = make_config(Harness(), clock)
    assert config.spec_for("mail") is config.spec_for(Kind.MAIL)
    with pytest.raises(TaskRegistryError):
        config.spec_for("nope")


async def test_retryable_failure_goes_back_to_pending_with_policy_delay(
    store: InMemoryTaskStore, clock: ManualClock
) -> None:
    harness = Harness()

    async def flaky(ctx: TaskExecutionContext, job: Job) -> int:
        raise ClassifiedTaskError("Upstream busy", TaskRetryClass.RETRYABLE)

    harness.actions["f"] = flaky
    (task_id,) = await enqueue(store, new_task(Kind.MAIL, "f"))
    config = make_config(harness, clock)
    first = await _run_once(store, config)
    assert first.outcome is ClaimedTaskOutcome.RETRIED
    assert first.retry_delay == timedelta(seconds=5)
    row = await store.get_task(task_id)
    assert row is not None
    assert (row.status, row.attempt, row.last_error) == (TaskStatus.PENDING, 1, "Upstream busy")
    assert row.run_at == clock.now() + timedelta(seconds=5)
    # Not due yet: nothing to claim until the delay passed.
    assert await store.claim_due_for_lane(Lane.FALLBACK, 1, "o", LEASE_TTL) == []
    await clock.advance(5)
    second = await _run_once(store, config)
    assert second.attempt == 2
    assert second.retry_delay == timedelta(seconds=15)


async def test_attempts_exhausted_turns_retryable_into_failed(
    store: InMemoryTaskStore, clock: ManualClock
) -> None:
    harness = Harness()

    async def flaky(ctx: TaskExecutionContext, job: Job) -> int:
        raise ClassifiedTaskError("Upstream busy")

    harness.actions["f"] = flaky
    (task_id,) = await enqueue(store, new_task(Kind.MAIL, "f", max_attempts=2))
    config = make_config(harness, clock)
    outcomes = []
    for _ in range(2):
        record = await claim_one(store, Lane.FALLBACK)
        outcomes.append((await run_claimed(store, record, config)).outcome)
        await clock.advance(60)
    assert outcomes == [ClaimedTaskOutcome.RETRIED, ClaimedTaskOutcome.FAILED]
    row = await store.get_task(task_id)
    assert row is not None
    assert (row.status, row.attempt) == (TaskStatus.FAILED, 2)
    assert row.manual_retry_allowed is True


async def test_permanent_failure_marks_the_active_step_failed(
    store: InMemoryTaskStore, clock: ManualClock
) -> None:
    harness = Harness()

    async def broken(ctx: TaskExecutionContext, job: Job) -> int:
        await ctx.step_succeeded("collect")
        await ctx.step_active("render")
        raise ClassifiedTaskError("Template is missing", TaskRetryClass.PERMANENT)

    harness.actions["p"] = broken
    (task_id,) = await enqueue(store, new_task(Kind.REPORT, "p"))
    result = await _run_once(store, make_config(harness, clock))
    assert result.outcome is ClaimedTaskOutcome.FAILED
    assert result.retry_class is TaskRetryClass.PERMANENT
    row = await store.get_task(task_id)
    assert row is not None and row.steps_json is not None
    assert (row.status, row.attempt, row.last_error) == (
        TaskStatus.FAILED,
        1,
        "Template is missing",
    )
    assert row.manual_retry_allowed is False
    steps = json.loads(row.steps_json)
    assert [(s["key"], s["status"], s["detail"]) for s in steps] == [
        ("collect", "succeeded", None),
        ("render", "failed", "Template is missing"),
    ]


async def test_manual_failure_is_final_but_manually_retryable(
    store: InMemoryTaskStore, clock: ManualClock
) -> None:
    harness = Harness()

    async def quota(ctx: TaskExecutionContext, job: Job) -> int:
        raise ClassifiedTaskError("Quota exceeded", TaskRetryClass.MANUAL)

    harness.actions["m"] = quota
    (task_id,) = await enqueue(store, new_task(Kind.MAIL, "m"))
    result = await _run_once(store, make_config(harness, clock))
    assert result.outcome is ClaimedTaskOutcome.FAILED
    row = await store.get_task(task_id)
    assert row is not None
    assert (row.status, row.manual_retry_allowed) == (TaskStatus.FAILED, True)


class UpstreamError(Exception):
    """A product exception whose text says what went wrong."""


async def test_an_unclassified_failure_stores_its_type_message_and_traceback(
    store: InMemoryTaskStore, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    harness = Harness()

    def parse_reply(status: int) -> None:
        raise UpstreamError(f"Server error '{status} Service Unavailable' for url '/quotes'")

    async def upstream(ctx: TaskExecutionContext, job: Job) -> int:
        parse_reply(503)
        return 0

    harness.actions["u"] = upstream
    (task_id,) = await enqueue(store, new_task(Kind.MAIL, "u"))
    with caplog.at_level(logging.WARNING, logger="aster_forge.tasks.execution"):
        result = await _run_once(store, make_config(harness, clock))
    assert result.outcome is ClaimedTaskOutcome.RETRIED
    assert result.retry_class is TaskRetryClass.RETRYABLE
    row = await store.get_task(task_id)
    assert row is not None
    expected = (
        "tests.tasks.test_execution.UpstreamError: "
        "Server error '503 Service Unavailable' for url '/quotes'"
    )
    assert row.last_error == expected == result.error
    trace = row.last_traceback
    assert trace is not None and trace.startswith("Traceback (most recent call last):")
    assert "in parse_reply" in trace and "in upstream" in trace
    assert trace.rstrip().endswith(expected)
    (line,) = caplog.records
    assert line.levelno == logging.WARNING and line.exc_info is not None
    assert line.getMessage() == (
        f"task #{task_id} (mail) attempt 1/5 failed (retryable, retrying in 5.0s): {expected}"
    )


async def test_the_last_attempt_of_an_unclassified_failure_logs_an_error(
    store: InMemoryTaskStore, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    harness = Harness()

    async def broken(ctx: TaskExecutionContext, job: Job) -> int:
        raise KeyError("sku-17")

    harness.actions["k"] = broken
    (task_id,) = await enqueue(store, new_task(Kind.MAIL, "k", max_attempts=1))
    with caplog.at_level(logging.WARNING, logger="aster_forge.tasks.execution"):
        result = await _run_once(store, make_config(harness, clock))
    assert result.outcome is ClaimedTaskOutcome.FAILED
    row = await store.get_task(task_id)
    assert row is not None and row.last_error == "KeyError: 'sku-17'"
    assert row.last_traceback is not None and "in broken" in row.last_traceback
    (line,) = caplog.records
    assert line.levelno == logging.ERROR
    assert "attempt 1/1 failed (retryable, no attempts left): KeyError: 'sku-17'" in (
        line.getMessage()
    )


async def test_redact_errors_stores_and_logs_only_the_exception_type(
    store: InMemoryTaskStore, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    harness = Harness()

    async def leaky(ctx: TaskExecutionContext, job: Job) -> int:
        raise RuntimeError("password=hunter2")

    async def chosen(ctx: TaskExecutionContext, job: Job) -> int:
        raise ClassifiedTaskError("Quota exceeded for hunter", TaskRetryClass.MANUAL)

    harness.actions.update(u=leaky, c=chosen)
    (leaked,) = await enqueue(store, new_task(Kind.MAIL, "u"))
    (classified,) = await enqueue(store, new_task(Kind.MAIL, "c"))
    config = make_config(harness, clock, redact_errors=True)
    with caplog.at_level(logging.DEBUG):
        assert (await _run_once(store, config)).outcome is ClaimedTaskOutcome.RETRIED
        assert (await _run_once(store, config)).outcome is ClaimedTaskOutcome.FAILED
    row = await store.get_task(leaked)
    assert row is not None
    assert (row.last_error, row.last_traceback) == ("RuntimeError", None)
    kept = await store.get_task(classified)
    assert kept is not None and kept.last_error == "Quota exceeded for hunter"
    assert "hunter2" not in caplog.text and "Traceback" not in caplog.text
    assert all(record.exc_info is None for record in caplog.records)
    line = f"task #{leaked} (mail) attempt 1/5 failed (retryable, retrying in 5.0s): RuntimeError"
    assert line in caplog.messages


async def test_a_redacted_last_attempt_is_still_an_error_line(
    store: InMemoryTaskStore, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    harness = Harness()

    async def leaky(ctx: TaskExecutionContext, job: Job) -> int:
        raise RuntimeError("password=hunter2")

    harness.actions["u"] = leaky
    await enqueue(store, new_task(Kind.MAIL, "u", max_attempts=1))
    with caplog.at_level(logging.WARNING, logger="aster_forge.tasks.execution"):
        result = await _run_once(store, make_config(harness, clock, redact_errors=True))
    assert result.outcome is ClaimedTaskOutcome.FAILED
    (line,) = caplog.records
    assert (line.levelno, line.exc_info) == (logging.ERROR, None)
    assert line.getMessage().endswith("failed (retryable, no attempts left): RuntimeError")


async def test_a_body_cancelling_itself_is_retried_not_released(
    store: InMemoryTaskStore, clock: ManualClock
) -> None:
    # Nobody asked it to stop (no shutdown, no operator cancel, lease held): a
    # CancelledError out of the body is the body's own failure, retried with an attempt
    # counted, not a shutdown release.
    harness = Harness()

    async def self_cancelling(ctx: TaskExecutionContext, job: Job) -> int:
        raise asyncio.CancelledError

    harness.actions["c"] = self_cancelling
    (task_id,) = await enqueue(store, new_task(Kind.MAIL, "c"))
    result = await _run_once(store, make_config(harness, clock))
    assert result.outcome is ClaimedTaskOutcome.RETRIED
    assert result.retry_class is TaskRetryClass.RETRYABLE
    row = await store.get_task(task_id)
    assert row is not None
    assert (row.status, row.attempt) == (TaskStatus.PENDING, 1)
    assert row.last_error == "Task was cancelled unexpectedly"


async def test_product_classifier_from_config(store: InMemoryTaskStore, clock: ManualClock) -> None:
    harness = Harness()

    async def missing(ctx: TaskExecutionContext, job: Job) -> int:
        raise FileNotFoundError("/secret/path")

    harness.actions["x"] = missing

    def classify(exc: Exception) -> object:
        from aster_forge.tasks._retry import TaskFailureClassification

        if isinstance(exc, FileNotFoundError):
            return TaskFailureClassification(TaskRetryClass.PERMANENT, "Source file is gone")
        return None

    (task_id,) = await enqueue(store, new_task(Kind.MAIL, "x"))
    config = make_config(harness, clock, error_classifier=classify)
    result = await _run_once(store, config)
    assert result.outcome is ClaimedTaskOutcome.FAILED
    row = await store.get_task(task_id)
    assert row is not None and row.last_error == "Source file is gone"


async def test_invalid_payload_fails_permanently_naming_kind_and_field(
    store: InMemoryTaskStore, clock: ManualClock
) -> None:
    (task_id,) = await enqueue(store, new_task(Kind.MAIL, "bad", payload='{"value": 3}'))
    result = await run_claimed(
        store, await claim_one(store, Lane.FALLBACK), make_config(Harness(), clock)
    )
    assert result.outcome is ClaimedTaskOutcome.FAILED
    assert result.retry_class is TaskRetryClass.PERMANENT
    row = await store.get_task(task_id)
    assert row is not None and row.last_error is not None
    assert row.status is TaskStatus.FAILED
    assert "mail" in row.last_error and "name" in row.last_error


async def test_lease_lost_mid_run_never_writes_success(
    store: InMemoryTaskStore, clock: ManualClock
) -> None:
    proxy = ProxyStore(store)
    harness = Harness()
    harness.gate("slow")
    (task_id,) = await enqueue(store, new_task(Kind.MAIL, "slow"))
    config = make_config(harness, clock, lease_ttl=timedelta(seconds=3))
    record = await store.claim_due_for_lane(Lane.FALLBACK, 1, "old", timedelta(seconds=3))
    run = asyncio.create_task(run_claimed(proxy, record[0], config), name="test-run")
    await until(lambda: "slow" in harness.started)
    # The database goes away for the old worker: its renewals fail until the lease lapses.
    proxy.renew_error = ConnectionError("db down")
    while not harness.contexts["slow"].lease_lost:
        await clock.wait_for_sleepers(1)
        await clock.advance(0.5)
    assert clock.monotonic() <= 3.5
    ctx = harness.contexts["slow"]
    assert ctx.lease_lost and ctx.cancellation.cancelled
    # Another worker rescues the expired task under a new token.
    (rescued,) = await store.claim_due_for_lane(Lane.FALLBACK, 1, "new", LEASE_TTL)
    assert rescued.rescued and rescued.processing_token != record[0].processing_token
    harness.open("slow")  # the old body finishes "successfully" anyway
    report = await run
    assert report.outcome is ClaimedTaskOutcome.LEASE_LOST
    row = await store.get_task(task_id)
    assert row is not None
    assert row.status is TaskStatus.RUNNING
    assert row.processing_token == rescued.processing_token
    assert row.result_json is None


async def test_refused_success_write_reports_lease_lost(
    store: InMemoryTaskStore, clock: ManualClock
) -> None:
    proxy = ProxyStore(store)
    proxy.refuse_success = True
    await enqueue(store, new_task(Kind.MAIL, "a"))
    report = await run_claimed(
        proxy, await claim_one(store, Lane.FALLBACK), make_config(Harness(), clock)
    )
    assert report.outcome is ClaimedTaskOutcome.LEASE_LOST
    assert report.error is None


async def test_lease_lost_error_from_body_writes_nothing(
    store: InMemoryTaskStore, clock: ManualClock
) -> None:
    harness = Harness()

    class ProductError(Exception):
        pass

    async def wrapped(ctx: TaskExecutionContext, job: Job) -> int:
        try:
            raise TaskLeaseLostError(ctx.task_id, ctx.lease.processing_token)
        except TaskLeaseLostError as exc:
            raise ProductError("storage aborted") from exc

    harness.actions["w"] = wrapped
    (task_id,) = await enqueue(store, new_task(Kind.MAIL, "w"))
    report = await _run_once(store, make_config(harness, clock))
    assert report.outcome is ClaimedTaskOutcome.LEASE_LOST
    row = await store.get_task(task_id)
    assert row is not None and row.status is TaskStatus.RUNNING and row.last_error is None


async def test_shutdown_releases_without_counting_an_attempt(
    store: InMemoryTaskStore, clock: ManualClock
) -> None:
    harness = Harness()

    async def cooperative(ctx: TaskExecutionContext, job: Job) -> int:
        await ctx.sleep(3600)  # raises the shutdown error when the worker stops
        return 1

    harness.actions["c"] = cooperative
    (task_id,) = await enqueue(store, new_task(Kind.MAIL, "c"))
    shutdown = CancellationToken()
    config = make_config(harness, clock, shutdown_token=shutdown)
    run = asyncio.create_task(
        _run_once(store, config),
        name="test-run",
    )
    await until(lambda: "c" in harness.started)
    shutdown.cancel()
    report = await run
    assert report.outcome is ClaimedTaskOutcome.RELEASED
    row = await store.get_task(task_id)
    assert row is not None
    assert (row.status, row.attempt, row.last_error) == (TaskStatus.PENDING, 0, None)
    assert row.processing_token is None


class _Fatal(BaseException):
    """Neither an Exception nor a cancellation: the process is going down."""


@pytest.mark.parametrize(
    ("raised", "status"),
    [
        # The interpreter is exiting: release the task (no attempt counted), then exit.
        (SystemExit, TaskStatus.PENDING),
        (KeyboardInterrupt, TaskStatus.PENDING),
        # Unknown to the worker: nothing is written (the lease lapses, as in a crash).
        (_Fatal, TaskStatus.RUNNING),
    ],
    ids=["system-exit", "keyboard-interrupt", "other-base-exception"],
)
def test_a_body_raising_a_base_exception_propagates_it(
    raised: type[BaseException], status: TaskStatus
) -> None:
    # asyncio re-raises SystemExit and KeyboardInterrupt out of the event loop, so each
    # run gets a loop of its own. A fresh exception per run: one kept by the parameters
    # would keep its traceback's frames (and the execution) alive after the test.
    clock = ManualClock()
    store = InMemoryTaskStore(clock)
    harness = Harness()

    async def exiting(ctx: TaskExecutionContext, job: Job) -> int:
        raise raised

    harness.actions["x"] = exiting

    async def run() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, context: reported.append(context["exception"]))
        (task_id,) = await enqueue(store, new_task(Kind.MAIL, "x"))
        ids.append(task_id)
        record = await claim_one(store, Lane.FALLBACK)
        await run_claimed(store, record, make_config(harness, clock))

    ids: list[int] = []
    reported: list[BaseException] = []
    with pytest.raises(raised):
        asyncio.run(run())
    # The loop stopped on the exception, so nobody read it from the execution's task:
    # that is the one thing reported when the task is collected.
    gc.collect()
    assert all(isinstance(error, raised) for error in reported)
    row = asyncio.run(store.get_task(ids[0]))
    assert row is not None
    assert (row.status, row.attempt, row.last_error) == (status, 0, None)


async def test_shutdown_grace_then_uncooperative_body_is_cancelled(
    store: InMemoryTaskStore, clock: ManualClock
) -> None:
    harness = Harness()
    harness.gate("stubborn")  # never opened: the body ignores its context
    (task_id,) = await enqueue(store, new_task(Kind.MAIL, "stubborn"))
    shutdown = CancellationToken()
    config = make_config(
        harness, clock, shutdown_token=shutdown, shutdown_grace=timedelta(seconds=5)
    )
    run = asyncio.create_task(
        _run_once(store, config),
        name="test-run",
    )
    await until(lambda: "stubborn" in harness.started)
    shutdown.cancel()
    await clock.wait_for_sleepers(2)  # heartbeat + grace timer
    assert not run.done()
    await clock.advance(5)
    report = await run
    assert report.outcome is ClaimedTaskOutcome.RELEASED
    assert "stubborn" in harness.finished
    row = await store.get_task(task_id)
    assert row is not None and (row.status, row.attempt) == (TaskStatus.PENDING, 0)


async def test_caller_cancellation_releases_then_reraises(
    store: InMemoryTaskStore, clock: ManualClock
) -> None:
    harness = Harness()
    harness.gate("g")
    (task_id,) = await enqueue(store, new_task(Kind.MAIL, "g"))
    run = asyncio.create_task(
        _run_once(store, make_config(harness, clock)),
        name="test-run",
    )
    await until(lambda: "g" in harness.started)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    row = await store.get_task(task_id)
    assert row is not None and (row.status, row.attempt) == (TaskStatus.PENDING, 0)


async def test_heartbeat_renews_while_the_body_runs(
    store: InMemoryTaskStore, clock: ManualClock
) -> None:
    proxy = ProxyStore(store)
    harness = Harness()
    harness.gate("long")
    (task_id,) = await enqueue(store, new_task(Kind.MAIL, "long"))
    config = make_config(harness, clock, lease_ttl=timedelta(seconds=3))
    (record,) = await store.claim_due_for_lane(Lane.FALLBACK, 1, "w", timedelta(seconds=3))
    run = asyncio.create_task(run_claimed(proxy, record, config), name="test-run")
    await until(lambda: "long" in harness.started)
    expiries = []
    for _ in range(10):  # 10 s: far beyond the 3 s TTL
        await clock.wait_for_sleepers(1)  # the heartbeat is parked until its next tick
        await clock.advance(1)
        row = await store.get_task(task_id)
        assert row is not None and row.lease_expires_at is not None
        expiries.append(row.lease_expires_at)
    assert proxy.renewals == 10
    assert expiries == sorted(expiries) and len(set(expiries)) == 10
    # Nobody else can claim it: the lease stayed live the whole time.
    assert await store.claim_due_for_lane(Lane.FALLBACK, 1, "other", LEASE_TTL) == []
    harness.open("long")
    assert (await run).outcome is ClaimedTaskOutcome.SUCCEEDED


async def test_store_error_on_final_write_is_reported(
    store: InMemoryTaskStore, clock: ManualClock
) -> None:
    proxy = ProxyStore(store)
    proxy.success_error = ConnectionError("db down")
    (task_id,) = await enqueue(store, new_task(Kind.MAIL, "a"))
    report = await run_claimed(
        proxy, await claim_one(store, Lane.FALLBACK), make_config(Harness(), clock)
    )
    assert report.outcome is ClaimedTaskOutcome.STORE_ERROR
    # The task is rescued once its lease expires.
    await clock.advance(LEASE_TTL + timedelta(seconds=1))
    (rescued,) = await store.claim_due_for_lane(Lane.FALLBACK, 1, "w2", LEASE_TTL)
    assert rescued.id == task_id and rescued.rescued


async def test_unknown_kind_fails_permanently(store: InMemoryTaskStore, clock: ManualClock) -> None:
    from aster_forge.tasks import NewTask

    (task_id,) = await enqueue(store, NewTask(kind="retired-kind", lane=Lane.FALLBACK))
    report = await run_claimed(
        store, await claim_one(store, Lane.FALLBACK), make_config(Harness(), clock)
    )
    assert report.outcome is ClaimedTaskOutcome.FAILED
    row = await store.get_task(task_id)
    assert row is not None and "retired-kind" in (row.last_error or "")


async def test_an_execution_run_inline_writes_its_outcome(
    store: InMemoryTaskStore, clock: ManualClock
) -> None:
    # ClaimedTaskExecution.run() in the caller's own task, with a heartbeat engine the
    # caller owns: the lease is renewed while the body runs and the engine ends after.
    harness = Harness()
    harness.gate("inline")
    (task_id,) = await enqueue(store, new_task(Kind.MAIL, "inline"))
    heartbeat = SharedTaskHeartbeat(store, clock, LEASE_TTL)
    record = await claim_one(store, Lane.FALLBACK)
    execution = ClaimedTaskExecution(
        store, record, make_config(harness, clock), heartbeat=heartbeat
    )
    run = asyncio.create_task(execution.run(), name="test-inline-run")
    await until(lambda: "inline" in harness.started)
    in_body, renewing = execution.in_body, len(heartbeat)
    assert (in_body, renewing) == (True, 1)
    harness.gates["inline"].set()
    report = await run
    assert (report.task_id, report.outcome) == (task_id, ClaimedTaskOutcome.SUCCEEDED)
    assert execution.outcome is ClaimedTaskOutcome.SUCCEEDED and not execution.in_body
    assert len(heartbeat) == 0
    await heartbeat.join()
    row = await store.get_task(task_id)
    assert row is not None and row.status is TaskStatus.SUCCEEDED


async def test_unclaimed_record_is_rejected(store: InMemoryTaskStore, clock: ManualClock) -> None:
    await enqueue(store, new_task(Kind.MAIL, "a"))
    (row,) = store.all_tasks()
    heartbeat = SharedTaskHeartbeat(store, clock, LEASE_TTL)
    with pytest.raises(TaskInvalidValueError):
        ClaimedTaskExecution(store, row, make_config(Harness(), clock), heartbeat=heartbeat)
    assert len(heartbeat) == 0


def test_config_validation(clock: ManualClock) -> None:
    with pytest.raises(TaskInvalidValueError):
        make_config(Harness(), clock, registry=None)
    with pytest.raises(TaskInvalidValueError):
        make_config(Harness(), clock, lease_ttl=timedelta(0))
    with pytest.raises(TaskInvalidValueError):
        make_config(Harness(), clock, shutdown_grace=timedelta(seconds=-1))
    specs = {kind: REGISTRY.spec_for(kind) for kind in Kind}
    config = make_config(Harness(), clock, registry=None, specs=specs)
    assert config.spec_for(Kind.MAIL).kind is Kind.MAIL
