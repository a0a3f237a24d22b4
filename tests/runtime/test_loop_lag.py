"""The event-loop lag probe: samples on the injected clock, health, component, log line."""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta

import pytest

from aster_forge.runtime import (
    AsterRuntime,
    CancellationToken,
    EventLoopLagProbe,
    HealthCheckScope,
    HealthStatus,
)
from aster_forge.testing import ManualClock


class StallingClock:
    """A manual clock whose monotonic reading jumps, as if the loop had been blocked."""

    def __init__(self, inner: ManualClock) -> None:
        self.inner = inner
        self.stall = 0.0

    def now(self) -> datetime:
        return self.inner.now()

    def monotonic(self) -> float:
        return self.inner.monotonic() + self.stall

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


async def test_the_probe_measures_lag_and_degrades_health(
    caplog: pytest.LogCaptureFixture,
) -> None:
    inner = ManualClock()
    clock = StallingClock(inner)
    probe = EventLoopLagProbe(
        interval=timedelta(seconds=1), degraded_after=timedelta(milliseconds=200), clock=clock
    )
    token = CancellationToken()
    run = asyncio.create_task(probe.run(token), name="test-probe")
    await inner.wait_for_sleepers(1)
    await inner.advance(1)
    await inner.wait_for_sleepers(1)
    assert probe.samples == 1 and probe.last_lag_seconds == 0.0
    assert (await probe.check()).status is HealthStatus.HEALTHY
    with caplog.at_level(logging.WARNING, logger="aster_forge.runtime.loop"):
        clock.stall = 1.5  # the timer fired 1.5 s late: something held the loop
        await inner.advance(1)
        await inner.wait_for_sleepers(1)
    assert probe.last_lag_seconds == pytest.approx(1.5)
    report = await probe.check()
    assert report.status is HealthStatus.DEGRADED
    lag = report.detail("lag")
    assert lag is not None and lag.value == 1500
    assert "the event loop was blocked for 1.500s" in caplog.text
    await inner.advance(1)  # back to normal
    await inner.wait_for_sleepers(1)
    assert (await probe.check()).status is HealthStatus.HEALTHY
    assert probe.max_lag_seconds == pytest.approx(1.5)
    token.cancel()
    await run


async def test_the_probe_component_reports_in_runtime_health() -> None:
    probe = EventLoopLagProbe()
    built = AsterRuntime(components=[probe.component()], install_signal_handlers=False)
    assert [d.name for d in built.descriptors()] == ["event_loop"]
    probe.record(5.0)
    report = await built.run_health(HealthCheckScope.READINESS)
    (component,) = report.components
    assert (component.name, component.status) == ("event_loop", HealthStatus.DEGRADED)


def test_invalid_probe_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="positive"):
        EventLoopLagProbe(interval=timedelta(0))
