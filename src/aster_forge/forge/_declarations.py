"""``ForgeDeclarations``: what a forge declares (lanes, tasks, periodic jobs, resources).

Collected at import time and frozen into a primitive
:class:`~aster_forge.tasks.TaskRegistry` the first time the forge is used.
"""

from __future__ import annotations

import enum
import inspect
import re
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar, cast, overload

from ..runtime import HealthComponentReport
from ..tasks import TaskRegistry, TaskStepSpec
from ..tasks._internal import TaskErrorClassifier, TaskRateLimit, TaskRetryPolicy, check_rate_limit
from ._periodic import ForgePeriodic, periodic_schedule, periodic_shape
from ._signature import BodyShape, read_body
from ._task import ForgeTask
from .errors import ForgeDeclarationError, ForgeStateError

if TYPE_CHECKING:
    from ._app import Forge

__all__ = ["ForgeDeclarations", "ForgeHealthCheck", "check_name"]

_F = TypeVar("_F", bound=Callable[..., Any])
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,63}$")


def check_name(name: object, what: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ForgeDeclarationError(
            f"{what} name {name!r} must be 1-64 characters: letters, digits, '_', '.', ':', '-'"
        )
    return name


def _steps(steps: Sequence[tuple[str, str] | TaskStepSpec], what: str) -> tuple[TaskStepSpec, ...]:
    try:
        specs = tuple(s if isinstance(s, TaskStepSpec) else TaskStepSpec(*s) for s in steps)
    except (TypeError, ValueError) as exc:
        raise ForgeDeclarationError(f"{what}: steps are (key, title) pairs ({exc})") from None
    keys = [step.key for step in specs]
    if len(set(keys)) != len(keys):
        raise ForgeDeclarationError(f"{what}: a step key is declared twice: {keys}")
    return specs


@dataclass(frozen=True, slots=True)
class ForgeHealthCheck:
    """A product health check declared with :meth:`ForgeDeclarations.health_check`.

    Attributes:
        name: The check's name in health reports.
        check: ``async def check(state) -> HealthComponentReport``.
        required: Part of readiness (``/readyz``); otherwise diagnostics only.
        timeout: How long one run may take before it counts as failed.
    """

    name: str
    check: Callable[[Any], Awaitable[HealthComponentReport]]
    required: bool
    timeout: timedelta


class ForgeDeclarations:
    """The declaring half of :class:`~aster_forge.Forge`: lanes, tasks, periodic jobs and
    resources, and the registry they freeze into."""

    def __init__(self, *, default_concurrency: int) -> None:
        self._default_concurrency = default_concurrency
        self._lanes: dict[str, int] = {}
        self._cluster_limits: dict[str, int] = {}
        self._partition_limits: dict[str, int] = {}
        self._rate_limits: dict[str, TaskRateLimit] = {}
        self._partition_rate_limits: dict[str, TaskRateLimit] = {}
        self._tasks: dict[str, ForgeTask] = {}
        self._periodics: list[ForgePeriodic] = []
        self._resources: Callable[[], AbstractAsyncContextManager[Any]] | None = None
        self._health_checks: dict[str, ForgeHealthCheck] = {}
        self._registry: TaskRegistry[Forge, str, str] | None = None

    def lane(
        self,
        name: str,
        *,
        concurrency: int = 1,
        cluster_limit: int | None = None,
        partition_limit: int | None = None,
        rate_limit: TaskRateLimit | None = None,
        partition_rate_limit: TaskRateLimit | None = None,
    ) -> str:
        """Declare a lane: a concurrency group the worker limits separately.

        Args:
            name: The lane's name.
            concurrency: The most tasks of the lane one process runs at once.
            cluster_limit: The most tasks of the lane running at once across every
                instance on the database (enforced in the claim); ``None``: no limit
                beyond each process's ``concurrency``.
            partition_limit: The most tasks of one partition (``enqueue(...,
                partition=...)``) running at once across every instance; 1 runs each
                partition's tasks one at a time. Claims then take partitions in turn,
                so a partition with many queued tasks never starves one with a few.
                ``None``: partitions are not considered.
            rate_limit: ``(count, period)``: at most ``count`` task starts of the lane
                per window of ``period`` across every instance (windows are aligned
                to the Unix epoch); a retry's start counts too. ``None``: no rate
                limit.
            partition_rate_limit: ``(count, period)``: at most ``count`` task starts
                of one partition of the lane per window of ``period`` across every
                instance; claims skip a partition whose budget is spent and take
                other partitions' tasks. Tasks without a partition are not counted.
                ``None``: no per-partition rate limit.

        Returns:
            The lane's name, for ``@forge.task(lane=...)``.

        Raises:
            ForgeDeclarationError: Declared twice, a bad name, a concurrency,
                cluster limit or partition limit below 1, or a rate limit that is not
                ``(count >= 1, positive timedelta)``.
            ForgeStateError: The forge is already in use (declarations are frozen).
        """
        self._check_open()
        check_name(name, "lane")
        if name in self._lanes:
            raise ForgeDeclarationError(f"lane {name!r} is declared twice")
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ForgeDeclarationError(f"lane {name!r}: concurrency must be an int >= 1")
        for setting, value in (
            ("cluster_limit", cluster_limit),
            ("partition_limit", partition_limit),
        ):
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 1
            ):
                raise ForgeDeclarationError(
                    f"lane {name!r}: {setting} must be None or an int >= 1, got {value!r}"
                )
        for setting, rate in (
            ("rate_limit", rate_limit),
            ("partition_rate_limit", partition_rate_limit),
        ):
            if rate is not None:
                check_rate_limit(f"lane {name!r}: {setting}", rate, error=ForgeDeclarationError)
        self._lanes[name] = concurrency
        if rate_limit is not None:
            self._rate_limits[name] = rate_limit
        if partition_rate_limit is not None:
            self._partition_rate_limits[name] = partition_rate_limit
        if cluster_limit is not None:
            self._cluster_limits[name] = cluster_limit
        if partition_limit is not None:
            self._partition_limits[name] = partition_limit
        return name

    @overload
    def task(self, fn: _F) -> ForgeTask: ...

    @overload
    def task(
        self,
        *,
        name: str | None = None,
        lane: str | None = None,
        max_attempts: int | None = None,
        retry: TaskRetryPolicy | None = None,
        steps: Sequence[tuple[str, str] | TaskStepSpec] = (),
        timeout: timedelta | None = None,
        error_classifier: TaskErrorClassifier | None = None,
    ) -> Callable[[Callable[..., Any]], ForgeTask]: ...

    def task(
        self,
        fn: Callable[..., Any] | None = None,
        *,
        name: str | None = None,
        lane: str | None = None,
        max_attempts: int | None = None,
        retry: TaskRetryPolicy | None = None,
        steps: Sequence[tuple[str, str] | TaskStepSpec] = (),
        timeout: timedelta | None = None,
        error_classifier: TaskErrorClassifier | None = None,
    ) -> ForgeTask | Callable[[Callable[..., Any]], ForgeTask]:
        """Declare a task kind (decorator, with or without arguments).

        The body is ``async def body(payload)``, ``(ctx, payload)``, ``(ctx, payload,
        state)``, ``(ctx)`` or ``()``; the payload and result types come from its
        annotations (pydantic validates them).

        Args:
            fn: The body (when used as ``@forge.task`` without parentheses).
            name: The stable wire name stored in each row (default: the function's name);
                pin it so renaming the function does not orphan stored rows.
            lane: A lane declared with :meth:`lane` (default: the ``default`` lane).
            max_attempts: Counted attempts before the task fails for good (default:
                ``retry.max_attempts`` when ``retry`` is given, else 5).
            retry: This task's backoff between attempts (base, multiplier, cap,
                jitter); default: the worker's policy.
            steps: ``(key, title)`` pairs shown on the dashboard from the start.
            timeout: One execution's limit; past it the body is cancelled and the
                attempt fails as retryable.
            error_classifier: Maps the body's exceptions to a retry class and message.

        Raises:
            ForgeDeclarationError: A name declared twice, an undeclared lane, bad steps,
                attempts or timeout, or a body signature the forge cannot read.
            ForgeStateError: The forge is already in use (declarations are frozen).
        """

        def declare(body: Callable[..., Any]) -> ForgeTask:
            return self._declare_task(
                body,
                name=name,
                lane=lane,
                max_attempts=max_attempts,
                retry=retry,
                steps=steps,
                timeout=timeout,
                error_classifier=error_classifier,
            )

        return declare if fn is None else declare(fn)

    def periodic(
        self,
        *,
        every: timedelta | None = None,
        cron: str | None = None,
        timezone: str | None = None,
        initial_delay: timedelta | None = None,
        name: str | None = None,
        lane: str | None = None,
        max_attempts: int = 3,
        retry: TaskRetryPolicy | None = None,
        timeout: timedelta | None = None,
    ) -> Callable[[Callable[..., Any]], ForgePeriodic]:
        """Declare a periodic job, run once per firing across every instance.

        Each firing enqueues one task of the job's kind with the firing's dedupe key;
        the body is ``()``, ``(ctx)``, ``(ctx, state)``, ``(ctx, scheduled_at:
        datetime)`` or ``(ctx, scheduled_at: datetime, state)``. Firings
        missed while every instance was down run once, not once each.

        Args:
            every: The period (firings on a grid from the first one).
            cron: A cron expression, five fields or six with leading seconds (the
                ``cron`` extra); DST-safe on ``timezone``'s wall clock.
            timezone: The cron expression's IANA time zone (default UTC).
            initial_delay: Delay of the very first firing (``every=`` only).
            name: The job's stable name (default: the function's name).
            lane: The lane its task runs in.
            max_attempts: Attempts of each firing's task.
            retry: The backoff between those attempts (default: the worker's policy).
            timeout: Limit of one execution.

        Raises:
            ForgeDeclarationError: Neither or both of ``every``/``cron``, a non-positive
                interval, a bad cron expression or timezone, the ``cron`` extra missing,
                or any error :meth:`task` raises.
        """
        schedule = periodic_schedule(
            every=every, cron=cron, timezone=timezone, initial_delay=initial_delay
        )

        def declare(body: Callable[..., Any]) -> ForgePeriodic:
            job = name if name is not None else getattr(body, "__name__", "")
            shape = periodic_shape(job, read_body(body, what=f"periodic job {job!r}"))
            task = self._declare_task(
                body,
                shape=shape,
                name=job,
                lane=lane,
                max_attempts=max_attempts,
                retry=retry,
                steps=(),
                timeout=timeout,
                error_classifier=None,
            )
            periodic = ForgePeriodic(task, schedule=schedule)
            self._periodics.append(periodic)
            return periodic

        return declare

    def resources(
        self, factory: Callable[[], Any]
    ) -> Callable[[], AbstractAsyncContextManager[Any]]:
        """Declare the product's resources (decorator on an async generator function).

        The generator runs at startup, before the workers; what it yields becomes
        :attr:`state` (the bodies' third argument) until shutdown, after the workers
        stopped, resumes it to close the resources.

        Raises:
            ForgeDeclarationError: Declared twice, or not an async generator function or
                a function returning an async context manager.
        """
        self._check_open()
        if self._resources is not None:
            raise ForgeDeclarationError("resources are declared twice")
        if inspect.isasyncgenfunction(factory):
            manager: Callable[[], AbstractAsyncContextManager[Any]] = asynccontextmanager(factory)
        elif callable(factory):
            manager = factory
        else:
            raise ForgeDeclarationError("resources must be an async generator function")
        self._resources = manager
        return manager

    def health_check(
        self, name: str, *, required: bool = False, timeout: timedelta = timedelta(seconds=1)
    ) -> Callable[[_F], _F]:
        """Declare a health check of the product's resources (decorator).

        ``async def check(state) -> HealthComponentReport`` runs with the forge's
        health checks (``/readyz``, ``/diagnostics``, ``forge.run_health``), owned by the
        resources component when resources are declared.

        Args:
            name: The check's name in health reports.
            required: Count it in readiness (default: diagnostics only).
            timeout: How long one run may take before it counts as failed.

        Raises:
            ForgeDeclarationError: A bad or repeated name, or a non-positive timeout.
            ForgeStateError: The forge is already in use (declarations are frozen).
        """
        self._check_open()
        check_name(name, "health check")
        if name in self._health_checks:
            raise ForgeDeclarationError(f"health check {name!r} is declared twice")
        if not isinstance(timeout, timedelta) or timeout <= timedelta(0):
            raise ForgeDeclarationError(f"health check {name!r}: timeout must be positive")

        def declare(check: _F) -> _F:
            self._health_checks[name] = ForgeHealthCheck(name, check, required, timeout)
            return check

        return declare

    @property
    def health_checks(self) -> tuple[ForgeHealthCheck, ...]:
        """The product health checks, in declaration order."""
        return tuple(self._health_checks.values())

    def _declare_task(
        self,
        body: Callable[..., Any],
        *,
        shape: BodyShape | None = None,
        name: str | None,
        lane: str | None,
        max_attempts: int | None,
        retry: TaskRetryPolicy | None,
        steps: Sequence[tuple[str, str] | TaskStepSpec],
        timeout: timedelta | None,
        error_classifier: TaskErrorClassifier | None,
    ) -> ForgeTask:
        self._check_open()
        wire = check_name(name if name is not None else getattr(body, "__name__", ""), "task")
        what = f"task {wire!r}"
        if wire in self._tasks:
            raise ForgeDeclarationError(f"{what} is declared twice")
        if lane is not None and lane not in self._lanes:
            raise ForgeDeclarationError(
                f"{what}: lane {lane!r} is not declared (forge.lane({lane!r}, concurrency=...))"
            )
        if retry is not None and not isinstance(retry, TaskRetryPolicy):
            raise ForgeDeclarationError(f"{what}: retry must be a TaskRetryPolicy")
        if max_attempts is None:
            max_attempts = retry.max_attempts if retry is not None else 5
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
            raise ForgeDeclarationError(f"{what}: max_attempts must be an int >= 1")
        if timeout is not None and (not isinstance(timeout, timedelta) or timeout <= timedelta(0)):
            raise ForgeDeclarationError(f"{what}: timeout must be a positive timedelta")
        task = ForgeTask(
            cast("Forge", self),
            body,
            shape if shape is not None else read_body(body, what=what),
            name=wire,
            lane=lane,
            max_attempts=max_attempts,
            retry=retry,
            steps=_steps(steps, what),
            timeout=timeout,
            error_classifier=error_classifier,
        )
        self._tasks[wire] = task
        return task

    def _check_open(self) -> None:
        if self._registry is not None:
            raise ForgeStateError(
                "the forge is already in use; declare lanes, tasks and jobs at import time"
            )

    @property
    def tasks(self) -> tuple[ForgeTask, ...]:
        """Every declared task (periodic jobs' tasks included), in declaration order."""
        return tuple(self._tasks.values())

    @property
    def periodics(self) -> tuple[ForgePeriodic, ...]:
        """Every declared periodic job."""
        return tuple(self._periodics)

    @property
    def lanes(self) -> dict[str, int]:
        """Each lane's concurrency limit (with ``default`` when a task uses it)."""
        lanes = dict(self._lanes)
        if any(task.lane is None for task in self._tasks.values()):
            lanes.setdefault("default", self._default_concurrency)
        return lanes

    @property
    def lane_cluster_limits(self) -> dict[str, int]:
        """The cluster-wide limit of each lane declared with one."""
        return dict(self._cluster_limits)

    @property
    def lane_partition_limits(self) -> dict[str, int]:
        """The per-partition limit of each lane declared with one."""
        return dict(self._partition_limits)

    @property
    def lane_rate_limits(self) -> dict[str, TaskRateLimit]:
        """The rate limit ``(count, period)`` of each lane declared with one."""
        return dict(self._rate_limits)

    @property
    def lane_partition_rate_limits(self) -> dict[str, TaskRateLimit]:
        """The per-partition rate limit ``(count, period)`` of each lane declared with one."""
        return dict(self._partition_rate_limits)

    @property
    def registry(self) -> TaskRegistry[Forge, str, str]:
        """The primitive registry built from the declarations (freezes them on first use).

        Raises:
            ForgeStateError: No task is declared.
        """
        if self._registry is None:
            if not self._tasks:
                raise ForgeStateError("the forge declares no task")
            registry: TaskRegistry[Forge, str, str] = TaskRegistry()
            for wire, task in self._tasks.items():
                registry.register(task.spec(wire))
            # A lane may be declared with a str-valued enum member: the registry keys
            # lanes by the text stored in the table.
            kinds_of: dict[str, list[str]] = {_text(lane): [] for lane in self.lanes}
            for wire, task in self._tasks.items():
                kinds_of[_text(task.lane or "default")].append(wire)
            for lane, kinds in kinds_of.items():
                registry.lane(lane, kinds)
            self._registry = registry.validate()
        return self._registry

    @property
    def resources_factory(self) -> Callable[[], AbstractAsyncContextManager[Any]] | None:
        """The declared resources factory, if any."""
        return self._resources


def _text(name: object) -> str:
    """A lane's stored text (a str-valued enum member's value)."""
    return str(name.value if isinstance(name, enum.Enum) else name)
