"""Dispatch values: lane limits, poll timing and backoff, wake-ups, drain results, stats."""

from __future__ import annotations

import asyncio
import enum
import os
import socket
import uuid
from collections.abc import Hashable, Iterable
from dataclasses import asdict, dataclass, field, fields
from datetime import timedelta
from typing import Any, Literal

from .._validation import check_int_setting, check_number_setting, check_stored_duration
from ._rate_limit import TaskRateLimit, check_rate_limit
from .errors import TaskDispatchConfigError

__all__ = [
    "ClaimedTaskOutcome",
    "DispatchBackoff",
    "DispatchDrainResult",
    "DispatchPollConfig",
    "DispatchStats",
    "DispatchStatsRecorder",
    "DispatchWakeSignal",
    "TaskLaneConfig",
    "default_dispatch_owner",
    "effective_dispatch_base_interval",
]


_MIN_BASE_INTERVAL = timedelta(seconds=1)


def effective_dispatch_base_interval(interval: timedelta) -> timedelta:
    """The poll interval actually used: zero is clamped to 1 s so a worker never hot-spins.

    Non-zero sub-second intervals are kept (fast tests and in-memory polling are legal).

    Raises:
        TaskDispatchConfigError: When ``interval`` is negative.
    """
    if interval < timedelta(0):
        raise TaskDispatchConfigError(f"dispatch poll interval must not be negative: {interval}")
    return _MIN_BASE_INTERVAL if interval == timedelta(0) else interval


def default_dispatch_owner() -> str:
    """A claim owner unique per process start: ``<host>:<pid>:<random>``.

    The random part keeps a restarted pod with the same host name and pid from being
    mistaken for the process that died.
    """
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


@dataclass(frozen=True, slots=True)
class TaskLaneConfig:
    """One lane's concurrency limit.

    Attributes:
        lane: The product's lane value (normally a lane enum member).
        max_concurrency: The most tasks of this lane executing at once (>= 1).
        claim_batch: The most tasks one claim round trip may take (default: all free slots).
        cluster_limit: The most tasks of this lane running at once across every worker
            of the store's table, enforced by the store's claim (default: no limit
            beyond each worker's ``max_concurrency``).
        partition_limit: The most tasks of one partition of this lane running at once
            across every worker; claims then take partitions in turn (default: tasks'
            partitions are not considered).
        rate_limit: ``(count, period)``: the most task starts of this lane per window
            of ``period`` across every worker, enforced by the store's claim; a worker
            whose claim came back short waits for the next window (or a wake-up)
            instead of polling (default: starts are not rate limited).
        partition_rate_limit: ``(count, period)``: the most task starts of one
            partition of this lane per window of ``period`` across every worker; claims
            skip a partition whose budget is spent and take other partitions' tasks,
            and a short claim waits for the next window as under ``rate_limit``
            (default: partitions' starts are not rate limited).
    """

    lane: Hashable
    max_concurrency: int
    claim_batch: int | None = None
    cluster_limit: int | None = None
    partition_limit: int | None = None
    rate_limit: TaskRateLimit | None = None
    partition_rate_limit: TaskRateLimit | None = None

    def __post_init__(self) -> None:
        error = TaskDispatchConfigError
        check_int_setting(
            f"lane {self.lane!r}: max_concurrency", self.max_concurrency, minimum=1, error=error
        )
        if self.claim_batch is not None:
            check_int_setting(
                f"lane {self.lane!r}: claim_batch", self.claim_batch, minimum=1, error=error
            )
        if self.cluster_limit is not None:
            check_int_setting(
                f"lane {self.lane!r}: cluster_limit", self.cluster_limit, minimum=1, error=error
            )
        if self.partition_limit is not None:
            check_int_setting(
                f"lane {self.lane!r}: partition_limit",
                self.partition_limit,
                minimum=1,
                error=error,
            )
        if self.rate_limit is not None:
            check_rate_limit(f"lane {self.lane!r}: rate_limit", self.rate_limit, error=error)
        if self.partition_rate_limit is not None:
            check_rate_limit(
                f"lane {self.lane!r}: partition_rate_limit",
                self.partition_rate_limit,
                error=error,
            )


