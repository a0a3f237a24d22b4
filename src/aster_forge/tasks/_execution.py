"""Claimed execution: heartbeat, context, product body, then exactly one fenced outcome write."""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Generic, TypeVar

from ..runtime import CancellationToken, Clock, SystemClock
from ._completion import TaskCompletionBatcher
from ._context import TaskExecutionContext
from ._dispatch_stats import ClaimedTaskOutcome
from ._heartbeat import SharedTaskHeartbeat, run_task_heartbeat
from ._lease import TaskLease, TaskLeaseGuard, TaskLeaseTermination
from ._registry import TaskRegistry
from ._retry import (
    ClassifiedTaskError,
    TaskErrorClassifier,
    TaskFailureClassification,
    TaskRetryClass,
    TaskRetryPolicy,
    should_auto_retry,
)
from ._spec import ErasedTaskSpec, task_kind_label
from ._steps import (
    TaskStepInfo,
    mark_active_step_failed,
    parse_task_steps_json,
    serialize_task_steps_json,
)
from .errors import (
    TaskCodecError,
    TaskCoreError,
    TaskInvalidValueError,
    TaskRegistryError,
    is_task_lease_lost,
    is_task_lease_renewal_timed_out,
    is_task_worker_shutdown_requested,
)
from .protocols import ClaimedTaskStore, ExecutableTaskRecord, TaskTempDirProvider

__all__ = [
    "ClaimedTaskExecutionConfig",
    "ClaimedTaskReport",
    "run_claimed_task_batch_with_store",
    "run_claimed_task_with_store",
    "task_lease_termination_of",
]

logger = logging.getLogger("aster_forge.tasks.execution")

StateT = TypeVar("StateT")
_T = TypeVar("_T")

#: Stored when a task body cancelled itself although nobody asked it to stop.
UNEXPECTED_CANCEL_MESSAGE = "Task was cancelled unexpectedly"


