"""Event-loop blocking made visible: a lag probe (health, metrics) and a per-step detector.

Code that never yields (a CPU loop, a blocking driver call, ``time.sleep``) stops every
other coroutine of the process: heartbeats, health checks, signal handling. The probe
measures how late the loop runs a timer; :func:`watch_blocking_steps` times each step of
one coroutine so the log can name the coroutine that blocked.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Coroutine, Generator
from datetime import timedelta
from typing import Any, TypeVar

from ._cancellation import CancellationToken
from ._clock import Clock, SystemClock
from ._component import (
    RuntimeComponentBundleRegistration,
    RuntimeComponentKind,
    RuntimeComponentRegistry,
    runtime_component,
)
from ._health import HealthComponentDetailValue, HealthComponentReport
from ._health_registry import HealthCheckOptions
from ._race import RaceWinner, race

__all__ = ["EventLoopLagProbe", "watch_blocking_steps"]

logger = logging.getLogger("aster_forge.runtime.loop")

T = TypeVar("T")


class EventLoopLagProbe:
    """Measures event-loop lag: how much later than planned a timer callback runs.

    :meth:`run` sleeps ``interval`` again and again and records the overshoot; a lag over
    ``degraded_after`` is logged as a WARNING and makes :meth:`check` report Degraded
    (until a later sample is back under it). Register it with :meth:`component` (a
    background task plus a health check named ``event_loop``), and export it with
    :func:`aster_forge.metrics.register_event_loop_lag_metrics`.

    Args:
        interval: How often the loop is sampled.
        degraded_after: The lag from which the loop counts as blocked.
        clock: The clock the samples are measured on (default :class:`SystemClock`).
    """

    def __init__(
        self,
        *,
        interval: timedelta = timedelta(milliseconds=500),
        degraded_after: timedelta = timedelta(milliseconds=250),
        clock: Clock | None = None,
    ) -> None:
        if interval <= timedelta(0) or degraded_after <= timedelta(0):
            raise ValueError("EventLoopLagProbe interval and degraded_after must be positive")
        self._interval = interval.total_seconds()
        self._degraded_after = degraded_after.total_seconds()
        self._clock = clock or SystemClock()
        self.last_lag_seconds = 0.0
        """The lag of the latest sample."""
        self.max_lag_seconds = 0.0
        """The largest lag seen since the probe was created."""
        self.samples = 0
        """How many samples were taken."""

    async def run(self, token: CancellationToken) -> None:
        """Sample the loop until ``token`` is cancelled."""
        clock = self._clock
        while not token.cancelled:
            planned = clock.monotonic() + self._interval
            winner = await race(
                seconds=self._interval, clock=clock, token=token, name="aster-forge:loop-lag"
            )
            if winner is RaceWinner.TOKEN:
                return
            self.record(max(clock.monotonic() - planned, 0.0))

    def record(self, lag_seconds: float) -> None:
        """Record one sample (what :meth:`run` measured)."""
        self.samples += 1
        self.last_lag_seconds = lag_seconds
        self.max_lag_seconds = max(self.max_lag_seconds, lag_seconds)
        if lag_seconds > self._degraded_after:
            logger.warning(
                "the event loop was blocked for %.3fs (a task body or callback did not yield; "
                "plain def task bodies run in a worker thread)",
                lag_seconds,
                extra={"loop_lag_seconds": lag_seconds},
            )

    async def check(self, name: str = "event_loop") -> HealthComponentReport:
        """A health check: Degraded while the latest sample is over ``degraded_after``."""
        if self.last_lag_seconds > self._degraded_after:
            report = HealthComponentReport.degraded(name, "the event loop is blocked")
        else:
            report = HealthComponentReport.healthy(name, "the event loop is responsive")
        lag = HealthComponentDetailValue.duration_millis(round(self.last_lag_seconds * 1000))
        return report.with_detail("lag", lag)

    def component(self, name: str = "event_loop") -> RuntimeComponentBundleRegistration[Any]:
        """A runtime component: the sampling task and a readiness/liveness check."""

        def register(registry: RuntimeComponentRegistry) -> None:
            kind = RuntimeComponentKind.CORE
            # Optional: a blocked loop degrades readiness, it does not fail it.
            registry.component_health_with_options(
                name, kind, name, HealthCheckOptions.optional(), lambda: self.check(name)
            )
            registry.component_task(name, kind, "loop_lag_probe", self.run)

        return runtime_component(register)

    def __repr__(self) -> str:
        return (
            f"EventLoopLagProbe(last={self.last_lag_seconds:.3f}s, max={self.max_lag_seconds:.3f}s)"
        )


class _StepTimed(Coroutine[Any, Any, T]):
    """A coroutine whose every step (one ``send``/``throw``) is timed on a clock."""

    __slots__ = ("_coro", "_now", "_on_block", "_threshold")

    def __init__(
        self,
        coro: Coroutine[Any, Any, T],
        now: Callable[[], float],
        threshold: float,
        on_block: Callable[[float], None],
    ) -> None:
        # Not coro.send bound once: one more object per running task for the garbage
        # collector to track, for a saving of one attribute lookup per step.
        self._coro = coro
        self._now = now
        self._threshold = threshold
        self._on_block = on_block

    def send(self, value: Any) -> Any:
        now = self._now
        started = now()
        try:
            return self._coro.send(value)
        finally:
            if (took := now() - started) > self._threshold:
                self._on_block(took)

    def throw(self, *args: Any) -> Any:
        now = self._now
        started = now()
        try:
            return self._coro.throw(*args)
        finally:
            if (took := now() - started) > self._threshold:
                self._on_block(took)

    def close(self) -> None:
        self._coro.close()

    def __await__(self) -> Generator[Any, None, T]:
        return self._coro.__await__()


def watch_blocking_steps(
    coro: Coroutine[Any, Any, T],
    *,
    threshold: timedelta,
    on_block: Callable[[float], None],
    clock: Clock | None = None,
) -> Coroutine[Any, Any, T]:
    """Wrap ``coro`` so a step that holds the loop longer than ``threshold`` is reported.

    A step is what runs between two awaits that suspend; ``on_block(seconds)`` is called
    after such a step, in the coroutine's own task, so the caller can name it in a log
    line. Run the wrapper with :func:`asyncio.create_task` like the coroutine itself.

    Args:
        coro: The coroutine to watch.
        threshold: The longest acceptable step.
        on_block: Called with the step's duration when it exceeded ``threshold``.
        clock: The clock steps are timed on (default :class:`SystemClock`).
    """
    # The system clock's reading is time.monotonic itself: calling it directly saves two
    # Python frames per step.
    now = time.monotonic if clock is None or type(clock) is SystemClock else clock.monotonic
    return _StepTimed(coro, now, threshold.total_seconds(), on_block)
