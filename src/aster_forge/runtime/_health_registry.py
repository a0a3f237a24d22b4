"""Health checks: scopes, options, and the registry that runs a scope concurrently.

Each run starts one named task per selected check. A check runs under its own
timeout; a timeout or exception becomes a report with a fixed message (never the
exception's text): UNHEALTHY for required checks, DEGRADED for optional ones. A check
that swallows the timeout's cancellation is given a short grace period, then
reported and left behind as a *straggler*: the registry keeps a reference to it,
cancels it again, retrieves its outcome when it finally ends, and :meth:`aclose`
waits for it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from ._health import (
    HealthComponentReport,
    HealthStatus,
    SystemHealthReport,
    _with_measured_duration,
)
from .errors import DuplicateHealthCheckError, InvalidHealthCheckError

__all__ = [
    "DEFAULT_CANCEL_GRACE",
    "DEFAULT_HEALTH_CHECK_TIMEOUT",
    "HEALTH_CHECK_FAILED_MESSAGE",
    "HEALTH_CHECK_INVALID_REPORT_MESSAGE",
    "HEALTH_CHECK_STUCK_MESSAGE",
    "HEALTH_CHECK_TIMED_OUT_MESSAGE",
    "HealthCheck",
    "HealthCheckDescriptor",
    "HealthCheckOptions",
    "HealthCheckRegistry",
    "HealthCheckRequirement",
    "HealthCheckScope",
    "HealthCheckScopes",
]


DEFAULT_HEALTH_CHECK_TIMEOUT = timedelta(seconds=5)

"""The registry's default per-check timeout when neither check nor registry sets one."""


class HealthCheckScope(enum.StrEnum):
    """Which view a health run serves.

    LIVENESS: is the process alive (usually no database/cache/external probes).
    READINESS: can this instance take traffic (e.g. a database ping).
    DIAGNOSTICS: the full operator view (database, cache, storage, mail, tasks).
    """

    LIVENESS = "liveness"
    """Process liveness: cheap, no external probes."""
    READINESS = "readiness"
    """Ability to serve traffic."""
    DIAGNOSTICS = "diagnostics"
    """Full operator diagnostics."""

    @classmethod
    def parse(cls, value: str) -> HealthCheckScope:
        """Parse a wire value strictly.

        Raises:
            InvalidHealthCheckError: ``value`` is not a known scope.
        """
        for member in cls:
            if member.value == value:
                return member
        raise InvalidHealthCheckError(
            f"unknown health check scope {value!r} (expected liveness, readiness or diagnostics)"
        )


_ORDER = tuple(HealthCheckScope)


@dataclass(frozen=True, slots=True)
class HealthCheckScopes:
    """A non-empty set of :class:`HealthCheckScope` a check runs in.

    Build with the named constructors (``HealthCheckScopes.readiness_and_diagnostics()``)
    or :meth:`of`; combine with ``|``.

    Attributes:
        scopes: The member scopes.
    """

    scopes: frozenset[HealthCheckScope]

    def __post_init__(self) -> None:
        scopes = frozenset(self.scopes)
        if not scopes:
            raise InvalidHealthCheckError("a health check needs at least one scope")
        bad = [s for s in scopes if not isinstance(s, HealthCheckScope)]
        if bad:
            raise InvalidHealthCheckError(f"not HealthCheckScope values: {bad!r}")
        object.__setattr__(self, "scopes", scopes)

    @classmethod
    def of(cls, *scopes: HealthCheckScope) -> HealthCheckScopes:
        """Return the set of the given scopes (at least one)."""
        return cls(frozenset(scopes))

    @classmethod
    def liveness(cls) -> HealthCheckScopes:
        """Return ``{LIVENESS}``."""
        return cls.of(HealthCheckScope.LIVENESS)

    @classmethod
    def readiness(cls) -> HealthCheckScopes:
        """Return ``{READINESS}``."""
        return cls.of(HealthCheckScope.READINESS)

    @classmethod
    def diagnostics(cls) -> HealthCheckScopes:
        """Return ``{DIAGNOSTICS}``."""
        return cls.of(HealthCheckScope.DIAGNOSTICS)

    @classmethod
    def liveness_and_readiness(cls) -> HealthCheckScopes:
        """Return ``{LIVENESS, READINESS}``."""
        return cls.of(HealthCheckScope.LIVENESS, HealthCheckScope.READINESS)

    @classmethod
    def liveness_and_diagnostics(cls) -> HealthCheckScopes:
        """Return ``{LIVENESS, DIAGNOSTICS}``."""
        return cls.of(HealthCheckScope.LIVENESS, HealthCheckScope.DIAGNOSTICS)

    @classmethod
    def readiness_and_diagnostics(cls) -> HealthCheckScopes:
        """Return ``{READINESS, DIAGNOSTICS}``."""
        return cls.of(HealthCheckScope.READINESS, HealthCheckScope.DIAGNOSTICS)

    @classmethod
    def all(cls) -> HealthCheckScopes:
        """Return every scope (the default for a registration)."""
        return cls(frozenset(HealthCheckScope))

    def contains(self, scope: HealthCheckScope) -> bool:
        """Return whether ``scope`` is a member."""
        return scope in self.scopes

    def __contains__(self, scope: object) -> bool:
        return scope in self.scopes

    def __iter__(self) -> Iterator[HealthCheckScope]:
        # Stable order (liveness, readiness, diagnostics) for display and JSON.
        return (s for s in _ORDER if s in self.scopes)

    def __or__(self, other: HealthCheckScopes) -> HealthCheckScopes:
        if not isinstance(other, HealthCheckScopes):
            return NotImplemented
        return HealthCheckScopes(self.scopes | other.scopes)