def task_lease_termination_of(exc: BaseException) -> TaskLeaseTermination | None:
    """Which lease-control stop ``exc`` is (or wraps via ``raise ... from``), if any.

    The default for :attr:`ClaimedTaskExecutionConfig.lease_control_of`; a product whose
    error type hides the cause chain supplies its own mapping.
    """
    if is_task_lease_lost(exc):
        return TaskLeaseTermination.LOST
    if is_task_lease_renewal_timed_out(exc):
        return TaskLeaseTermination.RENEWAL_TIMED_OUT
    if is_task_worker_shutdown_requested(exc):
        return TaskLeaseTermination.SHUTDOWN_REQUESTED
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimedTaskExecutionConfig(Generic[StateT]):
    """How claimed tasks are executed.

    Give either ``registry`` (a validated :class:`TaskRegistry`) or ``specs`` (erased
    specs keyed by kind).

    Attributes:
        state: The application state every task body receives.
        registry: The validated registry the kind's spec is looked up in.
        specs: Erased specs keyed by kind, instead of a registry.
        lease_ttl: The claim's lease duration; the heartbeat renews every third of it.
        retry_policy: The backoff for retryable failures (attempt budget comes from the row).
        error_classifier: A product-wide mapping consulted after the spec's own classifier
            and before the registry fallback; unclassified errors are RETRYABLE with a
            fixed message naming only the exception type.
        lease_control_of: Maps an exception from the body to a lease-control stop
            (lost / renewal timeout / shutdown); default :func:`task_lease_termination_of`.
        shutdown_token: The worker's shutdown token; each context's cancellation is its child.
        shutdown_grace: How long a body may keep running after its context was cancelled
            (shutdown or lease loss) before its asyncio task is cancelled.
        temp_dirs: Creates ``ctx.temp_dir()`` lazily; removed after every execution.
        clock: The clock for leases, heartbeats and durations.
        heartbeat_late_wake_threshold: Passed to :func:`run_task_heartbeat`.
    """

    state: StateT
    registry: TaskRegistry[StateT, Any, Any] | None = None
    specs: Mapping[Hashable, ErasedTaskSpec[StateT]] | None = None
    lease_ttl: timedelta = timedelta(seconds=30)
    retry_policy: TaskRetryPolicy = field(default_factory=TaskRetryPolicy)
    error_classifier: TaskErrorClassifier | None = None
    lease_control_of: Callable[[BaseException], TaskLeaseTermination | None] = (
        task_lease_termination_of
    )
    shutdown_token: CancellationToken | None = None
    shutdown_grace: timedelta = timedelta(seconds=10)
    temp_dirs: TaskTempDirProvider | None = None
    clock: Clock = field(default_factory=SystemClock)
    heartbeat_late_wake_threshold: timedelta | None = None

    def __post_init__(self) -> None:
        if (self.registry is None) == (self.specs is None):
            raise TaskInvalidValueError(
                "ClaimedTaskExecutionConfig needs exactly one of registry= or specs="
            )
        if self.registry is not None and not self.registry.validated:
            raise TaskRegistryError("task registry is not validated; call validate() first")
        if self.lease_ttl <= timedelta(0):
            raise TaskInvalidValueError("ClaimedTaskExecutionConfig.lease_ttl must be positive")
        if self.shutdown_grace < timedelta(0):
            raise TaskInvalidValueError(
                "ClaimedTaskExecutionConfig.shutdown_grace must not be negative"
            )

    def spec_for(self, kind: Any) -> ErasedTaskSpec[StateT]:
        """The erased spec for ``kind`` (an enum member, or its wire value as stored).

        Raises:
            TaskRegistryError: When no spec is registered for ``kind``.
        """
        if self.registry is not None:
            kind_type = self.registry.kind_type
            if not isinstance(kind, kind_type):
                # Stores return the kind's wire value; map it back to the enum member.
                try:
                    kind = kind_type(kind)
                except ValueError:
                    raise TaskRegistryError(f"no task spec registered for kind {kind!r}") from None
            return self.registry.spec_for(kind)
        assert self.specs is not None
        try:
            return self.specs[kind]
        except KeyError:
            raise TaskRegistryError(f"no task spec registered for {kind!r}") from None


@dataclass(frozen=True, slots=True)
class ClaimedTaskReport:
    """What happened to one claimed task.

    Attributes:
        task_id: The task.
        kind: The task's kind.
        outcome: Which (fenced) write happened, or why none did.
        attempt: The 1-based number of this execution.
        retry_class: The failure's class (``None`` unless the body failed).
        error: The error text written to the row (``None`` when none was).
        retry_delay: The backoff delay of a retry (``None`` otherwise).
        duration: From the start of execution to the end of the final write.
    """

    task_id: int
    kind: Any
    outcome: ClaimedTaskOutcome
    attempt: int
    retry_class: TaskRetryClass | None = None
    error: str | None = None
    retry_delay: timedelta | None = None
    duration: timedelta = timedelta(0)

    @property
    def duration_seconds(self) -> float:
        """:attr:`duration` in seconds."""
        return self.duration.total_seconds()


class _Plan(enum.Enum):
    SUCCEED = "succeed"
    RETRY = "retry"
    FAIL = "fail"
    RELEASE = "release"
    NOTHING = "nothing"


@dataclass(slots=True)
class _Decision:
    plan: _Plan
    result_json: str | None = None
    failure: TaskFailureClassification | None = None
    reraise: BaseException | None = None


def _lease_of(task: ExecutableTaskRecord[Any]) -> TaskLease:
    if task.processing_token is None or task.lease_expires_at is None:
        raise TaskInvalidValueError(
            f"task #{task.id} was not claimed: it has no processing token or lease expiry"
        )
    return TaskLease(task.id, task.processing_token, task.lease_expires_at)