@dataclass(frozen=True, slots=True)
class DispatchPollConfig:
    """Poll timing of a dispatch worker.

    Attributes:
        base_interval: The poll interval while work is found (0 is clamped to 1 s).
        max_interval: The cap of the backoff on empty polls.
        error_max_interval: The cap of the backoff on store errors.
        multiplier: The growth per consecutive empty poll or error (>= 1).
    """

    base_interval: timedelta = timedelta(seconds=1)
    max_interval: timedelta = timedelta(seconds=10)
    error_max_interval: timedelta = timedelta(seconds=60)
    multiplier: float = 2.0

    def __post_init__(self) -> None:
        error = TaskDispatchConfigError
        for name, interval in (
            ("base_interval", self.base_interval),
            ("max_interval", self.max_interval),
            ("error_max_interval", self.error_max_interval),
        ):
            check_stored_duration(
                f"DispatchPollConfig.{name}", interval, allow_zero=True, error=error
            )
        check_number_setting("DispatchPollConfig.multiplier", self.multiplier, error=error)
        base = effective_dispatch_base_interval(self.base_interval)
        if self.max_interval < base or self.error_max_interval < base:
            raise TaskDispatchConfigError(
                "dispatch max_interval and error_max_interval must be >= the base interval"
            )
        if not self.multiplier >= 1.0:
            raise TaskDispatchConfigError("dispatch backoff multiplier must be >= 1")


@dataclass(slots=True)
class DispatchBackoff:
    """The poll delay after each drain: base after work, growing on empty polls and errors.

    Both streaks reset as soon as a drain claims something.
    """

    config: DispatchPollConfig = field(default_factory=DispatchPollConfig)
    empty_streak: int = 0
    error_streak: int = 0

    def _grown(self, streak: int, cap: timedelta) -> timedelta:
        base = effective_dispatch_base_interval(self.config.base_interval).total_seconds()
        # Float seconds with a bounded exponent: a long streak saturates at the cap.
        seconds = base * self.config.multiplier ** min(streak, 64)
        return cap if seconds >= cap.total_seconds() else timedelta(seconds=seconds)

    def record_work(self) -> timedelta:
        """A drain claimed tasks: reset both streaks and return the base interval."""
        self.empty_streak = 0
        self.error_streak = 0
        return effective_dispatch_base_interval(self.config.base_interval)

    def record_busy(self) -> timedelta:
        """Every lane with due work was full: wait the base interval (completions wake us)."""
        self.error_streak = 0
        return effective_dispatch_base_interval(self.config.base_interval)

    def record_empty(self) -> timedelta:
        """Nothing was due: back off (base, x multiplier, ... capped at ``max_interval``)."""
        self.error_streak = 0
        delay = self._grown(self.empty_streak, self.config.max_interval)
        self.empty_streak += 1
        return delay

    def record_error(self) -> timedelta:
        """A claim raised: back off up to ``error_max_interval``."""
        delay = self._grown(self.error_streak + 1, self.config.error_max_interval)
        self.error_streak += 1
        return delay


class DispatchWakeSignal(asyncio.Event):
    """A coalescing wake-up for an idle worker (an :class:`asyncio.Event` consumed by waits).

    :meth:`wake` is synchronous and must be called on the worker's event loop (from
    another thread use ``loop.call_soon_threadsafe(signal.wake)``). A wake while the worker
    is busy is remembered and ends its next wait at once; no wake-up is lost.
    """

    def __init__(self) -> None:
        super().__init__()
        self._forward: list[DispatchWakeSignal] = []

    def wake(self) -> None:
        """Wake the waiting worker now, or make its next wait return at once."""
        self.set()
        for other in self._forward:
            other.wake()

    def forward_to(self, other: DispatchWakeSignal) -> None:
        """Make every later :meth:`wake` of this signal wake ``other`` too."""
        if other not in self._forward:
            self._forward.append(other)

    @property
    def pending(self) -> bool:
        """Whether a wake-up is waiting to be consumed."""
        return self.is_set()

    async def wait(self) -> Literal[True]:
        """Wait for a wake-up and consume it."""
        await super().wait()
        self.clear()
        return True

    def __repr__(self) -> str:
        return f"DispatchWakeSignal(pending={self.is_set()})"