class HealthCheckRequirement(enum.StrEnum):
    """How a framework-level failure (timeout, exception) of a check is reported.

    REQUIRED maps it to UNHEALTHY, OPTIONAL to DEGRADED.
    """

    REQUIRED = "required"
    """A key component: a failure makes the instance unhealthy."""
    OPTIONAL = "optional"
    """An optional component: a failure only degrades the instance."""

    def failure_status(self) -> HealthStatus:
        """Return the status a timeout or exception maps to."""
        if self is HealthCheckRequirement.REQUIRED:
            return HealthStatus.UNHEALTHY
        return HealthStatus.DEGRADED


def _check_timeout(timeout: timedelta | None) -> timedelta | None:
    if timeout is None:
        return None
    if not isinstance(timeout, timedelta):
        raise InvalidHealthCheckError(
            f"health check timeout must be a timedelta or None, got {type(timeout).__name__}"
        )
    if timeout <= timedelta(0):
        raise InvalidHealthCheckError(f"health check timeout must be positive, got {timeout}")
    return timeout


def _check_grace(grace: timedelta) -> timedelta:
    if not isinstance(grace, timedelta) or grace <= timedelta(0):
        raise InvalidHealthCheckError(f"cancel_grace must be a positive timedelta, got {grace!r}")
    return grace


@dataclass(frozen=True, slots=True)
class HealthCheckOptions:
    """How a check is registered: requirement, timeout and scopes.

    Attributes:
        requirement: REQUIRED or OPTIONAL.
        timeout: Per-check timeout; ``None`` uses the registry default.
        scopes: Scopes the check runs in (default: all of them).
    """

    requirement: HealthCheckRequirement
    timeout: timedelta | None = None
    scopes: HealthCheckScopes = dataclasses.field(default_factory=HealthCheckScopes.all)

    def __post_init__(self) -> None:
        if not isinstance(self.requirement, HealthCheckRequirement):
            raise InvalidHealthCheckError(
                f"requirement must be a HealthCheckRequirement, got {self.requirement!r}"
            )
        _check_timeout(self.timeout)
        if not isinstance(self.scopes, HealthCheckScopes):
            raise InvalidHealthCheckError(
                f"scopes must be HealthCheckScopes, got {type(self.scopes).__name__}"
            )

    @classmethod
    def required(cls, timeout: timedelta | None = None) -> HealthCheckOptions:
        """Return options for a key component (failure -> UNHEALTHY)."""
        return cls(HealthCheckRequirement.REQUIRED, timeout)

    @classmethod
    def optional(cls, timeout: timedelta | None = None) -> HealthCheckOptions:
        """Return options for an optional component (failure -> DEGRADED)."""
        return cls(HealthCheckRequirement.OPTIONAL, timeout)

    def with_scopes(
        self, scopes: HealthCheckScopes | HealthCheckScope | Iterable[HealthCheckScope]
    ) -> HealthCheckOptions:
        """Return a copy that runs only in ``scopes``."""
        if isinstance(scopes, HealthCheckScope):
            scopes = HealthCheckScopes.of(scopes)
        elif not isinstance(scopes, HealthCheckScopes):
            scopes = HealthCheckScopes(frozenset(scopes))
        return dataclasses.replace(self, scopes=scopes)

    def with_timeout(self, timeout: timedelta | None) -> HealthCheckOptions:
        """Return a copy with another timeout (``None``: registry default)."""
        return dataclasses.replace(self, timeout=timeout)