async def _shielded(awaitable: Awaitable[_T], name: str) -> _T:
    """Run ``awaitable`` to completion even if the caller is cancelled, then re-raise."""

    async def runner() -> _T:
        return await awaitable

    task = asyncio.create_task(runner(), name=name)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        if not task.done():
            await asyncio.wait({task})
        raise


async def _settled(future: asyncio.Future[bool]) -> bool:
    """The batched write's result; when cancelled, wait for it first, then re-raise."""
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        if not future.done():
            await asyncio.wait({future})
        if not future.cancelled():
            future.exception()  # retrieved: the caller is gone, the log has it
        raise


async def run_claimed_task_batch_with_store(
    store: ClaimedTaskStore,
    tasks: Sequence[ExecutableTaskRecord[Any]],
    config: ClaimedTaskExecutionConfig[StateT],
    *,
    claimed_at: float | None = None,
) -> list[ClaimedTaskReport]:
    """Execute claimed tasks concurrently; see :func:`run_claimed_task_with_store`.

    Every record is checked to be claimed before any body starts.

    Args:
        store: The heartbeat and execution store.
        tasks: Records returned by a lane claim (each with its processing token).
        config: The execution configuration.
        claimed_at: ``config.clock.monotonic()`` read before the claim was sent (the
            local lease deadline starts there); default: now.

    Returns:
        One report per task, in input order.

    Raises:
        TaskInvalidValueError: When a record carries no processing token or expiry.
    """
    for task in tasks:
        _lease_of(task)
    async with asyncio.TaskGroup() as group:
        runs = [
            group.create_task(
                run_claimed_task_with_store(store, task, config, claimed_at=claimed_at),
                name=f"aster-forge:claimed-task-{task.id}",
            )
            for task in tasks
        ]
    return [run.result() for run in runs]


async def run_claimed_task_with_store(
    store: ClaimedTaskStore,
    task: ExecutableTaskRecord[Any],
    config: ClaimedTaskExecutionConfig[StateT],
    *,
    claimed_at: float | None = None,
    heartbeat: SharedTaskHeartbeat | None = None,
    completions: TaskCompletionBatcher | None = None,
) -> ClaimedTaskReport:
    """Run one claimed task through its whole lifecycle.

    Starts the heartbeat, builds the :class:`TaskExecutionContext`, calls the product body
    through the erased spec, then writes exactly one fenced outcome:

    * success - only when the lease still holds; a lost lease writes nothing;
    * retry - a RETRYABLE failure with attempts left: pending again after the policy's
      delay, counting the attempt, active step marked failed;
    * failed - PERMANENT or MANUAL failures, and RETRYABLE ones with no attempts left:
      active step marked failed with the product's message;
    * release - the worker shut down (or the body stopped because of it): pending
      again, due now, attempt not counted.

    Unclassified exceptions are RETRYABLE with a fixed message naming the exception type;
    the traceback goes to the log only. The final write is shielded from cancellation;
    if the caller is cancelled the body is cancelled, the task released, and the
    cancellation re-raised. The temp dir (if the body created one) is removed after
    every outcome.

    Args:
        store: The heartbeat and execution store.
        task: The claimed record.
        config: The execution configuration.
        claimed_at: ``config.clock.monotonic()`` read before the claim was sent.
        heartbeat: A shared heartbeat (one loop, batched renewals for many tasks, same
            per-task contract) to register the lease with instead of starting a
            heartbeat task for this task alone.
        completions: A success batcher: the success write joins other tasks' in one
            fenced statement (still only reported once stored).

    Raises:
        TaskInvalidValueError: When the record carries no processing token or expiry.
    """
    clock = config.clock
    started = clock.monotonic()
    guard = TaskLeaseGuard(
        _lease_of(task),
        config.lease_ttl,
        shutdown_token=config.shutdown_token,
        clock=clock,
        claimed_at=claimed_at,
    )
    attempt = task.attempt + 1
    stop_heartbeat = CancellationToken()
    own_heartbeat: asyncio.Task[None] | None = None
    if heartbeat is not None:
        heartbeat.register(guard)
    else:
        own_heartbeat = asyncio.create_task(
            run_task_heartbeat(
                store,
                guard,
                stop=stop_heartbeat,
                late_wake_threshold=config.heartbeat_late_wake_threshold,
            ),
            name=f"aster-forge:task-heartbeat-{task.id}",
        )
    ctx: TaskExecutionContext | None = None
    try:
        try:
            steps = _initial_steps(task)
            ctx = TaskExecutionContext(
                guard, attempt=attempt, store=store, steps=steps, temp_dirs=config.temp_dirs
            )
            decision = await _run_body(task, ctx, config)
        except TaskCoreError as exc:
            # Before the body: unknown kind or unreadable steps. Same input, same failure.
            decision = _Decision(
                _Plan.FAIL, failure=TaskFailureClassification(TaskRetryClass.PERMANENT, str(exc))
            )
        except asyncio.CancelledError:
            # Our caller was cancelled: the body is already cancelled and joined.
            decision = _Decision(_Plan.NOTHING if guard.lease_lost else _Plan.RELEASE)
            await _shielded(
                _write(store, task, guard, ctx, decision, attempt, config, started),
                name=f"aster-forge:task-release-{task.id}",
            )
            raise
        if completions is not None and decision.plan is _Plan.SUCCEED:
            # Cancellation-safe without a helper task: the batcher owns the write and
            # _write waits for its result even when cancelled.
            report = await _write(
                store, task, guard, ctx, decision, attempt, config, started, completions
            )
        else:
            report = await _shielded(
                _write(store, task, guard, ctx, decision, attempt, config, started),
                name=f"aster-forge:task-outcome-{task.id}",
            )
        if decision.reraise is not None:
            raise decision.reraise
        return report
    finally:
        if heartbeat is not None:
            heartbeat.unregister(guard)
        if own_heartbeat is not None:
            stop_heartbeat.cancel()
            await asyncio.gather(own_heartbeat, return_exceptions=True)
        if ctx is not None and ctx.temp_dir_created and config.temp_dirs is not None:
            await _shielded(
                _remove_temp_dir(config.temp_dirs, guard.lease),
                name=f"aster-forge:task-temp-remove-{task.id}",
            )