@dataclass(frozen=True, slots=True)
class DispatchDrainResult:
    """What one :meth:`TaskWorker.drain` call claimed.

    Attributes:
        claimed: Tasks claimed per lane (lanes that claimed nothing are omitted).
        saturated: Lanes that ended the drain with every slot busy.
    """

    claimed: dict[Hashable, int]
    saturated: frozenset[Hashable]

    @property
    def total(self) -> int:
        """Tasks claimed over every lane."""
        return sum(self.claimed.values())


class ClaimedTaskOutcome(enum.StrEnum):
    """How the execution of one claimed task ended."""

    SUCCEEDED = "succeeded"
    """The body returned and the fenced success write went through."""

    RETRIED = "retried"
    """The task went back to pending with a backoff delay (an attempt was counted)."""

    FAILED = "failed"
    """The task failed for good (permanent, manual, or attempts exhausted)."""

    RELEASED = "released"
    """The worker shut down; the task went back to pending without counting an attempt."""

    LEASE_LOST = "lease_lost"
    """The lease was lost or could not be renewed; nothing was written."""

    STORE_ERROR = "store_error"
    """The final write raised; the task stays claimed until its lease expires (rescue)."""

    CANCELLED = "cancelled"
    """An operator cancelled the running task; it ended ``cancelled`` (fenced)."""

    SNOOZED = "snoozed"
    """The body snoozed: pending again after its delay, no attempt counted."""


@dataclass(frozen=True, slots=True)
class DispatchStats:
    """A snapshot of dispatch counters for one lane (or the sum over all lanes).

    Attributes:
        claimed: Tasks claimed (including rescued ones).
        rescued: Claimed tasks whose previous lease had expired (a crashed worker's).
        succeeded: Tasks marked succeeded.
        retried: Tasks put back to pending with a counted attempt.
        failed_permanently: Tasks marked failed (permanent, manual, or exhausted).
        lease_lost: Executions that lost their lease and wrote nothing.
        released_on_shutdown: Tasks released to pending by a stopping worker.
        store_errors: Final writes that raised (the task is rescued after expiry).
        claim_calls: Claim round trips made.
        claim_errors: Claim round trips that raised.
        claim_latency_seconds_total: Summed claim round-trip time.
        claim_latency_seconds_max: The slowest claim round trip.
        last_claim_latency_seconds: The latest claim round trip.
        queue_lag_seconds: How long the oldest task of the latest claim had been due
            (0 when the latest claim found nothing; for the total, the largest lane value).
        in_flight: Tasks currently executing.
        cancelled: Running tasks an operator cancelled (written ``cancelled``).
        snoozed: Executions that snoozed (pending again, no attempt counted).
    """

    claimed: int = 0
    rescued: int = 0
    succeeded: int = 0
    retried: int = 0
    failed_permanently: int = 0
    lease_lost: int = 0
    released_on_shutdown: int = 0
    store_errors: int = 0
    claim_calls: int = 0
    claim_errors: int = 0
    claim_latency_seconds_total: float = 0.0
    claim_latency_seconds_max: float = 0.0
    last_claim_latency_seconds: float = 0.0
    queue_lag_seconds: float = 0.0
    in_flight: int = 0
    cancelled: int = 0
    snoozed: int = 0

    @property
    def finished(self) -> int:
        """Executions that ended, whatever the outcome."""
        return sum(getattr(self, name) for name in _OUTCOME_FIELD.values())

    @property
    def claim_latency_seconds_mean(self) -> float:
        """The mean claim round trip (0 before the first claim)."""
        calls = self.claim_calls - self.claim_errors
        return self.claim_latency_seconds_total / calls if calls > 0 else 0.0

    @classmethod
    def combine(cls, parts: Iterable[DispatchStats]) -> DispatchStats:
        """Sum counters over ``parts``; maxima (latency max, queue lag) take the largest."""
        return cls(**_combined([asdict(part) for part in parts]))