@dataclass(frozen=True, slots=True)
class HealthCheckDescriptor:
    """What is registered under one name, for admin UIs, diagnostics APIs and catalogs.

    Attributes:
        name: The registration name.
        requirement: REQUIRED or OPTIONAL.
        timeout: The effective timeout (the check's own or the registry default).
        scopes: The scopes the check runs in.
    """

    name: str
    requirement: HealthCheckRequirement
    timeout: timedelta
    scopes: HealthCheckScopes

    def runs_in(self, scope: HealthCheckScope) -> bool:
        """Return whether the check runs for ``scope``."""
        return scope in self.scopes

    def to_json_dict(self) -> dict[str, Any]:
        """Return ``{"name", "requirement", "timeout_seconds", "scopes"}``."""
        return {
            "name": self.name,
            "requirement": self.requirement.value,
            "timeout_seconds": self.timeout.total_seconds(),
            "scopes": [scope.value for scope in self.scopes],
        }


logger = logging.getLogger("aster_forge.runtime.health")

HealthCheck = Callable[[], Awaitable[HealthComponentReport]]

"""A health check: a zero-argument callable returning an awaitable report."""

DEFAULT_CANCEL_GRACE = timedelta(milliseconds=100)

"""How long a timed-out check may take to honour cancellation before it is left behind."""

HEALTH_CHECK_TIMED_OUT_MESSAGE = "health check timed out"

"""Fixed message of a report for a check that exceeded its timeout."""

HEALTH_CHECK_STUCK_MESSAGE = "health check timed out and did not stop when cancelled"

"""Fixed message of a report for a timed-out check that ignored cancellation."""

HEALTH_CHECK_FAILED_MESSAGE = "health check failed with an unexpected error"

"""Fixed message of a report for a check that raised (the error text is only logged)."""

HEALTH_CHECK_INVALID_REPORT_MESSAGE = "health check returned an invalid report"

"""Fixed message of a report for a check that returned something other than a report."""


# asyncio fires timers up to one clock tick early; treat deadlines that close as due.
_TIMER_SLACK = 0.001


@dataclass(frozen=True, slots=True)
class _Entry:
    descriptor: HealthCheckDescriptor
    check: HealthCheck


def _failure(entry: _Entry, message: str, elapsed: float) -> HealthComponentReport:
    descriptor = entry.descriptor
    return HealthComponentReport(
        descriptor.name,
        descriptor.requirement.failure_status(),
        message,
        timedelta(seconds=elapsed),
    )


async def _guarded(entry: _Entry, scope: str) -> HealthComponentReport:
    """Run one check and map an exception or a bad result to a report.

    Timeouts are enforced by :meth:`HealthCheckRegistry.run_scope`, which cancels
    this task at the deadline (one timer per run instead of one per check).
    """
    started = time.perf_counter()
    try:
        report: object = await entry.check()
    except Exception:
        name = entry.descriptor.name
        logger.warning(
            "health check %s failed",
            name,
            exc_info=True,
            extra={"health_check": name, "scope": scope},
        )
        return _failure(entry, HEALTH_CHECK_FAILED_MESSAGE, time.perf_counter() - started)
    if not isinstance(report, HealthComponentReport):
        name = entry.descriptor.name
        logger.warning(
            "health check %s returned %s instead of a HealthComponentReport",
            name,
            type(report).__name__,
            extra={"health_check": name, "scope": scope},
        )
        return _failure(entry, HEALTH_CHECK_INVALID_REPORT_MESSAGE, time.perf_counter() - started)
    if report.duration is None:
        report = _with_measured_duration(report, time.perf_counter() - started)
    return report