def _initial_steps(task: ExecutableTaskRecord[Any]) -> tuple[TaskStepInfo, ...]:
    if task.steps_json is None:
        return ()
    return parse_task_steps_json(task.steps_json)


async def _remove_temp_dir(provider: TaskTempDirProvider, lease: TaskLease) -> None:
    try:
        await provider.remove_task_temp_dir(lease)
    except Exception:
        logger.warning(
            "failed to remove the temp dir of task #%s",
            lease.task_id,
            exc_info=True,
            extra={"task_id": lease.task_id},
        )


async def _run_body(
    task: ExecutableTaskRecord[Any],
    ctx: TaskExecutionContext,
    config: ClaimedTaskExecutionConfig[StateT],
) -> _Decision:
    erased = config.spec_for(task.kind)
    guard = ctx.lease_guard
    body = asyncio.create_task(
        erased.run_json(ctx, config.state, task.payload_json), name=f"aster-forge:task-{task.id}"
    )
    try:
        await _wait_body(body, guard.token, config)
    except asyncio.CancelledError:
        body.cancel()
        # Bounded: a body that ignores cancellation must not hold the caller's cancellation.
        await asyncio.wait({body}, timeout=config.shutdown_grace.total_seconds())
        if not body.done():
            _abandon(body, task.id)
        raise
    if not body.done():
        # The body ignored its cancellation past the grace: abandon it and write nothing.
        # The lease is not renewed any more, so the task is rescued once it expires (crash
        # semantics); releasing it now could let a new claim run beside the stray body.
        _abandon(body, task.id)
        return _Decision(_Plan.NOTHING)
    if body.cancelled():
        if guard.lease_lost:
            return _Decision(_Plan.NOTHING)
        if guard.token.cancelled:
            return _Decision(_Plan.RELEASE)
        return _failure_decision(
            task,
            TaskFailureClassification(TaskRetryClass.RETRYABLE, UNEXPECTED_CANCEL_MESSAGE),
            attempt=ctx.attempt,
        )
    exc = body.exception()
    if exc is None:
        if guard.lease_lost:
            return _Decision(_Plan.NOTHING)
        return _Decision(_Plan.SUCCEED, result_json=body.result())
    termination = config.lease_control_of(exc)
    if guard.lease_lost or termination in (
        TaskLeaseTermination.LOST,
        TaskLeaseTermination.RENEWAL_TIMED_OUT,
    ):
        if not guard.lease_lost:
            guard.mark_lost()
        return _Decision(_Plan.NOTHING)
    if isinstance(exc, KeyboardInterrupt | SystemExit):
        return _Decision(_Plan.RELEASE, reraise=exc)
    if guard.token.cancelled or termination is TaskLeaseTermination.SHUTDOWN_REQUESTED:
        # Whatever the body raised while the worker was stopping is not a product failure.
        return _Decision(_Plan.RELEASE)
    classification = _classify(erased, exc, config.error_classifier)
    logger.warning(
        "task #%s (%s) attempt %s failed: %s",
        task.id,
        task_kind_label(task.kind),
        ctx.attempt,
        classification.retry_class.value,
        exc_info=exc,
        extra={"task_id": task.id, "task_kind": task_kind_label(task.kind)},
    )
    return _failure_decision(task, classification, attempt=ctx.attempt)


