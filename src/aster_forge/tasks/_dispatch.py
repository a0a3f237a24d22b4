"""Dispatch settings and the claim primitive: lane limits, poll backoff, wake-ups, claims."""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from collections.abc import Hashable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Literal

from .errors import TaskDispatchConfigError

__all__ = [
    "DispatchBackoff",
    "DispatchDrainResult",
    "DispatchPollConfig",
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
    """

    lane: Hashable
    max_concurrency: int
    claim_batch: int | None = None

    def __post_init__(self) -> None:
        if self.max_concurrency < 1:
            raise TaskDispatchConfigError(
                f"lane {self.lane!r}: max_concurrency must be >= 1, got {self.max_concurrency}"
            )
        if self.claim_batch is not None and self.claim_batch < 1:
            raise TaskDispatchConfigError(
                f"lane {self.lane!r}: claim_batch must be >= 1, got {self.claim_batch}"
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

    def wake(self) -> None:
        """Wake the waiting worker now, or make its next wait return at once."""
        self.set()
        for other in getattr(self, "_forward", ()):
            other.wake()

    def forward_to(self, other: DispatchWakeSignal) -> None:
        """Make every later :meth:`wake` of this signal wake ``other`` too."""
        forward: list[DispatchWakeSignal] = self.__dict__.setdefault("_forward", [])
        if other not in forward:
            forward.append(other)

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
    """What one :func:`drain_dispatcher` call claimed.

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
