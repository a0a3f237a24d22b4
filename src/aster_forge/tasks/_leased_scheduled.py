"""LeasedScheduledRuntimeConfig: the product entry for singleton workers and scheduled tasks.

One call wires the runtime lease, a lease-scoped :class:`BackgroundTasks` group, a
process-unique owner id, the scheduled catalog store and claim TTL, the exception
mapping and the outcome hook; the product only declares its workers and schedules.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Generic, TypeVar

from ..runtime import (
    CancellationToken,
    RuntimeLeaseConfig,
    RuntimeLeaseStore,
    new_runtime_lease_owner_id,
)
from ..runtime._internal import Clock, SystemClock, validate_lease_identifier, validate_lease_ttl
from ._background import DEFAULT_SHUTDOWN_GRACE, BackgroundTasks
from ._leased import run_leased_background_tasks
from ._schedule import (
    DEFAULT_SCHEDULED_CLAIM_TTL,
    ScheduledPeriodicTask,
    ScheduledTaskRun,
    run_scheduled_periodic_task,
)
from ._schedule_types import validate_scheduled_duration, validate_scheduled_identifier
from ._schedules import Schedule
from .errors import ScheduledRuntimeDeclarationError
from .protocols import ScheduledTaskStore

__all__ = [
    "LeasedScheduledRuntime",
    "LeasedScheduledRuntimeConfig",
    "LeasedScheduledRuntimeSettings",
]

StateT = TypeVar("StateT")
OutcomeT = TypeVar("OutcomeT")

_SYSTEM_CLOCK = SystemClock()

ScheduledBody = Callable[[StateT, ScheduledTaskRun], Awaitable[OutcomeT]]
WorkerBody = Callable[[StateT, CancellationToken], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class LeasedScheduledRuntimeSettings:
    """The durations of a :class:`LeasedScheduledRuntimeConfig` (set through its builder methods).

    Attributes:
        claim_ttl: How long a scheduled firing's claim lasts without renewal.
        lease_ttl: The runtime lease TTL.
        lease_renew_interval: How often the holder renews the lease (< ``lease_ttl``).
        lease_standby_retry_interval: How often a standby instance tries to acquire it.
        shutdown_grace: How long the group's workers get to stop before being cancelled.
    """

    claim_ttl: timedelta = DEFAULT_SCHEDULED_CLAIM_TTL
    lease_ttl: timedelta = timedelta(seconds=30)
    lease_renew_interval: timedelta = timedelta(seconds=10)
    lease_standby_retry_interval: timedelta = timedelta(seconds=5)
    shutdown_grace: timedelta = DEFAULT_SHUTDOWN_GRACE


@dataclass(frozen=True, slots=True)
class LeasedScheduledRuntimeConfig(Generic[StateT, OutcomeT]):
    """Run a product's singleton workers and scheduled tasks on the instance holding a lease.

    Builder methods (:meth:`claim_ttl`, :meth:`lease_ttl`, :meth:`lease_renew_interval`,
    :meth:`lease_standby_retry_interval`, :meth:`shutdown_grace`) return new configs.
    :meth:`run` generates a process-unique owner id, calls ``declare(runtime)`` once,
    then contends for ``lease_id``; the holder runs every declared worker and scheduled
    task in one :class:`BackgroundTasks` group, which stops as a whole on lease loss
    or shutdown. Scheduled firings are additionally claimed in ``scheduled_store``, so
    even a brief two-holder window (lease handover, split brain) runs each firing once.

    Attributes:
        namespace: The catalog namespace of the scheduled tasks (<= 64 characters).
        lease_id: The runtime lease guarding the group.
        lease_store: Where the lease lives (e.g. ``RuntimeLeaseDbStore``).
        scheduled_store: The catalog (e.g. ``ScheduledTaskDbStore``).
        state: The product state handed to every worker and body.
        on_panic: Maps an exception escaping a scheduled body to the product's outcome.
        record_outcome: ``record_outcome(state, run, outcome, duration)`` persists it.
        settings: The durations (use the builder methods).

    Raises:
        ScheduledTaskValueError: On an invalid namespace.
        RuntimeLeaseConfigError: On an invalid lease id.
        ScheduledRuntimeDeclarationError: When a hook is not callable.

    Example:
        >>> from aster_forge.testing import InMemoryRuntimeLeaseStore, InMemoryScheduledTaskStore
        >>> async def record(state: None, run: ScheduledTaskRun, outcome: str, took: timedelta):
        ...     print(run.dedupe_key, outcome)
        >>> config = LeasedScheduledRuntimeConfig(
        ...     "shop", "shop.background_tasks", InMemoryRuntimeLeaseStore(),
        ...     InMemoryScheduledTaskStore(), state=None,
        ...     on_panic=lambda exc: "failed", record_outcome=record,
        ... ).claim_ttl(timedelta(seconds=60)).lease_ttl(timedelta(seconds=20))
        >>> config.settings.claim_ttl, config.settings.lease_ttl
        (datetime.timedelta(seconds=60), datetime.timedelta(seconds=20))
    """

    namespace: str
    lease_id: str
    lease_store: RuntimeLeaseStore
    scheduled_store: ScheduledTaskStore
    state: StateT
    on_panic: Callable[[Exception], OutcomeT]
    record_outcome: Callable[[StateT, ScheduledTaskRun, OutcomeT, timedelta], Awaitable[None]]
    settings: LeasedScheduledRuntimeSettings = field(
        default_factory=LeasedScheduledRuntimeSettings, kw_only=True
    )

    def __post_init__(self) -> None:
        validate_scheduled_identifier("namespace", self.namespace)
        validate_lease_identifier("lease_id", self.lease_id)
        for what in ("on_panic", "record_outcome"):
            if not callable(getattr(self, what)):
                raise ScheduledRuntimeDeclarationError(f"{what} is not callable")

    def _with(self, **changes: timedelta) -> LeasedScheduledRuntimeConfig[StateT, OutcomeT]:
        return dataclasses.replace(self, settings=dataclasses.replace(self.settings, **changes))

    def claim_ttl(self, ttl: timedelta) -> LeasedScheduledRuntimeConfig[StateT, OutcomeT]:
        """Return a copy with the scheduled claim TTL set (renewed every ttl/3 while running)."""
        return self._with(claim_ttl=validate_scheduled_duration("claim_ttl", ttl))

    def lease_ttl(self, ttl: timedelta) -> LeasedScheduledRuntimeConfig[StateT, OutcomeT]:
        """Return a copy with the runtime lease TTL set."""
        return self._with(lease_ttl=validate_lease_ttl("lease_ttl", ttl))

    def lease_renew_interval(
        self, interval: timedelta
    ) -> LeasedScheduledRuntimeConfig[StateT, OutcomeT]:
        """Return a copy with the lease renewal interval set (must end up < lease TTL)."""
        return self._with(lease_renew_interval=validate_lease_ttl("lease_renew_interval", interval))

    def lease_standby_retry_interval(
        self, interval: timedelta
    ) -> LeasedScheduledRuntimeConfig[StateT, OutcomeT]:
        """Return a copy with the standby acquisition retry interval set."""
        return self._with(
            lease_standby_retry_interval=validate_lease_ttl(
                "lease_standby_retry_interval", interval
            )
        )

    def shutdown_grace(self, grace: timedelta) -> LeasedScheduledRuntimeConfig[StateT, OutcomeT]:
        """Return a copy with the group's shutdown grace set (zero: cancel at once)."""
        return self._with(
            shutdown_grace=validate_scheduled_duration("shutdown_grace", grace, allow_zero=True)
        )

    def lease_config(self, owner_id: str) -> RuntimeLeaseConfig:
        """The runtime lease configuration for ``owner_id``.

        Raises:
            RuntimeLeaseConfigError: When the renew interval is not shorter than the TTL.
        """
        s = self.settings
        return RuntimeLeaseConfig(
            self.lease_id,
            owner_id,
            ttl=s.lease_ttl,
            renew_interval=s.lease_renew_interval,
            standby_retry_interval=s.lease_standby_retry_interval,
        )

    async def run(
        self,
        shutdown_token: CancellationToken,
        declare: Callable[[LeasedScheduledRuntime[StateT, OutcomeT]], object],
        *,
        clock: Clock = _SYSTEM_CLOCK,
        owner_id: str | None = None,
    ) -> None:
        """Declare the group, then run it whenever this process holds the lease.

        Returns once ``shutdown_token`` is cancelled and the group stopped and the
        lease was released.

        Args:
            shutdown_token: Process shutdown (e.g. the ``AsterRuntime`` token).
            declare: Called once with a :class:`LeasedScheduledRuntime`; calls its
                :meth:`~LeasedScheduledRuntime.worker` and
                :meth:`~LeasedScheduledRuntime.scheduled` (may be ``async``).
            clock: Time source (``ManualClock`` in tests).
            owner_id: This process's owner id; default a fresh
                :func:`~aster_forge.runtime.new_runtime_lease_owner_id`.

        Raises:
            ScheduledRuntimeDeclarationError: Invalid or duplicate declarations.
            RuntimeLeaseConfigError: Inconsistent lease durations.
        """
        owner = owner_id if owner_id is not None else new_runtime_lease_owner_id()
        lease_config = self.lease_config(owner)
        runtime = LeasedScheduledRuntime(self, owner)
        declared = declare(runtime)
        if inspect.isawaitable(declared):
            await declared
        runtime._close()

        def spawn(leased_token: CancellationToken) -> BackgroundTasks:
            return runtime._spawn(leased_token, clock)

        await run_leased_background_tasks(
            self.lease_store, lease_config, shutdown_token, spawn, clock=clock
        )


