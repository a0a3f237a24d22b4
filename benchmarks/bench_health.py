"""Health registry benchmark: concurrency of slow checks and per-check overhead.

Goals: 1,000 checks that each await 10 ms finish in under 60 ms wall
(they run concurrently, not one after another); 1,000 no-op checks cost under 30 µs
each. Run with ``python -m benchmarks bench_health`` (or ``make bench``).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable

from aster_forge.runtime import (
    HealthCheckOptions,
    HealthCheckRegistry,
    HealthCheckScope,
    HealthComponentReport,
    HealthStatus,
)

CHECKS = 1_000
SLEEP_SECONDS = 0.010
ROUNDS = 7
SLOW_GOAL_SECONDS = 0.060
NOOP_GOAL_SECONDS = 30e-6


def _sleeping(name: str) -> Callable[[], Awaitable[HealthComponentReport]]:
    report = HealthComponentReport.healthy(name, "ok")

    async def check() -> HealthComponentReport:
        await asyncio.sleep(SLEEP_SECONDS)
        return report

    return check


def _noop(name: str) -> Callable[[], Awaitable[HealthComponentReport]]:
    report = HealthComponentReport.healthy(name, "ok")

    async def check() -> HealthComponentReport:
        return report

    return check


def _registry(
    factory: Callable[[str], Callable[[], Awaitable[HealthComponentReport]]],
) -> HealthCheckRegistry:
    registry = HealthCheckRegistry()
    for i in range(CHECKS):
        name = f"check_{i:04d}"
        registry.register_with_options(name, HealthCheckOptions.required(None), factory(name))
    return registry


async def _measure(registry: HealthCheckRegistry) -> list[float]:
    await registry.run_scope(HealthCheckScope.DIAGNOSTICS)  # warm-up
    timings = []
    for _ in range(ROUNDS):
        started = time.perf_counter()
        report = await registry.run_scope(HealthCheckScope.DIAGNOSTICS)
        timings.append(time.perf_counter() - started)
        if len(report.components) != CHECKS or report.status() is not HealthStatus.HEALTHY:
            raise SystemExit(f"benchmark run failed: {report.issue_summary()}")
    return timings


async def _run() -> None:
    slow = await _measure(_registry(_sleeping))
    noop = await _measure(_registry(_noop))
    slow_median = statistics.median(slow)
    noop_median = statistics.median(noop)
    per_check = noop_median / CHECKS
    print(
        f"health: {CHECKS} checks x {SLEEP_SECONDS * 1e3:.0f} ms sleep: "
        f"median {slow_median * 1e3:.1f} ms wall, best {min(slow) * 1e3:.1f} ms "
        f"(goal < {SLOW_GOAL_SECONDS * 1e3:.0f} ms) "
        f"{'OK' if slow_median < SLOW_GOAL_SECONDS else 'MISSED'}"
    )
    print(
        f"health: {CHECKS} no-op checks: median {noop_median * 1e3:.2f} ms wall, "
        f"{per_check * 1e6:.1f} µs per check, best {min(noop) / CHECKS * 1e6:.1f} µs "
        f"(goal < {NOOP_GOAL_SECONDS * 1e6:.0f} µs) "
        f"{'OK' if per_check < NOOP_GOAL_SECONDS else 'MISSED'}"
    )


def main() -> None:
    """Run the health benchmark and print the figures."""
    asyncio.run(_run())


if __name__ == "__main__":
    main()