_MAXED = frozenset({"claim_latency_seconds_max", "queue_lag_seconds"})
_OUTCOME_FIELD = {
    ClaimedTaskOutcome.SUCCEEDED: "succeeded",
    ClaimedTaskOutcome.RETRIED: "retried",
    ClaimedTaskOutcome.FAILED: "failed_permanently",
    ClaimedTaskOutcome.LEASE_LOST: "lease_lost",
    ClaimedTaskOutcome.RELEASED: "released_on_shutdown",
    ClaimedTaskOutcome.STORE_ERROR: "store_errors",
    ClaimedTaskOutcome.CANCELLED: "cancelled",
    ClaimedTaskOutcome.SNOOZED: "snoozed",
}


_ZEROS = {spec.name: spec.default for spec in fields(DispatchStats)}


def _combined(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The counters of ``parts`` combined (see :meth:`DispatchStats.combine`)."""
    if len(parts) == 1:
        return parts[0]
    values = {name: sum(part[name] for part in parts) for name in _ZEROS}
    for name in _MAXED:
        values[name] = max((part[name] for part in parts), default=0.0)
    values["last_claim_latency_seconds"] = parts[-1]["last_claim_latency_seconds"] if parts else 0.0
    return values


class DispatchStatsRecorder:
    """Mutable per-lane dispatch counters; read them through :class:`DispatchStats` snapshots.

    The worker records into it; metrics exporters and tests read :meth:`lane` and
    :meth:`total`. Lanes are any hashable value (normally the product's lane enum).
    """

    __slots__ = ("_lanes",)

    def __init__(self, lanes: Iterable[Hashable] = ()) -> None:
        """Create a recorder, optionally pre-registering ``lanes`` so they report zeros."""
        self._lanes: dict[Hashable, dict[str, Any]] = {}
        for lane in lanes:
            self._of(lane)

    def _of(self, lane: Hashable) -> dict[str, Any]:
        counters = self._lanes.get(lane)
        if counters is None:
            counters = self._lanes[lane] = dict(_ZEROS)
        return counters

    def record_claim(
        self,
        lane: Hashable,
        *,
        claimed: int,
        rescued: int,
        latency_seconds: float,
        queue_lag_seconds: float,
    ) -> None:
        """Record one successful claim round trip of ``lane``."""
        counters = self._of(lane)
        counters["claim_calls"] += 1
        counters["claimed"] += claimed
        counters["rescued"] += rescued
        counters["claim_latency_seconds_total"] += latency_seconds
        most = max(counters["claim_latency_seconds_max"], latency_seconds)
        counters["claim_latency_seconds_max"] = most
        counters["last_claim_latency_seconds"] = latency_seconds
        counters["queue_lag_seconds"] = queue_lag_seconds

    def record_claim_error(self, lane: Hashable) -> None:
        """Record a claim round trip of ``lane`` that raised."""
        counters = self._of(lane)
        counters["claim_calls"] += 1
        counters["claim_errors"] += 1

    def record_started(self, lane: Hashable) -> None:
        """Record that one claimed task of ``lane`` started executing."""
        self._of(lane)["in_flight"] += 1

    def record_outcome(self, lane: Hashable, outcome: ClaimedTaskOutcome) -> None:
        """Record how one execution of ``lane`` ended (and that it is no longer in flight)."""
        counters = self._of(lane)
        counters["in_flight"] = max(counters["in_flight"] - 1, 0)
        counters[_OUTCOME_FIELD[outcome]] += 1

    def lane(self, lane: Hashable) -> DispatchStats:
        """A snapshot of ``lane``'s counters (zeros for a lane never seen)."""
        counters = self._lanes.get(lane)
        return DispatchStats(**counters) if counters is not None else DispatchStats()

    def lanes(self) -> dict[Hashable, DispatchStats]:
        """A snapshot of every lane seen so far, in first-seen order."""
        return {lane: DispatchStats(**counters) for lane, counters in self._lanes.items()}

    def total(self) -> DispatchStats:
        """The counters summed over every lane."""
        # From the counters themselves: a metrics scrape or a poll calls this often.
        return DispatchStats(**_combined(list(self._lanes.values())))

    def __repr__(self) -> str:
        return f"DispatchStatsRecorder(lanes={len(self._lanes)}, total={self.total()!r})"
