"""LeasedScheduledRuntimeConfig: singleton workers and scheduled jobs on the lease holder.

Every instance runs the same config; the one holding the runtime lease runs the
declared workers and one scheduled catalog runner per job in one
:class:`BackgroundTasks` group, which stops as a whole on lease loss or shutdown.
Each firing is also claimed in the catalog, so even a brief two-holder window (lease
handover, split brain) runs it once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Generic, TypeVar

from ..runtime import (
    CancellationToken,
    RuntimeLeaseConfig,
    RuntimeLeaseStore,
    new_runtime_lease_owner_id,
    run_runtime_lease_supervisor,
)
from ..runtime._internal import Clock, SystemClock, validate_lease_identifier
from ._background import DEFAULT_SHUTDOWN_GRACE, BackgroundTasks
from ._schedule import (
    DEFAULT_SCHEDULED_CLAIM_TTL,
    RecordOutcome,
    ScheduledPeriodicTask,
    ScheduledTaskRun,
    run_scheduled_periodic_task,
)
from ._schedule_types import validate_scheduled_duration
from ._schedules import Schedule
from .errors import PeriodicTaskConfigError
from .protocols import ScheduledTaskStore

__all__ = ["LeasedScheduledRuntimeConfig", "ScheduledJob", "SingletonWorker"]

OutcomeT = TypeVar("OutcomeT")

SingletonWorker = Callable[[CancellationToken], Awaitable[object]]
"""A long-running loop needing only the lease; it returns once its token is cancelled."""

_SYSTEM_CLOCK = SystemClock()
_PROBE_OWNER = "probe"


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
