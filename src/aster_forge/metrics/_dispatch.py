"""Prometheus collector for dispatch statistics, read at scrape time.

The dispatcher keeps its own counters (a
:class:`~aster_forge.tasks.DispatchStatsRecorder`); this collector turns a snapshot
of them into metric families whenever the registry is scraped, so nothing has to
push updates. Labels stay low-cardinality: ``lane`` (the product's lane enum) and
``outcome`` (six fixed values), never task ids or kinds.

Metrics:

- ``dispatch_tasks_claimed_total{lane}``: tasks claimed (rescues included).
- ``dispatch_tasks_rescued_total{lane}``: claims of tasks whose previous lease expired.
- ``dispatch_task_outcomes_total{lane,outcome}``: finished executions by outcome
  (``succeeded``, ``retried``, ``failed``, ``lease_lost``, ``released``, ``store_error``,
  ``cancelled``, ``snoozed``).
- ``dispatch_claim_calls_total{lane}`` / ``dispatch_claim_errors_total{lane}``.
- ``dispatch_claim_latency_seconds{lane}``: a summary (``_count``/``_sum``) of
  successful claim round trips; ``dispatch_claim_latency_max_seconds{lane}`` their maximum.
- ``dispatch_queue_lag_seconds{lane}``: how long the oldest task of the latest claim
  had been due.
- ``dispatch_in_flight{lane}``: tasks executing now.
- ``dispatch_lane_limit{lane}``: the lane's concurrency limit, when limits are given.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Hashable, Iterator, Mapping
from typing import Any, Protocol, runtime_checkable

from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector

from ..tasks._internal import DispatchStats

__all__ = ["DispatchStatsSource", "PrometheusDispatchStatsCollector", "lane_label"]

# (outcome label, DispatchStats field), in a fixed order.
_OUTCOMES: tuple[tuple[str, str], ...] = (
    ("succeeded", "succeeded"),
    ("retried", "retried"),
    ("failed", "failed_permanently"),
    ("lease_lost", "lease_lost"),
    ("released", "released_on_shutdown"),
    ("store_error", "store_errors"),
    ("cancelled", "cancelled"),
    ("snoozed", "snoozed"),
)


@runtime_checkable
class DispatchStatsSource(Protocol):
    """Anything exposing per-lane :class:`~aster_forge.tasks.DispatchStats` snapshots.

    :class:`~aster_forge.tasks.DispatchStatsRecorder` satisfies it.
    """

    def lanes(self) -> Mapping[Hashable, DispatchStats]:
        """Return a snapshot per lane."""
        ...


def lane_label(lane: object) -> str:
    """Return the metrics label of a lane: an enum's value, else ``str(lane)``."""
    if isinstance(lane, enum.Enum):
        return str(lane.value)
    return str(lane)