async def _wait_body(
    body: asyncio.Task[Any], stop: CancellationToken, config: ClaimedTaskExecutionConfig[Any]
) -> None:
    if not body.done() and not stop.cancelled:
        # One loop turn first: a body that finishes without awaiting needs no stop waiter.
        await asyncio.sleep(0)
    if not body.done():
        stopper = asyncio.create_task(stop.wait(), name="aster-forge:task-stop-wait")
        try:
            await asyncio.wait({body, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
            await asyncio.gather(stopper, return_exceptions=True)
    if not body.done():
        # Cancelled (shutdown or lease loss): give the body its grace to stop cooperatively.
        timer = asyncio.create_task(
            config.clock.sleep(config.shutdown_grace.total_seconds()),
            name="aster-forge:task-grace",
        )
        try:
            await asyncio.wait({body, timer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            timer.cancel()
            await asyncio.gather(timer, return_exceptions=True)
    if not body.done():
        body.cancel()
        # Bounded on the injected clock: a body that swallows the cancellation is abandoned
        # by the caller after a second grace instead of hanging the worker's shutdown.
        timer = asyncio.create_task(
            config.clock.sleep(config.shutdown_grace.total_seconds()),
            name="aster-forge:task-cancel-grace",
        )
        try:
            await asyncio.wait({body, timer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            timer.cancel()
            await asyncio.gather(timer, return_exceptions=True)


#: Bodies that ignored cancellation past their grace; referenced until they end.
_ABANDONED: set[asyncio.Task[Any]] = set()


def _abandon(body: asyncio.Task[Any], task_id: int) -> None:
    logger.warning(
        "task #%s ignored cancellation past its grace; abandoned without a write "
        "(its lease expires and the task is rescued)",
        task_id,
        extra={"task_id": task_id},
    )
    _ABANDONED.add(body)
    body.add_done_callback(_reap_abandoned)


def _reap_abandoned(body: asyncio.Task[Any]) -> None:
    _ABANDONED.discard(body)
    if not body.cancelled():
        body.exception()  # retrieved: the outcome of an abandoned body is never used


def _classify(
    erased: ErasedTaskSpec[Any], exc: BaseException, extra: TaskErrorClassifier | None
) -> TaskFailureClassification:
    if not isinstance(exc, Exception):
        # A BaseException escaping product code (a "panic"): retryable, fixed text.
        return TaskFailureClassification(
            TaskRetryClass.RETRYABLE,
            f"Task failed with an unexpected error ({type(exc).__name__})",
        )
    if extra is not None and not isinstance(exc, ClassifiedTaskError | TaskCodecError):
        for classifier in (erased.spec.error_classifier, extra):
            chosen = classifier(exc) if classifier is not None else None
            if chosen is not None:
                return chosen
    return erased.classify(exc)


def _failure_decision(
    task: ExecutableTaskRecord[Any], classification: TaskFailureClassification, *, attempt: int
) -> _Decision:
    retry = should_auto_retry(classification.retry_class, attempt, task.max_attempts)
    return _Decision(_Plan.RETRY if retry else _Plan.FAIL, failure=classification)


async def _write(
    store: ClaimedTaskStore,
    task: ExecutableTaskRecord[Any],
    guard: TaskLeaseGuard,
    ctx: TaskExecutionContext | None,
    decision: _Decision,
    attempt: int,
    config: ClaimedTaskExecutionConfig[Any],
    started: float,
    completions: TaskCompletionBatcher | None = None,
) -> ClaimedTaskReport:
    lease = guard.lease
    steps = ctx.steps if ctx is not None else ()
    failure = decision.failure
    delay: timedelta | None = None
    outcome: ClaimedTaskOutcome
    try:
        if decision.plan is _Plan.NOTHING or guard.lease_lost:
            outcome = ClaimedTaskOutcome.LEASE_LOST
            written = False
        elif decision.plan is _Plan.SUCCEED:
            outcome = ClaimedTaskOutcome.SUCCEEDED
            steps_json = serialize_task_steps_json(steps) if steps else None
            if completions is not None:
                written = await _settled(
                    completions.succeed(lease, decision.result_json, steps_json)
                )
            else:
                written = await store.mark_task_succeeded(lease, decision.result_json, steps_json)
        elif decision.plan is _Plan.RELEASE:
            outcome = ClaimedTaskOutcome.RELEASED
            written = await store.release_task_for_shutdown(lease)
        else:
            assert failure is not None
            failed_steps = (
                serialize_task_steps_json(mark_active_step_failed(steps, failure.message))
                if steps
                else None
            )
            if decision.plan is _Plan.RETRY:
                outcome = ClaimedTaskOutcome.RETRIED
                delay = config.retry_policy.delay(attempt)
                written = await store.mark_task_retry(
                    lease,
                    delay=delay,
                    error=failure.message,
                    steps_json=failed_steps,
                    count_attempt=True,
                )
            else:
                outcome = ClaimedTaskOutcome.FAILED
                written = await store.mark_task_failed(
                    lease,
                    error=failure.message,
                    steps_json=failed_steps,
                    manual_retry=failure.retry_class.can_manual_retry(),
                )
        if not written and outcome is not ClaimedTaskOutcome.LEASE_LOST:
            guard.mark_lost()
            logger.info(
                "task #%s: the %s write was refused (lease lost); nothing was written",
                task.id,
                outcome.value,
                extra={"task_id": task.id},
            )
            outcome = ClaimedTaskOutcome.LEASE_LOST
    except Exception:
        logger.exception(
            "task #%s: storing the outcome failed; the task is rescued after its lease expires",
            task.id,
            extra={"task_id": task.id},
        )
        outcome = ClaimedTaskOutcome.STORE_ERROR
    written_ok = outcome not in (ClaimedTaskOutcome.LEASE_LOST, ClaimedTaskOutcome.STORE_ERROR)
    return ClaimedTaskReport(
        task_id=task.id,
        kind=task.kind,
        outcome=outcome,
        attempt=attempt,
        retry_class=failure.retry_class if failure is not None else None,
        error=failure.message if failure is not None and written_ok else None,
        retry_delay=delay if written_ok else None,
        duration=timedelta(seconds=max(config.clock.monotonic() - started, 0.0)),
    )