class HealthCheckRegistry:
    """Named health checks with options; runs a scope concurrently.

    Reports come back in registration order. Pass ``checks`` or register with
    :meth:`register_with_options`, then ``await registry.run_scope(HealthCheckScope.READINESS)``.

    Args:
        checks: ``{name: (options, check)}``, registered in order.
        default_timeout: Timeout of checks registered without one (5 s when ``None``).
        cancel_grace: How long a timed-out check may take to honour cancellation before
            the run reports it and moves on.
    """

    __slots__ = ("_cancel_grace", "_default_timeout", "_entries", "_names", "_stragglers")

    def __init__(
        self,
        *,
        checks: Mapping[str, tuple[HealthCheckOptions, HealthCheck]] | None = None,
        default_timeout: timedelta | None = None,
        cancel_grace: timedelta = DEFAULT_CANCEL_GRACE,
    ) -> None:
        self._default_timeout = _check_timeout(default_timeout) or DEFAULT_HEALTH_CHECK_TIMEOUT
        _check_grace(cancel_grace)
        self._cancel_grace = cancel_grace
        self._entries: list[_Entry] = []
        self._names: set[str] = set()
        self._stragglers: set[asyncio.Task[Any]] = set()
        for name, (options, check) in (checks or {}).items():
            self.register_with_options(name, options, check)

    @property
    def default_timeout(self) -> timedelta:
        """The timeout of checks registered without their own."""
        return self._default_timeout

    @property
    def cancel_grace(self) -> timedelta:
        """The grace period a timed-out check gets to honour cancellation."""
        return self._cancel_grace

    def register_with_options(
        self, name: str, options: HealthCheckOptions, check: HealthCheck
    ) -> None:
        """Register ``check`` under ``name``.

        Raises:
            DuplicateHealthCheckError: ``name`` is already registered.
            InvalidHealthCheckError: ``name`` is empty, ``options`` is not
                :class:`HealthCheckOptions` or ``check`` is not callable.
        """
        if not isinstance(name, str) or not name:
            raise InvalidHealthCheckError(
                f"health check name must be a non-empty str, got {name!r}"
            )
        if not isinstance(options, HealthCheckOptions):
            raise InvalidHealthCheckError(
                f"options for health check {name!r} must be HealthCheckOptions, "
                f"got {type(options).__name__}"
            )
        if not callable(check):
            raise InvalidHealthCheckError(f"health check {name!r} is not callable")
        if name in self._names:
            raise DuplicateHealthCheckError(f"a health check named {name!r} is already registered")
        descriptor = HealthCheckDescriptor(
            name=name,
            requirement=options.requirement,
            timeout=options.timeout or self._default_timeout,
            scopes=options.scopes,
        )
        self._names.add(name)
        self._entries.append(_Entry(descriptor, check))

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._names

    def descriptors(self) -> tuple[HealthCheckDescriptor, ...]:
        """Return every registration, in registration order."""
        return tuple(e.descriptor for e in self._entries)

    def descriptors_for_scope(self, scope: HealthCheckScope) -> tuple[HealthCheckDescriptor, ...]:
        """Return the registrations that run for ``scope``, in registration order."""
        _check_scope(scope)
        return tuple(e.descriptor for e in self._entries if scope in e.descriptor.scopes)

    @property
    def straggler_count(self) -> int:
        """How many timed-out checks that ignored cancellation are still running."""
        return len(self._stragglers)

    async def run_scope(self, scope: HealthCheckScope) -> SystemHealthReport:
        """Run every check registered for ``scope`` concurrently and aggregate.

        Never raises for a failing check: timeouts, exceptions and invalid results
        become component reports. A check still running at its timeout is cancelled
        and awaited; if it ignores the cancellation for longer than the grace period
        it is reported and left behind (see :meth:`aclose`). If the caller cancels
        the run, every check is cancelled and awaited (up to the grace period)
        before the cancellation propagates.

        Raises:
            InvalidHealthCheckError: ``scope`` is not a :class:`HealthCheckScope`.
        """
        _check_scope(scope)
        label = scope.value
        entries = [e for e in self._entries if scope in e.descriptor.scopes]
        started = time.perf_counter()
        if not entries:
            return SystemHealthReport((), timedelta(seconds=time.perf_counter() - started))
        loop = asyncio.get_running_loop()
        base = loop.time()
        grace = self._cancel_grace.total_seconds()
        tasks = [
            loop.create_task(_guarded(e, label), name=f"aster-forge:health:{e.descriptor.name}")
            for e in entries
        ]
        # One asyncio.wait per deadline instead of a timer per check keeps runs cheap.
        soft = {
            task: base + e.descriptor.timeout.total_seconds()
            for task, e in zip(tasks, entries, strict=True)
        }
        timed_out: set[asyncio.Task[HealthComponentReport]] = set()
        abandoned: set[asyncio.Task[HealthComponentReport]] = set()
        pending = set(tasks)
        try:
            while pending:
                now = loop.time() + _TIMER_SLACK
                for task in pending:
                    if task not in timed_out and soft[task] <= now:
                        task.cancel()
                        timed_out.add(task)
                    elif task in timed_out and soft[task] + grace <= now:
                        abandoned.add(task)
                pending -= abandoned
                if not pending:
                    break
                nearest = min(soft[t] + grace if t in timed_out else soft[t] for t in pending)
                await asyncio.wait(pending, timeout=max(nearest - now + _TIMER_SLACK, 0.0))
                pending = {t for t in pending if not t.done()}
        except BaseException:
            # Our caller cancelled the run: stop every check before propagating.
            unfinished = [t for t in tasks if not t.done()]
            for task in unfinished:
                task.cancel()
            if unfinished:
                await asyncio.wait(unfinished, timeout=grace)
            self._abandon(t for t in tasks if not t.done())
            for task in tasks:
                if task.done():
                    _consume(task)
            raise
        self._abandon(abandoned)
        reports = [
            self._collect(task, entry, label, timed_out, abandoned, started)
            for task, entry in zip(tasks, entries, strict=True)
        ]
        return SystemHealthReport(tuple(reports), timedelta(seconds=time.perf_counter() - started))

    def _collect(
        self,
        task: asyncio.Task[HealthComponentReport],
        entry: _Entry,
        scope: str,
        timed_out: set[asyncio.Task[HealthComponentReport]],
        abandoned: set[asyncio.Task[HealthComponentReport]],
        started: float,
    ) -> HealthComponentReport:
        if task in timed_out:
            _consume_if_done(task)
            name = entry.descriptor.name
            # The check ran at least until its deadline; later work is not its result.
            timeout = entry.descriptor.timeout.total_seconds()
            if task in abandoned:
                return _failure(
                    entry, HEALTH_CHECK_STUCK_MESSAGE, timeout + self._cancel_grace.total_seconds()
                )
            logger.warning(
                "health check %s timed out", name, extra={"health_check": name, "scope": scope}
            )
            # Whatever the check did after the deadline (returned, raised) is ignored.
            return _failure(entry, HEALTH_CHECK_TIMED_OUT_MESSAGE, timeout)
        if task.cancelled():
            # The check raised CancelledError on its own (we did not cancel it).
            return _failure(entry, HEALTH_CHECK_FAILED_MESSAGE, time.perf_counter() - started)
        error = task.exception()
        if error is not None:
            # Only a BaseException outside Exception (e.g. GeneratorExit) gets here.
            return _failure(entry, HEALTH_CHECK_FAILED_MESSAGE, time.perf_counter() - started)
        return task.result()

    def _abandon(self, tasks: Any) -> None:
        for task in tasks:
            name = task.get_name()
            logger.error(
                "health check task %s ignored cancellation; leaving it behind",
                name,
                extra={"health_check_task": name},
            )
            # Ask again: some code honours a second cancellation; either way keep a
            # strong reference so the task is neither leaked nor garbage-collected.
            task.cancel()
            self._stragglers.add(task)
            task.add_done_callback(self._straggler_done)

    def _straggler_done(self, task: asyncio.Task[Any]) -> None:
        self._stragglers.discard(task)
        _consume(task)
        logger.info("abandoned health check task %s finished", task.get_name())

    async def aclose(self, grace: timedelta | None = None) -> int:
        """Cancel and wait for checks left behind by earlier runs.

        Args:
            grace: How long to wait; ``None`` waits for the registry's cancel grace.

        Returns:
            How many such checks are still running afterwards.
        """
        stragglers = list(self._stragglers)
        if not stragglers:
            return 0
        for task in stragglers:
            task.cancel()
        wait = (grace if grace is not None else self._cancel_grace).total_seconds()
        await asyncio.wait(stragglers, timeout=wait)
        return len(self._stragglers)


def _consume_if_done(task: asyncio.Task[Any]) -> None:
    if task.done():
        _consume(task)


def _consume(task: asyncio.Task[Any]) -> None:
    # Retrieve the outcome so asyncio never logs "exception was never retrieved".
    if not task.cancelled():
        task.exception()


def _check_scope(scope: object) -> None:
    if not isinstance(scope, HealthCheckScope):
        raise InvalidHealthCheckError(f"scope must be a HealthCheckScope, got {scope!r}")
