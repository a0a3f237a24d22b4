"""Running the scheduled catalog: one execution per firing across instances.

:class:`LeasedScheduledRuntimeConfig` runs a product's singleton workers and one
catalog runner per :class:`ScheduledJob` on the instance holding a runtime lease, in
one :class:`BackgroundTasks` group stopped as a whole on lease loss or shutdown. Each
firing is also claimed in the catalog, so even a brief two-holder window (lease
handover, split brain) runs it once:

``ensure row -> claim the due firing -> run the body (renewing the claim) -> record
the outcome -> complete (ownership-checked), which advances next_run_at``.

Catch-up policy: a run covers every firing up to the moment it was claimed, so the
next firing is the first one after the claim. For an interval the firings are a grid
``first_run_at + k * interval``; for cron they are the expression's instants. Firings
missed while every instance was down (or while a body overran its period) therefore
run once, not once per missed firing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Generic, TypeVar

from ..runtime import (
    CancellationToken,
    RuntimeLeaseConfig,
    RuntimeLeaseStore,
    new_runtime_lease_owner_id,
    run_runtime_lease_supervisor,
)
from ..runtime._internal import (
    NEVER_EXPIRES,
    Clock,
    SystemClock,
    sleep_or_cancelled,
    validate_lease_identifier,
)
from ._background import DEFAULT_SHUTDOWN_GRACE, BackgroundTasks
from ._dedupe import scheduled_task_dedupe_key
from ._schedules import (
    DEFAULT_SCHEDULED_CLAIM_TTL,
    CronSchedule,
    Schedule,
    ScheduledPeriodicTask,
    ScheduledTaskClaim,
    ScheduledTaskOutcome,
    ScheduledTaskRun,
    scheduled_claim_renew_interval,
    validate_scheduled_duration,
)
from .errors import PeriodicTaskConfigError
from .protocols import ScheduledOutcomeConvertible, ScheduledTaskStore

__all__ = [
    "SCHEDULED_TASK_RAISED",
    "LeasedScheduledRuntimeConfig",
    "ScheduledJob",
    "SingletonWorker",
    "run_scheduled_claim_renewal_loop",
    "run_scheduled_periodic_task",
]

logger = logging.getLogger("aster_forge.tasks.schedule")

OutcomeT = TypeVar("OutcomeT")

SCHEDULED_TASK_RAISED = "scheduled task raised an exception"
"""The catalog error text for a body that raised (the exception's message is not copied)."""

_MAX_ERROR_RETRY = 5.0
_MAX_MISS_POLL = 1.0
_MIN_MISS_POLL = 0.01
_NEVER_PERIOD = 86_400.0
_COMPLETE_ATTEMPTS = 3
_SYSTEM_CLOCK = SystemClock()
_PROBE_OWNER = "probe"


class _NoOutcome:
    """Sentinel: the exception hook failed, so there is no product outcome to record."""


_NO_OUTCOME = _NoOutcome()


RecordOutcome = Callable[[ScheduledTaskRun, OutcomeT, timedelta], Awaitable[None]]
"""Persists one firing's product outcome (history row, metrics) with the body's duration."""


@dataclass(frozen=True, slots=True)
class _Hooks(Generic[OutcomeT]):
    fn: Callable[[ScheduledTaskRun], Awaitable[OutcomeT]]
    record_outcome: RecordOutcome[OutcomeT] | None
    on_exception: Callable[[Exception], OutcomeT] | None
    kind: Any


async def run_scheduled_claim_renewal_loop(
    store: ScheduledTaskStore,
    claim: ScheduledTaskClaim,
    claim_ttl: timedelta,
    stop_token: CancellationToken,
    *,
    clock: Clock = _SYSTEM_CLOCK,
) -> bool:
    """Renew ``claim`` every :func:`scheduled_claim_renew_interval` until ``stop_token``.

    ``False`` from the store means the ownership predicate no longer matches (another
    runtime claimed the firing): the loop stops renewing and returns, but never
    touches the body; completion's ownership check is the last line of defence. A
    store error is logged at WARNING and retried at the next tick.

    Returns:
        ``True`` when stopped by ``stop_token``, ``False`` when ownership was lost.
    """
    every = scheduled_claim_renew_interval(claim_ttl).total_seconds()
    extra = {"namespace": claim.namespace, "scheduled_task": claim.name, "owner_id": claim.owner_id}
    while True:
        if await sleep_or_cancelled(clock, stop_token, every):
            return True
        try:
            renewed = await store.renew_scheduled_task_claim(claim, claim_ttl)
        except Exception:
            logger.warning(
                "scheduled task %s/%s: claim renewal failed; retrying next tick",
                claim.namespace,
                claim.name,
                exc_info=True,
                extra=extra,
            )
            continue
        if not renewed:
            logger.warning(
                "scheduled task %s/%s: claim no longer ours; "
                "stop renewing (the body keeps running)",
                claim.namespace,
                claim.name,
                extra=extra,
            )
            return False


async def run_scheduled_periodic_task(
    store: ScheduledTaskStore,
    task: ScheduledPeriodicTask,
    fn: Callable[[ScheduledTaskRun], Awaitable[OutcomeT]],
    *,
    shutdown_token: CancellationToken,
    record_outcome: RecordOutcome[OutcomeT] | None = None,
    on_exception: Callable[[Exception], OutcomeT] | None = None,
    clock: Clock = _SYSTEM_CLOCK,
    kind: Any = None,
) -> None:
    """Run ``task``'s firings that this instance claims, until ``shutdown_token``.

    Products normally declare a :class:`~aster_forge.tasks.ScheduledJob` on a
    :class:`~aster_forge.tasks.LeasedScheduledRuntimeConfig`, which runs this on the
    lease holder. Steps: ensure the catalog row; claim the due firing; only when
    claimed, run ``fn`` while renewing the claim every
    :func:`scheduled_claim_renew_interval`; map an exception through
    ``on_exception`` (logged at ERROR); ``record_outcome(run, outcome, duration)``;
    complete the firing, which releases the claim and sets the next firing (see the
    module's catch-up policy). Store errors are logged and retried. A crash mid-body
    stops renewal, so another instance claims the firing after ``claim_ttl``.

    The catalog records the outcome: a :class:`ScheduledTaskOutcome` (or a
    :class:`ScheduledOutcomeConvertible`) as given, any other value as succeeded,
    and an exception nobody mapped as failed with :data:`SCHEDULED_TASK_RAISED`.

    ``shutdown_token`` ends the loop between firings; a running body is not interrupted
    by it (the group cancels it after its grace). ``kind`` is passed on in
    :attr:`ScheduledTaskRun.kind`.

    Raises:
        PeriodicTaskConfigError: When a hook is not callable.
    """
    for what, hook in (
        ("fn", fn),
        ("record_outcome", record_outcome),
        ("on_exception", on_exception),
    ):
        if not callable(hook) and (hook is not None or what == "fn"):
            raise PeriodicTaskConfigError(f"scheduled task {task.name!r}: {what} is not callable")
    hooks = _Hooks(fn, record_outcome, on_exception, kind)
    schedule = task.schedule
    period = _nominal_period(schedule, clock.now())
    error_retry = min(period, _MAX_ERROR_RETRY)
    extra = {"namespace": task.namespace, "scheduled_task": task.name, "owner_id": task.owner_id}
    while True:
        try:
            await store.ensure_scheduled_task(task.namespace, task.name, schedule)
            break
        except Exception:
            logger.warning(
                "scheduled task %s/%s: ensuring the catalog row failed; retrying",
                task.namespace,
                task.name,
                exc_info=True,
                extra=extra,
            )
            if await sleep_or_cancelled(clock, shutdown_token, error_retry):
                return
    # store clock minus local clock, learned from each claim (the server may be skewed).
    offset = timedelta(0)
    while not shutdown_token.cancelled:
        try:
            claim = await store.claim_scheduled_task(
                task.namespace, task.name, task.owner_id, task.claim_ttl
            )
        except Exception:
            logger.warning(
                "scheduled task %s/%s: claim failed; retrying",
                task.namespace,
                task.name,
                exc_info=True,
                extra=extra,
            )
            if await sleep_or_cancelled(clock, shutdown_token, error_retry):
                return
            continue
        if claim is None:
            wait = await _miss_wait(store, task, clock.now() + offset, period)
        else:
            offset = claim.claimed_at - clock.now()
            claimed_mono = clock.monotonic()
            following = schedule.following_run_at(claim.scheduled_at, claim.claimed_at)
            await _execute(store, task, claim, hooks, following, shutdown_token, clock)
            store_now = claim.claimed_at + timedelta(seconds=clock.monotonic() - claimed_mono)
            wait = max((following - store_now).total_seconds(), 0.0)
        if await sleep_or_cancelled(clock, shutdown_token, wait):
            return


def _nominal_period(schedule: Schedule, now: datetime) -> float:
    """The schedule's period in seconds (for cron: the gap between its next two instants).

    It bounds the poll and retry waits; it is never used to compute a firing.
    """
    if isinstance(schedule, CronSchedule):
        first = schedule.next_after(now)
        second = schedule.next_after(first) if first < NEVER_EXPIRES else first
        gap = (second - first).total_seconds()
        # An expression that never fires again still polls, rarely (a changed row).
        return gap if gap > 0 else _NEVER_PERIOD
    return schedule.effective_every.total_seconds()


async def _miss_wait(
    store: ScheduledTaskStore, task: ScheduledPeriodicTask, now: datetime, interval: float
) -> float:
    """How long to wait after a claim found nothing to do (not due, or someone else's)."""
    floor = min(max(interval / 20, _MIN_MISS_POLL), _MAX_MISS_POLL)
    try:
        record = await store.get_scheduled_task(task.namespace, task.name)
    except Exception:
        return interval
    if record is None:
        return floor
    target = record.next_run_at
    if record.claimed_by is not None and record.claim_expires_at is not None:
        target = max(target, record.claim_expires_at)
    return min(max((target - now).total_seconds(), floor), interval)


async def _execute(
    store: ScheduledTaskStore,
    task: ScheduledPeriodicTask,
    claim: ScheduledTaskClaim,
    hooks: _Hooks[OutcomeT],
    following: datetime,
    shutdown_token: CancellationToken,
    clock: Clock,
) -> None:
    """Run one claimed firing: body under renewal, record, complete."""
    extra = {"namespace": task.namespace, "scheduled_task": task.name, "owner_id": task.owner_id}
    run = ScheduledTaskRun(
        task=task,
        claim=claim,
        dedupe_key=scheduled_task_dedupe_key(task.namespace, task.name, claim.scheduled_at),
        shutdown_token=shutdown_token,
        kind=hooks.kind,
    )
    stop_renewal = CancellationToken()
    renewer = asyncio.create_task(
        run_scheduled_claim_renewal_loop(store, claim, task.claim_ttl, stop_renewal, clock=clock),
        name=f"aster-forge:scheduled-renew:{task.name}",
    )
    started = clock.monotonic()
    raised = False
    try:
        try:
            outcome: OutcomeT | _NoOutcome = await hooks.fn(run)
        except Exception as exc:
            raised = True
            logger.error(
                "scheduled task %s/%s raised %s",
                task.namespace,
                task.name,
                type(exc).__name__,
                exc_info=exc,
                extra=extra,
            )
            try:
                outcome = _NO_OUTCOME if hooks.on_exception is None else hooks.on_exception(exc)
            except Exception:
                logger.exception(
                    "scheduled task %s/%s: on_exception hook raised",
                    task.namespace,
                    task.name,
                    extra=extra,
                )
                outcome = _NO_OUTCOME
    except BaseException:
        # Cancelled (group abort) or interrupted: leave the claim to expire so another
        # instance can run the firing after claim_ttl; the dedupe key guards the re-run.
        renewer.cancel()
        await asyncio.gather(renewer, return_exceptions=True)
        raise
    stop_renewal.cancel()
    await renewer
    duration = timedelta(seconds=max(clock.monotonic() - started, 0.0))
    if hooks.record_outcome is not None and not isinstance(outcome, _NoOutcome):
        try:
            await hooks.record_outcome(run, outcome, duration)
        except Exception:
            logger.exception(
                "scheduled task %s/%s: recording the outcome failed",
                task.namespace,
                task.name,
                extra=extra,
            )
    catalog = _catalog_outcome(outcome, raised, duration)
    # Completion must not be abandoned half-way by a group stop: shield it.
    await asyncio.shield(_complete(store, task, claim, catalog, following, clock))


def _catalog_outcome(outcome: object, raised: bool, duration: timedelta) -> ScheduledTaskOutcome:
    result: ScheduledTaskOutcome | None = None
    if isinstance(outcome, ScheduledTaskOutcome):
        result = outcome
    elif isinstance(outcome, ScheduledOutcomeConvertible):
        try:
            result = outcome.scheduled_task_outcome()
        except Exception:
            logger.exception("scheduled_task_outcome() of %s raised", type(outcome).__name__)
        if not isinstance(result, ScheduledTaskOutcome):
            result = None
    if result is None:
        if raised:
            return ScheduledTaskOutcome.failed(SCHEDULED_TASK_RAISED, duration)
        return ScheduledTaskOutcome.succeeded(duration)
    if result.duration is None:
        return ScheduledTaskOutcome(result.status, result.error, duration)
    return result


async def _complete(
    store: ScheduledTaskStore,
    task: ScheduledPeriodicTask,
    claim: ScheduledTaskClaim,
    outcome: ScheduledTaskOutcome,
    following: datetime,
    clock: Clock,
) -> None:
    extra = {"namespace": task.namespace, "scheduled_task": task.name, "owner_id": task.owner_id}
    retry = min(scheduled_claim_renew_interval(task.claim_ttl).total_seconds(), 1.0)
    for attempt in range(1, _COMPLETE_ATTEMPTS + 1):
        try:
            completed = await store.complete_scheduled_task(claim, outcome, next_run_at=following)
        except Exception:
            logger.warning(
                "scheduled task %s/%s: completion failed (attempt %d of %d)",
                claim.namespace,
                claim.name,
                attempt,
                _COMPLETE_ATTEMPTS,
                exc_info=True,
                extra=extra,
            )
            if attempt < _COMPLETE_ATTEMPTS:
                await clock.sleep(retry)
            continue
        if not completed:
            logger.warning(
                "scheduled task %s/%s: the firing was claimed by another runtime; "
                "this run's completion was not recorded",
                claim.namespace,
                claim.name,
                extra=extra,
            )
        return
    logger.error(
        "scheduled task %s/%s: could not complete the firing; "
        "it can run again once its claim expires",
        claim.namespace,
        claim.name,
        extra=extra,
    )


# --- the lease holder's group ---

SingletonWorker = Callable[[CancellationToken], Awaitable[object]]
"""A long-running loop needing only the lease; it returns once its token is cancelled."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduledJob(Generic[OutcomeT]):
    """One scheduled catalog entry: when it fires and what runs once per firing.

    Attributes:
        kind: The job's catalog name: a ``str`` or a string enum member (its value is
            the name); handed to the body as :attr:`ScheduledTaskRun.kind`.
        schedule: An :class:`~aster_forge.tasks.IntervalSchedule` or a
            :class:`~aster_forge.tasks.CronSchedule`.
        fn: The body ``fn(run)``; ``run.dedupe_key`` identifies the firing.

    Raises:
        PeriodicTaskConfigError: A ``kind`` that is not a ``str``, or ``fn``
            not callable.

    Example:
        >>> from aster_forge.tasks import IntervalSchedule
        >>> async def cleanup(run: ScheduledTaskRun) -> None: ...
        >>> ScheduledJob(kind="cleanup", schedule=IntervalSchedule(every=timedelta(hours=1)),
        ...              fn=cleanup).name
        'cleanup'
    """

    kind: str
    schedule: Schedule
    fn: Callable[[ScheduledTaskRun], Awaitable[OutcomeT]]

    def __post_init__(self) -> None:
        if not isinstance(self.kind, str):
            raise PeriodicTaskConfigError(
                f"scheduled kind {self.kind!r} must be a str or a string enum member"
            )
        if not callable(self.fn):
            raise PeriodicTaskConfigError(f"scheduled job {self.name!r}: fn is not callable")

    @property
    def name(self) -> str:
        """The catalog name (a string enum member's value)."""
        return str.__str__(self.kind)


@dataclass(frozen=True, slots=True, kw_only=True)
class LeasedScheduledRuntimeConfig(Generic[OutcomeT]):
    """Run a product's singleton workers and scheduled jobs on the instance holding a lease.

    :meth:`run` contends for ``lease_id``; the holder runs every worker and job in one
    :class:`BackgroundTasks` group, stopped as a whole on lease loss or shutdown.
    Everything is checked when the config is built.

    Attributes:
        namespace: The catalog namespace of the jobs (<= 64 characters).
        lease_id: The runtime lease guarding the group.
        lease_store: Where the lease lives (e.g. ``RuntimeLeaseDbStore``).
        scheduled_store: The catalog (e.g. ``ScheduledTaskDbStore``).
        jobs: The scheduled jobs, one catalog row each.
        workers: Singleton loops by name, ``worker(token)``.
        on_exception: Maps an exception escaping a job's body to the product's outcome.
        record_outcome: ``record_outcome(run, outcome, duration)`` persists it.
        claim_ttl: How long a firing's claim lasts without renewal (renewed every
            third while the body runs).
        lease_ttl: The runtime lease TTL.
        lease_renew_interval: How often the holder renews the lease (< ``lease_ttl``).
        lease_standby_retry_interval: How often a standby instance tries to acquire it.
        shutdown_grace: How long the group's workers get to stop before being cancelled.

    Raises:
        ScheduledTaskValueError: An invalid namespace, job name or duration.
        RuntimeLeaseConfigError: An invalid lease id or inconsistent lease durations.
        PeriodicTaskConfigError: A duplicate name, or a hook that is not callable.

    Example:
        >>> from aster_forge.tasks import IntervalSchedule
        >>> from aster_forge.testing import InMemoryRuntimeLeaseStore, InMemoryScheduledTaskStore
        >>> async def cleanup(run: ScheduledTaskRun) -> None:
        ...     print(run.dedupe_key)
        >>> config = LeasedScheduledRuntimeConfig(
        ...     namespace="shop",
        ...     lease_id="shop.background_tasks",
        ...     lease_store=InMemoryRuntimeLeaseStore(),
        ...     scheduled_store=InMemoryScheduledTaskStore(),
        ...     jobs=[ScheduledJob(kind="cleanup", schedule=IntervalSchedule(
        ...         every=timedelta(hours=1)), fn=cleanup)],
        ...     claim_ttl=timedelta(seconds=60),
        ... )
        >>> config.worker_names()
        ('scheduled:cleanup',)
    """

    namespace: str
    lease_id: str
    lease_store: RuntimeLeaseStore
    scheduled_store: ScheduledTaskStore
    jobs: Sequence[ScheduledJob[OutcomeT]] = ()
    workers: Mapping[str, SingletonWorker] = field(default_factory=dict)
    on_exception: Callable[[Exception], OutcomeT] | None = None
    record_outcome: RecordOutcome[OutcomeT] | None = None
    claim_ttl: timedelta = DEFAULT_SCHEDULED_CLAIM_TTL
    lease_ttl: timedelta = timedelta(seconds=30)
    lease_renew_interval: timedelta = timedelta(seconds=10)
    lease_standby_retry_interval: timedelta = timedelta(seconds=5)
    shutdown_grace: timedelta = DEFAULT_SHUTDOWN_GRACE

    def __post_init__(self) -> None:
        object.__setattr__(self, "jobs", tuple(self.jobs))
        object.__setattr__(self, "workers", dict(self.workers))
        validate_lease_identifier("lease_id", self.lease_id)
        self.lease_config(_PROBE_OWNER)
        validate_scheduled_duration("shutdown_grace", self.shutdown_grace, allow_zero=True)
        for what, hook in (
            ("on_exception", self.on_exception),
            ("record_outcome", self.record_outcome),
        ):
            if hook is not None and not callable(hook):
                raise PeriodicTaskConfigError(f"{what} is not callable")
        for name, worker in self.workers.items():
            if not isinstance(name, str) or not name.strip() or not callable(worker):
                raise PeriodicTaskConfigError(
                    f"worker {name!r}: give a non-empty name and a callable worker(token)"
                )
        for job in self.jobs:
            if not isinstance(job, ScheduledJob):
                raise PeriodicTaskConfigError(
                    f"jobs must be ScheduledJob values, got {type(job).__name__}"
                )
            # Checks the namespace, the name, the claim TTL and the firing's dedupe key.
            self._task(job, _PROBE_OWNER)
        names = self.worker_names()
        for name in names:
            if names.count(name) > 1:
                raise PeriodicTaskConfigError(f"{name!r} is declared twice")

    def worker_names(self) -> tuple[str, ...]:
        """The names the workers and jobs run under in the group, in order."""
        return (*self.workers, *(f"scheduled:{job.name}" for job in self.jobs))

    def lease_config(self, owner_id: str) -> RuntimeLeaseConfig:
        """The runtime lease configuration for ``owner_id``.

        Raises:
            RuntimeLeaseConfigError: When the renew interval is not shorter than the TTL.
        """
        return RuntimeLeaseConfig(
            self.lease_id,
            owner_id,
            ttl=self.lease_ttl,
            renew_interval=self.lease_renew_interval,
            standby_retry_interval=self.lease_standby_retry_interval,
        )

    def _task(self, job: ScheduledJob[OutcomeT], owner_id: str) -> ScheduledPeriodicTask:
        return ScheduledPeriodicTask(
            namespace=self.namespace,
            name=job.name,
            owner_id=owner_id,
            schedule=job.schedule,
            claim_ttl=self.claim_ttl,
        )

    async def run(
        self,
        shutdown_token: CancellationToken,
        *,
        clock: Clock = _SYSTEM_CLOCK,
        owner_id: str | None = None,
    ) -> None:
        """Run the group whenever this process holds the lease, until ``shutdown_token``.

        Returns once ``shutdown_token`` is cancelled, the group stopped and the lease
        was released. Store errors are logged and retried, never raised.

        Args:
            shutdown_token: Process shutdown (e.g. the ``AsterRuntime`` token).
            clock: Time source (``ManualClock`` in tests).
            owner_id: This process's owner id (lease holder and claim owner); default a
                fresh :func:`~aster_forge.runtime.new_runtime_lease_owner_id`.
        """
        owner = owner_id if owner_id is not None else new_runtime_lease_owner_id()
        tasks = [(job, self._task(job, owner)) for job in self.jobs]

        async def start(leased_token: CancellationToken) -> BackgroundTasks:
            group = BackgroundTasks(
                leased_token, name=self.lease_id, shutdown_grace=self.shutdown_grace, clock=clock
            )
            for name, worker in self.workers.items():
                group.spawn(name, worker)
            for job, task in tasks:
                group.spawn(f"scheduled:{job.name}", self._runner(job, task, clock))
            return group

        async def stop(group: BackgroundTasks) -> None:
            await group.shutdown()

        await run_runtime_lease_supervisor(
            self.lease_store, self.lease_config(owner), shutdown_token, start, stop, clock=clock
        )

    def _runner(
        self, job: ScheduledJob[OutcomeT], task: ScheduledPeriodicTask, clock: Clock
    ) -> SingletonWorker:
        async def runner(token: CancellationToken) -> None:
            await run_scheduled_periodic_task(
                self.scheduled_store,
                task,
                job.fn,
                shutdown_token=token,
                record_outcome=self.record_outcome,
                on_exception=self.on_exception,
                clock=clock,
                kind=job.kind,
            )

        return runner
