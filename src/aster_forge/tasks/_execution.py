"""Claimed execution: heartbeat, context, product body, then exactly one fenced outcome write."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Callable, Coroutine, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Generic, TypeVar

from .. import _tracing
from .._validation import (
    check_instance,
    check_int_setting,
    check_optional_duration,
    check_stored_duration,
)
from ..runtime import CancellationToken
from ..runtime._internal import (
    Clock,
    SystemClock,
    abandon_task,
    race,
    shielded,
    watch_blocking_steps,
)
from ._completion import TaskCompletionBatcher
from ._context import TaskExecutionContext, enter_task_log_context, leave_task_log_context
from ._control import DEFAULT_MAX_SNOOZES, TaskSnooze, snooze_failure
from ._dispatch import ClaimedTaskOutcome
from ._heartbeat import SharedTaskHeartbeat
from ._lease import TaskLease, TaskLeaseGuard, TaskLeaseTermination, task_lease_termination_of
from ._registry import TaskRegistry, wire_of
from ._retry import (
    TaskErrorClassifier,
    TaskFailureClassification,
    TaskRetryClass,
    TaskRetryPolicy,
    format_task_traceback,
    should_auto_retry,
)
from ._spec import ErasedTaskSpec, task_kind_label
from ._steps import (
    cancel_active_step,
    mark_active_step_failed,
    serialize_task_steps_json,
)
from .errors import TaskCoreError, TaskInvalidValueError, TaskRegistryError
from .protocols import ClaimedTaskStore, ExecutableTaskRecord, TaskTempDirProvider

__all__ = [
    "ClaimedTaskExecution",
    "ClaimedTaskExecutionConfig",
    "ClaimedTaskReport",
]

logger = logging.getLogger("aster_forge.tasks.execution")

StateT = TypeVar("StateT")

#: Stored when a task body cancelled itself although nobody asked it to stop.
UNEXPECTED_CANCEL_MESSAGE = "Task was cancelled unexpectedly"


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
        retry_policy: The backoff for retryable failures of kinds without their own
            ``TaskSpec.retry_policy`` (the attempt budget comes from the row).
        max_snoozes: How many times a task may snooze (``TaskSnooze``); the next
            snooze fails it (manual retry allowed), so an endless snooze is visible.
        error_classifier: A product-wide mapping consulted after the spec's own classifier
            and before the registry fallback; unclassified errors are RETRYABLE, stored
            as ``Type: message`` (at most 2,000 characters) with their traceback (the
            innermost frames, at most 8 KiB) in ``last_traceback``.
        redact_errors: Store and log only the exception's type of an unclassified
            failure: no message, no traceback (for teams whose exception texts may hold
            personal data or secrets). Messages the product chose
            (``ClassifiedTaskError``, classifiers) are kept.
        lease_control_of: Maps an exception from the body to a lease-control stop
            (lost / renewal timeout / shutdown); default :func:`task_lease_termination_of`.
        shutdown_token: The worker's shutdown token; each context's cancellation is its child.
        shutdown_grace: How long a body may keep running after its context was cancelled
            (shutdown or lease loss) before its asyncio task is cancelled.
        temp_dirs: Creates ``ctx.temp_dir()`` lazily; removed after every execution.
        clock: The clock for leases, heartbeats and durations.
        heartbeat_late_wake_threshold: How late a heartbeat tick may wake before a warning
            (default: half an interval).
        blocking_step_threshold: A body step that holds the event loop longer than this
            (measured on ``clock``) logs a WARNING naming the task; ``None`` turns the
            check off.
    """

    state: StateT
    registry: TaskRegistry[StateT, Any, Any] | None = None
    specs: Mapping[Hashable, ErasedTaskSpec[StateT]] | None = None
    lease_ttl: timedelta = timedelta(seconds=30)
    retry_policy: TaskRetryPolicy = field(default_factory=TaskRetryPolicy)
    max_snoozes: int = DEFAULT_MAX_SNOOZES
    error_classifier: TaskErrorClassifier | None = None
    lease_control_of: Callable[[BaseException], TaskLeaseTermination | None] = (
        task_lease_termination_of
    )
    shutdown_token: CancellationToken | None = None
    shutdown_grace: timedelta = timedelta(seconds=10)
    temp_dirs: TaskTempDirProvider | None = None
    clock: Clock = field(default_factory=SystemClock)
    heartbeat_late_wake_threshold: timedelta | None = None
    blocking_step_threshold: timedelta | None = timedelta(milliseconds=250)
    redact_errors: bool = False
    _lookup: dict[Any, ErasedTaskSpec[StateT]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if (self.registry is None) == (self.specs is None):
            raise TaskInvalidValueError(
                "ClaimedTaskExecutionConfig needs exactly one of registry= or specs="
            )
        if self.registry is not None and not self.registry.validated:
            raise TaskRegistryError("task registry is not validated; call validate() first")
        self._check_settings()
        # Resolved once: stores return a kind's wire value, so both spellings are keys.
        if self.registry is not None:
            by_kind = {kind: self.registry.spec_for(kind) for kind in self.registry.kinds()}
            lookup = {**by_kind, **{wire_of(kind): spec for kind, spec in by_kind.items()}}
        else:
            lookup = dict(self.specs or {})
        object.__setattr__(self, "_lookup", lookup)

    def _check_settings(self) -> None:
        """Each setting's type and range, so a wrong one fails here, not in the worker."""
        error, name = TaskInvalidValueError, "ClaimedTaskExecutionConfig"
        check_stored_duration(f"{name}.lease_ttl", self.lease_ttl, allow_zero=False, error=error)
        check_instance(
            f"{name}.retry_policy",
            self.retry_policy,
            TaskRetryPolicy,
            error=error,
            example="TaskRetryPolicy(base_delay=timedelta(seconds=5))",
        )
        check_int_setting(f"{name}.max_snoozes", self.max_snoozes, minimum=0, error=error)
        check_stored_duration(
            f"{name}.shutdown_grace", self.shutdown_grace, allow_zero=True, error=error
        )
        check_optional_duration(
            f"{name}.heartbeat_late_wake_threshold",
            self.heartbeat_late_wake_threshold,
            allow_zero=False,
            error=error,
        )
        check_optional_duration(
            f"{name}.blocking_step_threshold",
            self.blocking_step_threshold,
            allow_zero=False,
            error=error,
        )
        check_instance(f"{name}.redact_errors", self.redact_errors, bool, error=error)

    def spec_for(self, kind: Any) -> ErasedTaskSpec[StateT]:
        """The erased spec for ``kind`` (an enum member, or its wire value as stored).

        Raises:
            TaskRegistryError: When no spec is registered for ``kind``.
        """
        try:
            return self._lookup[kind]
        except (KeyError, TypeError):
            raise TaskRegistryError(f"no task spec registered for kind {kind!r}") from None


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
        retry_delay: The delay of a retry or a snooze (``None`` otherwise).
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


@dataclass(frozen=True, slots=True)
class _Decision:
    """The outcome an execution chose, before the store applied it."""

    outcome: ClaimedTaskOutcome
    result_json: str | None = None
    failure: TaskFailureClassification | None = None
    reraise: BaseException | None = None
    delay: timedelta | None = None
    traceback: str | None = None


_LOST = _Decision(ClaimedTaskOutcome.LEASE_LOST)
_SUCCESS = _Decision(ClaimedTaskOutcome.SUCCEEDED)

#: What a final failure's log line says happens next, per class.
_FINAL = {
    TaskRetryClass.RETRYABLE: "no attempts left",
    TaskRetryClass.MANUAL: "an operator may retry it",
    TaskRetryClass.PERMANENT: "no retry",
}

#: A body cancelled at the end of its grace gets this many loop turns to finish.
_CANCEL_SETTLE_TURNS = 10


class ClaimedTaskExecution:
    """One claimed task's life: context, body, one outcome decision, one fenced write.

    :meth:`start` runs it in a task of its own, the body awaited inline (no second
    task per execution). The heartbeat engine renews the lease while the body runs.
    Once the context is cancelled (shutdown or lost lease) the body gets one
    ``shutdown_grace`` on the injected clock, is then cancelled, and is abandoned (no
    write; the lease is left to expire) if it ignores that for a few loop turns; an
    operator cancel stops it at once. The outcome is decided once (:meth:`_decide`) and
    written once (:meth:`_write`, fenced by the claim's token); :attr:`report` then says
    what the store applied (a refused write is ``LEASE_LOST``), also when the execution
    was cancelled.

    Args:
        store: The execution store (fenced writes, step updates).
        task: The claimed record.
        config: The execution configuration.
        heartbeat: The heartbeat engine the lease is registered with.
        completions: A success batcher (the success write joins other tasks' statement).
        claimed_at: ``config.clock.monotonic()`` read before the claim was sent.
        on_finished: Called once when the execution ends outside its own task: its body
            was abandoned, or (started by :meth:`start`, with ``completions``) its
            success was written by the batcher after the task had ended.
        lane: The lane it was claimed from (its span and log records name it).

    Raises:
        TaskInvalidValueError: When the record carries no processing token or expiry.
    """

    def __init__(
        self,
        store: ClaimedTaskStore,
        task: ExecutableTaskRecord[Any],
        config: ClaimedTaskExecutionConfig[Any],
        *,
        heartbeat: SharedTaskHeartbeat,
        completions: TaskCompletionBatcher | None = None,
        claimed_at: float | None = None,
        on_finished: Callable[[ClaimedTaskExecution], None] | None = None,
        lane: Hashable | None = None,
    ) -> None:
        if task.processing_token is None or task.lease_expires_at is None:
            raise TaskInvalidValueError(
                f"task #{task.id} was not claimed: it has no processing token or lease expiry"
            )
        self._store = store
        self._config = config
        self._heartbeat = heartbeat
        self._completions = completions
        self._on_finished = on_finished
        self._started = config.clock.monotonic()
        self.task = task
        self.attempt = task.attempt + 1
        """The 1-based number of this execution."""
        self.guard = TaskLeaseGuard(
            TaskLease(task.id, task.processing_token, task.lease_expires_at),
            config.lease_ttl,
            shutdown_token=config.shutdown_token,
            clock=config.clock,
            claimed_at=claimed_at,
        )
        self.outcome: ClaimedTaskOutcome | None = None
        """What the store applied, once the outcome was written (or refused)."""
        self._ended: tuple[_Decision, bool, float] | None = None
        self.abandoned = False
        """Whether the body ignored its cancellation and was left running (no write)."""
        self.detached = False
        """Whether the task ended with its success queued (``on_finished`` reports it)."""
        self._task: asyncio.Task[Any] | None = None
        self.body_seconds: float | None = None
        """How long the body ran on the config's clock, once it returned (not the wait
        for the event loop to start it, nor the outcome's write)."""
        self._in_body = False
        self._left_body: asyncio.Future[None] | None = None
        self._stopper: asyncio.Task[None] | None = None
        self._cancel_issued = False
        self._caller_cancelled = False
        self._settled: asyncio.Future[None] | None = None
        self._lane = None if lane is None else task_kind_label(lane)
        self._label = task_kind_label(task.kind)  # for logs and spans, once per attempt
        self._span: Any = None  # the attempt's span while tracing is on

    @property
    def in_body(self) -> bool:
        """Whether the product's body is running right now."""
        return self._in_body

    def start(self) -> asyncio.Task[ClaimedTaskReport | None]:
        """Run :meth:`run` in a new task (named ``aster-forge:task-<id>``) and return it.

        With ``blocking_step_threshold`` set, every step of that task (the body's
        steps, awaited inline) is timed on the config's clock. With a batcher and
        ``on_finished``, a success is queued and the task ends at once (its result is
        then ``None``; ``on_finished`` follows once the write returned).
        """
        config = self._config
        self._started = config.clock.monotonic()  # a claimed task may wait for its slot
        detach = self._completions is not None and self._on_finished is not None
        coro: Coroutine[Any, Any, ClaimedTaskReport | None] = self._run(detach=detach)
        if config.blocking_step_threshold is not None:
            coro = watch_blocking_steps(
                coro,
                threshold=config.blocking_step_threshold,
                on_block=_BlockedStepLog(self.task.id, self.task.kind),
                clock=config.clock,
            )
        self._task = asyncio.create_task(coro, name=f"aster-forge:task-{self.task.id}")
        return self._task

    async def run(self) -> ClaimedTaskReport:
        """Run the task in the caller's task and write its outcome (see the class)."""
        report = await self._run(detach=False)
        assert report is not None  # only a detached run leaves it to the batcher
        return report

    async def _run(self, *, detach: bool) -> ClaimedTaskReport | None:
        task, guard, config = self.task, self.guard, self._config
        if self._task is None:
            self._task = asyncio.current_task()
        self._heartbeat.register(guard)
        if _tracing.API in sys.modules:  # no call at all while OpenTelemetry is not loaded
            self._span = _tracing.start_attempt(
                task_id=task.id,
                kind=self._label,
                lane=self._lane,
                attempt=self.attempt,
                max_attempts=task.max_attempts,
                rescued=task.rescued,
                trace_context=task.trace_context,
                partition=task.partition_key,
            )
        ctx: TaskExecutionContext | None = None
        try:
            try:
                spec = config.spec_for(task.kind)
                ctx = TaskExecutionContext(
                    guard,
                    attempt=self.attempt,
                    store=self._store,
                    steps=spec.stored_steps(task.steps_json),
                    temp_dirs=config.temp_dirs,
                )
                decision = await self._decide(ctx, spec)
            except TaskCoreError as exc:
                # Before the body: unknown kind or unreadable steps. Same input, same failure.
                failure = TaskFailureClassification(TaskRetryClass.PERMANENT, str(exc))
                decision = _Decision(ClaimedTaskOutcome.FAILED, failure=failure)
            except asyncio.CancelledError:
                # Our caller was cancelled: the body has stopped.
                release = _LOST if guard.lease_lost else _Decision(ClaimedTaskOutcome.RELEASED)
                await shielded(
                    self._write(release, ctx), name=f"aster-forge:task-release-{task.id}"
                )
                raise
            if self.abandoned:
                assert self.report is not None  # written when it was abandoned
                return self.report
            if (
                detach
                and self._completions is not None
                and decision.outcome is ClaimedTaskOutcome.SUCCEEDED
                and not (ctx is not None and (ctx.temp_dir_created or ctx.effects is not None))
            ):
                # No need to wait: the batcher calls back once the statement returned.
                self.detached = True
                steps_json = self._steps_json(ctx, _SUCCESS)
                self._completions.succeed_then(
                    guard.lease, decision.result_json, steps_json, self._written
                )
                return None
            report = await shielded(
                self._write(decision, ctx), name=f"aster-forge:task-outcome-{task.id}"
            )
            if decision.reraise is not None:
                raise decision.reraise
            return report
        finally:
            # An abandoned run ends like a crash: its lease lapses, the temp dir sweep
            # collects the dir, and nothing is awaited (it may be closed with its loop).
            # Only an error that ended the run before its outcome leaves one open (a
            # detached success was checked to have none).
            if (
                not self.detached
                and not self.abandoned
                and ctx is not None
                and ctx.effects is not None
            ):
                await shielded(ctx.effects.rollback(), name=f"aster-forge:rollback-{task.id}")
            if not self.abandoned and not self.detached:
                self._heartbeat.unregister(guard)
                if ctx is not None and ctx.temp_dir_created and config.temp_dirs is not None:
                    await shielded(self._remove_temp_dir(), name=f"aster-forge:temp-{task.id}")
                if self._stopper is not None:
                    await asyncio.gather(self._stopper, return_exceptions=True)
            if self._span is not None and not self.detached:
                # Ended without an outcome recorded (an exception no outcome covers).
                span, self._span = self._span, None
                span.end()

    async def _decide(self, ctx: TaskExecutionContext, erased: ErasedTaskSpec[Any]) -> _Decision:
        """Run the body and choose the outcome: the one place outcomes are decided."""
        task, guard, config = self.task, self.guard, self._config
        coro = erased.run_json(ctx, config.state, task.payload_json)
        exc: BaseException | None = None
        cancelled = False
        self._in_body = True
        guard.token.add_cancel_callback(self._on_stop)
        logged = enter_task_log_context(task.id, self._label, self._lane, self.attempt)
        began = config.clock.monotonic()
        try:
            if self._span is None:
                result = await coro
            else:
                with _tracing.current_span(self._span):
                    result = await coro
        except asyncio.CancelledError:
            cancelled = True
        except BaseException as error:  # judged below, SystemExit included
            exc = error
        finally:
            self.body_seconds = config.clock.monotonic() - began
            leave_task_log_context(logged)
            self._in_body = False
            guard.token.remove_cancel_callback(self._on_stop)
            if self._left_body is not None and not self._left_body.done():
                self._left_body.set_result(None)
        if self._cancel_issued and self._task is not None:
            self._task.uncancel()  # our own stop, not the caller's
        if self.abandoned:
            if ctx.effects is not None:  # the stray body's writes are not kept either
                await shielded(ctx.effects.rollback(), name=f"aster-forge:rollback-{task.id}")
            return _LOST  # the stray body ended after all: still nothing to write
        if cancelled and (self._caller_cancelled or (self._task and self._task.cancelling())):
            raise asyncio.CancelledError  # the caller was cancelled (the body has stopped)
        if exc is None and not cancelled and not guard.lease_lost:
            return _Decision(ClaimedTaskOutcome.SUCCEEDED, result_json=result)
        termination = config.lease_control_of(exc) if exc is not None else None
        if guard.lease_lost or termination in (
            TaskLeaseTermination.LOST,
            TaskLeaseTermination.RENEWAL_TIMED_OUT,
        ):
            if not guard.lease_lost:
                guard.mark_lost()
            return _LOST
        if isinstance(exc, KeyboardInterrupt | SystemExit):
            return _Decision(ClaimedTaskOutcome.RELEASED, reraise=exc)
        if exc is not None and not isinstance(exc, Exception):
            raise exc
        if guard.cancel_requested or termination is TaskLeaseTermination.CANCEL_REQUESTED:
            # The body stopped because an operator cancelled it: not a product failure.
            return _Decision(ClaimedTaskOutcome.CANCELLED)
        if guard.token.cancelled or termination is TaskLeaseTermination.SHUTDOWN_REQUESTED:
            # Whatever the body raised while the worker was stopping is not a product failure.
            return _Decision(ClaimedTaskOutcome.RELEASED)
        if exc is None:  # the body cancelled itself although nobody asked it to stop
            failure = TaskFailureClassification(TaskRetryClass.RETRYABLE, UNEXPECTED_CANCEL_MESSAGE)
            return self._failure(failure, erased)
        if isinstance(exc, TaskSnooze):
            over = snooze_failure(task.snooze_count, config.max_snoozes)
            if over is not None:
                return _Decision(ClaimedTaskOutcome.FAILED, failure=over)
            return _Decision(ClaimedTaskOutcome.SNOOZED, delay=exc.delay)
        redact = config.redact_errors
        _tracing.attempt_failed(self._span, exc, redact=redact)
        failure, expected = erased.classify_failure(exc, config.error_classifier, redact=redact)
        # Expected outcomes carry no traceback: the product chose their words, and a codec
        # error's chain holds the payload.
        traced = not expected and not redact
        decision = self._failure(
            failure, erased, traceback=format_task_traceback(exc) if traced else None
        )
        self._log_failure(decision, failure, unexpected=not expected, exc=exc if traced else None)
        return decision

    def _log_failure(
        self,
        decision: _Decision,
        failure: TaskFailureClassification,
        *,
        unexpected: bool,
        exc: BaseException | None,
    ) -> None:
        """One line per failed attempt: what happens next and the stored error text.

        ``exc`` (its traceback) is ``None`` for an expected or a redacted failure.
        """
        task = self.task
        label = self._label
        if decision.outcome is ClaimedTaskOutcome.RETRIED:
            assert decision.delay is not None
            level = logging.WARNING
            then = f"retrying in {decision.delay.total_seconds():.1f}s"
        else:
            # A failure nobody expected that ends the task is what an operator must see.
            level = logging.ERROR if unexpected else logging.WARNING
            then = _FINAL[failure.retry_class]
        logger.log(
            level,
            "task #%s (%s) attempt %s/%s failed (%s, %s): %s",
            task.id,
            label,
            self.attempt,
            task.max_attempts,
            failure.retry_class.value,
            then,
            failure.message,
            exc_info=exc,
            extra={
                "task_id": task.id,
                "task_kind": label,
                "attempt": self.attempt,
                "retry_class": failure.retry_class.value,
            },
        )

    def _on_stop(self) -> None:
        """The context was cancelled while the body runs: stop it after its grace."""
        if self._in_body and self._stopper is None and self._task is not None:
            loop = self._task.get_loop()
            self._left_body = loop.create_future()
            immediate = self.guard.cancel_requested  # an operator cancel gets no grace
            self._stopper = loop.create_task(
                self._stop_body(immediate), name=f"aster-forge:task-stop-{self.task.id}"
            )

    async def _stop_body(self, immediate: bool) -> None:
        if not immediate:
            assert self._left_body is not None
            grace = self._config.shutdown_grace.total_seconds()
            await race(
                self._left_body, seconds=grace, clock=self._config.clock, name="aster-forge:grace"
            )
        if self.in_body:
            await self._cancel_body()

    async def cancel(self) -> None:
        """Cancel the run as its caller would: the body at once, then release and re-raise.

        The release is written (shielded) and the run's task ends cancelled; a body that
        ignores the cancellation for a few loop turns is abandoned (no write).
        """
        self._caller_cancelled = True
        await self._cancel_body()

    async def _cancel_body(self) -> None:
        task = self._task
        if task is None or task.done():
            return
        if not self._in_body:
            task.cancel()  # past the body: the outcome write is shielded
            return
        if not self._cancel_issued:
            self._cancel_issued = True
            task.cancel()
        for _ in range(_CANCEL_SETTLE_TURNS):
            await asyncio.sleep(0)
            if not self.in_body:
                return
        if not self.abandoned:
            self._abandon(task)

    async def settled(self) -> None:
        """Wait until the run has finished or its body was abandoned."""
        task = self._task
        if task is None or task.done() or self.abandoned:
            return
        if self._settled is None:
            self._settled = task.get_loop().create_future()
            task.add_done_callback(self._settle)
        await asyncio.shield(self._settled)

    def _settle(self, _task: object = None) -> None:
        if self._settled is not None and not self._settled.done():
            self._settled.set_result(None)

    def _abandon(self, task: asyncio.Task[Any]) -> None:
        # Write nothing: the lease is no longer renewed, so the task is rescued once it
        # expires (crash semantics); releasing it now could let a new claim run beside
        # the stray body.
        self.abandoned = True
        logger.warning(
            "task #%s ignored cancellation past its grace; abandoned without a write "
            "(its lease expires and the task is rescued)",
            self.task.id,
            extra={"task_id": self.task.id},
        )
        self._heartbeat.unregister(self.guard)
        abandon_task(task)
        self._record(ClaimedTaskOutcome.LEASE_LOST, _LOST, False)
        self._settle()
        if self._on_finished is not None:
            self._on_finished(self)

    def _failure(
        self,
        failure: TaskFailureClassification,
        erased: ErasedTaskSpec[Any],
        *,
        traceback: str | None = None,
    ) -> _Decision:
        if not should_auto_retry(failure.retry_class, self.attempt, self.task.max_attempts):
            return _Decision(ClaimedTaskOutcome.FAILED, failure=failure, traceback=traceback)
        # The kind's own backoff, else the worker's.
        policy = erased.spec.retry_policy or self._config.retry_policy
        delay = policy.delay(self.attempt)
        return _Decision(
            ClaimedTaskOutcome.RETRIED, failure=failure, delay=delay, traceback=traceback
        )

    async def _write(
        self, decision: _Decision, ctx: TaskExecutionContext | None
    ) -> ClaimedTaskReport:
        """Write ``decision`` once, fenced; record and return what the store applied."""
        outcome = ClaimedTaskOutcome.LEASE_LOST if self.guard.lease_lost else decision.outcome
        effects = None if ctx is None else ctx.effects
        written: bool | BaseException
        try:
            steps_json = self._steps_json(ctx, decision)
            if effects is not None and outcome is ClaimedTaskOutcome.SUCCEEDED:
                # The body's writes and the success commit together, or neither does.
                written = await effects.succeed(decision.result_json, steps_json)
            else:
                if effects is not None:
                    await effects.rollback()
                written = await self._store_write(outcome, decision, steps_json)
        except Exception as exc:
            written = exc
        self._record(outcome, decision, written)
        report = self.report
        assert report is not None  # just recorded
        return report

    def _written(self, written: bool | BaseException) -> None:
        """The batcher's answer for a detached success: record it and end the execution."""
        self._record(ClaimedTaskOutcome.SUCCEEDED, _SUCCESS, written)
        self._heartbeat.unregister(self.guard)
        if self._on_finished is not None:
            self._on_finished(self)

    def _record(
        self, outcome: ClaimedTaskOutcome, decision: _Decision, written: bool | BaseException
    ) -> None:
        """The one place what the store applied is recorded (a refused write: lease lost)."""
        task_id = self.task.id
        if isinstance(written, BaseException):
            logger.error(
                "task #%s: storing the outcome failed; the task is rescued after its lease expires",
                task_id,
                exc_info=written,
                extra={"task_id": task_id},
            )
            outcome, written = ClaimedTaskOutcome.STORE_ERROR, False
        elif not written and outcome is not ClaimedTaskOutcome.LEASE_LOST:
            self.guard.mark_lost()
            logger.info(
                "task #%s: the %s write was refused (lease lost); nothing was written",
                task_id,
                outcome.value,
                extra={"task_id": task_id},
            )
            outcome = ClaimedTaskOutcome.LEASE_LOST
        self.outcome = outcome
        applied = written and outcome is not ClaimedTaskOutcome.LEASE_LOST
        self._ended = (decision, applied, self._config.clock.monotonic())
        if self._span is not None:
            span, self._span = self._span, None
            failure = decision.failure if applied else None
            _tracing.end_attempt(
                span,
                outcome=outcome.value,
                failed=failure is not None or outcome is ClaimedTaskOutcome.STORE_ERROR,
                delay=decision.delay,
                error=failure.message if failure is not None else None,
            )

    @staticmethod
    def _steps_json(ctx: TaskExecutionContext | None, decision: _Decision) -> str | None:
        steps = ctx.steps if ctx is not None else ()
        if steps and decision.failure is not None:
            steps = mark_active_step_failed(steps, decision.failure.message)
        elif steps and decision.outcome is ClaimedTaskOutcome.CANCELLED:
            # The task ends here: its step must not read "active" for ever.
            steps = cancel_active_step(steps)
        return serialize_task_steps_json(steps) if steps else None

    @property
    def report(self) -> ClaimedTaskReport | None:
        """What the store applied, once the outcome was written (or refused)."""
        # Built when read: a worker needs only the outcome of a batched success.
        if self._ended is None or self.outcome is None:
            return None
        decision, applied, ended = self._ended
        failure = decision.failure
        return ClaimedTaskReport(
            task_id=self.task.id,
            kind=self.task.kind,
            outcome=self.outcome,
            attempt=self.attempt,
            retry_class=failure.retry_class if failure is not None else None,
            error=failure.message if failure is not None and applied else None,
            retry_delay=decision.delay if applied else None,
            duration=timedelta(seconds=max(ended - self._started, 0.0)),
        )

    async def _store_write(
        self, outcome: ClaimedTaskOutcome, decision: _Decision, steps_json: str | None
    ) -> bool:
        """The one fenced store call for ``outcome``; whether the store applied it."""
        store, lease, failure = self._store, self.guard.lease, decision.failure
        match outcome:
            case ClaimedTaskOutcome.SUCCEEDED if self._completions is not None:
                return await self._completions.succeed(lease, decision.result_json, steps_json)
            case ClaimedTaskOutcome.SUCCEEDED:
                return await store.mark_task_succeeded(lease, decision.result_json, steps_json)
            case ClaimedTaskOutcome.RELEASED:
                return await store.release_task_for_shutdown(lease)
            case ClaimedTaskOutcome.CANCELLED:
                return await store.mark_task_cancelled(lease, steps_json=steps_json)
            case ClaimedTaskOutcome.SNOOZED:
                assert decision.delay is not None
                return await store.mark_task_snoozed(
                    lease, delay=decision.delay, steps_json=steps_json
                )
            case ClaimedTaskOutcome.RETRIED:
                assert failure is not None and decision.delay is not None
                return await store.mark_task_retry(
                    lease,
                    delay=decision.delay,
                    error=failure.message,
                    steps_json=steps_json,
                    count_attempt=True,
                    traceback=decision.traceback,
                )
            case ClaimedTaskOutcome.FAILED:
                assert failure is not None
                return await store.mark_task_failed(
                    lease,
                    error=failure.message,
                    steps_json=steps_json,
                    manual_retry=failure.retry_class.can_manual_retry(),
                    traceback=decision.traceback,
                )
        return False  # LEASE_LOST: nothing to write

    async def _remove_temp_dir(self) -> None:
        assert self._config.temp_dirs is not None
        try:
            await self._config.temp_dirs.remove_task_temp_dir(self.guard.lease)
        except Exception:
            logger.warning(
                "failed to remove the temp dir of task #%s",
                self.task.id,
                exc_info=True,
                extra={"task_id": self.task.id},
            )


class _BlockedStepLog:
    """Logs a step of one task's body that held the event loop (``watch_blocking_steps``).

    Not a bound method of the execution: the task's coroutine wrapper holds it, so the
    execution would sit in a reference cycle freed only by the garbage collector. Not a
    ``functools.partial`` either: that is two objects (its arguments' tuple) per task.
    """

    __slots__ = ("kind", "task_id")

    def __init__(self, task_id: int, kind: Any) -> None:
        self.task_id = task_id
        self.kind = kind

    def __call__(self, seconds: float) -> None:
        label = task_kind_label(self.kind)
        logger.warning(
            "task #%s (%s) blocked the event loop for %.3fs without yielding; await its "
            "I/O, or make the body a plain def (run in a worker thread)",
            self.task_id,
            label,
            seconds,
            extra={"task_id": self.task_id, "task_kind": label, "blocked_seconds": seconds},
        )


async def cancel_executions(executions: Sequence[ClaimedTaskExecution]) -> None:
    """Cancel every run as its caller would, and wait until each ended or was abandoned."""
    await asyncio.gather(*(execution.cancel() for execution in executions))
    await asyncio.gather(*(execution.settled() for execution in executions))