@dataclass(frozen=True, slots=True)
class _Scheduled(Generic[StateT, OutcomeT]):
    kind: object
    task: ScheduledPeriodicTask
    fn: ScheduledBody[StateT, OutcomeT]


class LeasedScheduledRuntime(Generic[StateT, OutcomeT]):
    """What ``declare(runtime)`` receives: declares workers and scheduled tasks.

    Given by :meth:`LeasedScheduledRuntimeConfig.run`; closed once ``declare`` returns.
    """

    def __init__(
        self, config: LeasedScheduledRuntimeConfig[StateT, OutcomeT], owner_id: str
    ) -> None:
        self._config = config
        self._owner_id = owner_id
        self._workers: list[tuple[str, WorkerBody[StateT]]] = []
        self._scheduled: list[_Scheduled[StateT, OutcomeT]] = []
        self._closed = False

    @property
    def owner_id(self) -> str:
        """This process's owner id (lease holder and scheduled claim owner)."""
        return self._owner_id

    @property
    def state(self) -> StateT:
        """The product state."""
        return self._config.state

    def worker_names(self) -> tuple[str, ...]:
        """The names the declared workers and scheduled tasks run under, in order."""
        return tuple(n for n, _ in self._workers) + tuple(
            _scheduled_worker_name(s.task.name) for s in self._scheduled
        )

    def _check_open(self) -> None:
        if self._closed:
            raise ScheduledRuntimeDeclarationError(
                "declarations must be made inside declare(); the group is already declared"
            )

    def worker(self, fn: WorkerBody[StateT], *, name: str | None = None) -> None:
        """Declare a long-running worker ``fn(state, token)`` needing only the lease.

        Suits loops like a task worker (``TaskWorker.run``) that do not map to
        catalog firings. The worker must return once ``token`` is
        cancelled (lease loss or shutdown).

        Raises:
            ScheduledRuntimeDeclarationError: Not callable, or a duplicate name.
        """
        self._check_open()
        if not callable(fn):
            raise ScheduledRuntimeDeclarationError("worker fn is not callable")
        worker_name = name if name is not None else getattr(fn, "__name__", "")
        if not isinstance(worker_name, str) or not worker_name.strip():
            raise ScheduledRuntimeDeclarationError(f"worker name must be non-empty, got {name!r}")
        if worker_name in self.worker_names():
            raise ScheduledRuntimeDeclarationError(
                f"a worker named {worker_name!r} is declared twice"
            )
        self._workers.append((worker_name, fn))

    def scheduled(
        self,
        kind: object,
        interval: timedelta | None = None,
        initial_delay: timedelta | None = None,
        fn: ScheduledBody[StateT, OutcomeT] | None = None,
        *,
        schedule: Schedule | None = None,
    ) -> None:
        """Declare a scheduled task ``fn(state, run)`` with a catalog row per ``kind``.

        Two shapes: the seed's ``scheduled(kind, interval, initial_delay, fn)``, or
        ``scheduled(kind, schedule=CronSchedule(...) | IntervalSchedule(...), fn=fn)``.

        Args:
            kind: The runtime-task kind; its wire value (``kind.as_str()``, a ``str``,
                or a string enum's value) is the catalog name.
            interval: The period (zero is clamped to one second); not with ``schedule``.
            initial_delay: Delay of the first firing when the catalog row is created
                (with ``interval``; an :class:`~aster_forge.tasks.IntervalSchedule`
                carries its own).
            fn: The body; ``run.dedupe_key`` identifies the firing.
            schedule: A cron or interval schedule, instead of ``interval``.

        Raises:
            ScheduledRuntimeDeclarationError: Unknown kind shape, duplicate kind,
                ``fn`` missing or not callable, or not exactly one of ``interval``
                and ``schedule``.
            ScheduledTaskValueError: An invalid duration or name.
            PeriodicTaskConfigError: A negative interval, or ``initial_delay`` beside
                ``schedule``.
        """
        self._check_open()
        if fn is None or not callable(fn):
            raise ScheduledRuntimeDeclarationError("scheduled fn is not callable")
        if (interval is None) == (schedule is None):
            raise ScheduledRuntimeDeclarationError(
                f"scheduled task {kind!r}: give exactly one of interval and schedule"
            )
        wire = _wire_name(kind)
        if any(s.task.name == wire for s in self._scheduled):
            raise ScheduledRuntimeDeclarationError(f"scheduled task {wire!r} is declared twice")
        task = ScheduledPeriodicTask(
            namespace=self._config.namespace,
            name=wire,
            interval=interval,
            owner_id=self._owner_id,
            claim_ttl=self._config.settings.claim_ttl,
            initial_delay=initial_delay,
            schedule=schedule,
        )
        self._scheduled.append(_Scheduled(kind, task, fn))

    def _close(self) -> None:
        self._closed = True

    def _spawn(self, leased_token: CancellationToken, clock: Clock) -> BackgroundTasks:
        config = self._config
        group = BackgroundTasks(
            leased_token,
            name=config.lease_id,
            shutdown_grace=config.settings.shutdown_grace,
            clock=clock,
        )
        state = config.state
        for name, body in self._workers:
            group.spawn(name, _bind_worker(body, state))
        for scheduled in self._scheduled:
            group.spawn(
                _scheduled_worker_name(scheduled.task.name),
                _bind_scheduled(config, scheduled, clock),
            )
        return group