class PrometheusDispatchStatsCollector(Collector):
    """Exposes a dispatcher's per-lane statistics on a Prometheus registry.

    Example::

        registry = CollectorRegistry()
        PrometheusDispatchStatsCollector(stats_recorder, registry, lane_limits={"media": 2})

    Args:
        source: The statistics (read on every scrape), or a callable returning them
            (or ``None`` while there is no dispatcher, e.g. this instance does not
            hold the runtime lease: then no lane series are exposed).
        registry: When given, the collector registers itself there.
        lane_limits: Concurrency limit per lane (keys: lanes or their labels); a
            mapping, or a callable returning one at scrape time. Exposed as
            ``dispatch_lane_limit`` and makes lanes without activity report zeros.
    """

    def __init__(
        self,
        source: DispatchStatsSource | Callable[[], DispatchStatsSource | None],
        registry: CollectorRegistry | None = None,
        *,
        lane_limits: Mapping[Any, int] | Callable[[], Mapping[Any, int]] | None = None,
    ) -> None:
        if not isinstance(source, DispatchStatsSource) and not callable(source):
            raise TypeError(
                "source must have a lanes() method returning DispatchStats (or be a "
                f"callable returning such an object), got {type(source).__name__}"
            )
        self._source = source
        self._lane_limits = lane_limits
        if registry is not None:
            registry.register(self)

    def _limits(self) -> dict[str, int]:
        limits = self._lane_limits
        if limits is None:
            return {}
        mapping = limits() if callable(limits) else limits
        return {lane_label(lane): int(limit) for lane, limit in mapping.items()}

    def _snapshot(self) -> dict[str, DispatchStats]:
        stats: dict[str, DispatchStats] = {}
        source = self._source
        current = source if isinstance(source, DispatchStatsSource) else source()
        lanes = {} if current is None else current.lanes()
        for lane, snapshot in lanes.items():
            label = lane_label(lane)
            previous = stats.get(label)
            # Two lane objects with one label (unusual) are summed, never dropped.
            stats[label] = (
                snapshot if previous is None else DispatchStats.combine((previous, snapshot))
            )
        for label in self._limits():
            stats.setdefault(label, DispatchStats())
        return stats

    def describe(self) -> Iterator[Metric]:
        """Yield the metric families without samples (for duplicate checks)."""
        yield from self._families({}, {})

    def collect(self) -> Iterator[Metric]:
        """Yield the metric families for the current snapshot."""
        yield from self._families(self._snapshot(), self._limits())

    def _families(
        self, stats: Mapping[str, DispatchStats], limits: Mapping[str, int]
    ) -> Iterator[Metric]:
        lane = ["lane"]
        claimed = CounterMetricFamily(
            "dispatch_tasks_claimed", "Tasks claimed per lane (rescues included).", labels=lane
        )
        rescued = CounterMetricFamily(
            "dispatch_tasks_rescued",
            "Claims of tasks whose previous lease had expired.",
            labels=lane,
        )
        outcomes = CounterMetricFamily(
            "dispatch_task_outcomes",
            "Finished executions per lane and outcome.",
            labels=["lane", "outcome"],
        )
        calls = CounterMetricFamily(
            "dispatch_claim_calls", "Claim round trips per lane.", labels=lane
        )
        errors = CounterMetricFamily(
            "dispatch_claim_errors", "Claim round trips that raised.", labels=lane
        )
        latency = SummaryMetricFamily(
            "dispatch_claim_latency_seconds",
            "Successful claim round-trip time per lane.",
            labels=lane,
        )
        latency_max = GaugeMetricFamily(
            "dispatch_claim_latency_max_seconds",
            "The slowest claim round trip per lane.",
            labels=lane,
        )
        lag = GaugeMetricFamily(
            "dispatch_queue_lag_seconds",
            "How long the oldest task of the latest claim had been due.",
            labels=lane,
        )
        in_flight = GaugeMetricFamily(
            "dispatch_in_flight", "Tasks executing now per lane.", labels=lane
        )
        limit = GaugeMetricFamily("dispatch_lane_limit", "Concurrency limit per lane.", labels=lane)
        for name, item in stats.items():
            claimed.add_metric([name], item.claimed)
            rescued.add_metric([name], item.rescued)
            for outcome, field in _OUTCOMES:
                outcomes.add_metric([name, outcome], getattr(item, field))
            calls.add_metric([name], item.claim_calls)
            errors.add_metric([name], item.claim_errors)
            latency.add_metric(
                [name],
                count_value=max(item.claim_calls - item.claim_errors, 0),
                sum_value=item.claim_latency_seconds_total,
            )
            latency_max.add_metric([name], item.claim_latency_seconds_max)
            lag.add_metric([name], item.queue_lag_seconds)
            in_flight.add_metric([name], item.in_flight)
        for name, value in limits.items():
            limit.add_metric([name], value)
        yield from (
            claimed,
            rescued,
            outcomes,
            calls,
            errors,
            latency,
            latency_max,
            lag,
            in_flight,
            limit,
        )