def _scheduled_worker_name(wire: str) -> str:
    return f"scheduled:{wire}"


def _bind_worker(
    body: WorkerBody[StateT], state: StateT
) -> Callable[[CancellationToken], Awaitable[Any]]:
    async def worker(token: CancellationToken) -> Any:
        return await body(state, token)

    return worker


def _bind_scheduled(
    config: LeasedScheduledRuntimeConfig[StateT, OutcomeT],
    scheduled: _Scheduled[StateT, OutcomeT],
    clock: Clock,
) -> Callable[[CancellationToken], Awaitable[None]]:
    state = config.state

    async def body(run: ScheduledTaskRun) -> OutcomeT:
        return await scheduled.fn(state, run)

    async def record(run: ScheduledTaskRun, outcome: OutcomeT, duration: timedelta) -> None:
        await config.record_outcome(state, run, outcome, duration)

    async def worker(token: CancellationToken) -> None:
        await run_scheduled_periodic_task(
            config.scheduled_store,
            scheduled.task,
            body,
            record,
            config.on_panic,
            shutdown_token=token,
            clock=clock,
            kind=scheduled.kind,
        )

    return worker


def _wire_name(kind: object) -> str:
    as_str = getattr(kind, "as_str", None)
    if callable(as_str):
        value = as_str()
    elif isinstance(kind, enum.Enum) and isinstance(kind.value, str):
        value = kind.value
    elif isinstance(kind, str):
        value = str.__str__(kind)
    else:
        raise ScheduledRuntimeDeclarationError(
            f"scheduled kind {kind!r} has no wire value (as_str(), a str or a string enum)"
        )
    if not isinstance(value, str):
        raise ScheduledRuntimeDeclarationError(f"wire value of {kind!r} is not a str: {value!r}")
    return value
