"""The queue and lease figures a forge's ``/metrics`` exports beside dispatch and health.

Read from the store, so a web process that runs no workers exports them too:

- ``task_queue_depth{lane,status}``: unfinished tasks, ``status`` ``pending`` (due or
  not) or ``running`` (every instance's).
- ``task_queue_due{lane}``: pending tasks whose ``run_at`` has passed.
- ``task_queue_lease_expired{lane}``: running tasks whose lease has expired: their
  worker is gone and the next claim of the lane rescues them.
- ``task_queue_lag_seconds{lane}``: how long the oldest due task has waited.
- ``task_lane_cluster_limit{lane}``: the declared cluster-wide limit of each lane that
  has one (from the declarations, no read): compare it with
  ``task_queue_depth{status="running"}``, which counts what runs against it.
- ``task_lane_partition_limit{lane}``: the declared per-partition limit of each lane
  that has one (from the declarations, no read).
- ``task_lane_partition_rate_limit{lane}`` and
  ``task_lane_partition_rate_period_seconds{lane}``: the declared per-partition rate
  limit of each lane that has one.
- ``task_lane_partitions_waiting{lane}``: how many partitions of the lane have due
  pending tasks (0 for a lane without partitioned tasks due), from the lane counts.
- ``task_lane_rate_limit{lane}`` and ``task_lane_rate_period_seconds{lane}``: the
  declared rate limit (starts per period) of each lane that has one.
- ``task_lane_rate_remaining{lane}``: the starts left in that lane's current window,
  from the stored lane state (read with the counts, only when a lane has a rate limit).

These are measured at scrape time by one ``lane_counts`` read over the forge's
declared lanes (it reads only pending and running rows), bounded by a timeout; a read
that fails or times out leaves them out of that scrape. The same figures come from
every process, so aggregate them with ``max``, not ``sum``.

- ``dispatch_tasks_lease_expired_total{lane,outcome}``: tasks this process's claims
  ended because their lease had expired: ``failed`` (no attempt left) or
  ``cancelled`` (a cancel was pending). A rescued task with attempts left is counted
  by ``dispatch_tasks_rescued_total`` when it is claimed again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ..runtime._internal import utc_now
from ..tasks._internal import TaskLaneCounts, TaskStatus, rate_remaining

if TYPE_CHECKING:
    from ._app import Forge

__all__ = ["SCRAPE_READ_TIMEOUT", "ForgeQueueCollector"]

logger = logging.getLogger("aster_forge.forge")

SCRAPE_READ_TIMEOUT = timedelta(seconds=2)
"""How long a scrape waits for the store's lane counts."""

_OUTCOMES = ((TaskStatus.FAILED, "failed"), (TaskStatus.CANCELLED, "cancelled"))


class ForgeQueueCollector(Collector):
    """Exposes the forge's queue figures (read by :meth:`refresh` before each scrape)
    and this process's lease-expiry endings.

    Args:
        forge: The forge whose lanes and store are read.
        registry: Where the collector registers itself.
    """

    def __init__(self, forge: Forge, registry: CollectorRegistry) -> None:
        self._forge = forge
        self._counts: Sequence[TaskLaneCounts] = ()
        self._remaining: dict[str, int] = {}
        registry.register(self)

    async def refresh(self) -> None:
        """Read the lane counts for the next collection (none when the read fails)."""
        self._counts = ()
        self._remaining = {}
        lanes = sorted(self._forge.lanes)
        rated = self._forge.lane_rate_limits
        store = self._forge.backend.task_store
        try:
            async with asyncio.timeout(SCRAPE_READ_TIMEOUT.total_seconds()):
                self._counts = await store.lane_counts(lanes)
                if rated:
                    states = {s.lane: s for s in await store.lane_states(sorted(rated))}
                    now = utc_now()
                    self._remaining = {
                        lane: rate_remaining(rate, states.get(lane), now)
                        for lane, rate in rated.items()
                    }
        except Exception as exc:  # a timeout too
            # The scrape still answers (health and dispatch families); the queue gauges
            # are absent, which an alert on absent() notices.
            logger.warning("queue figures skipped in this scrape: %s", type(exc).__name__)

    def describe(self) -> Iterator[Metric]:
        """Yield the metric families without samples (for duplicate checks)."""
        yield from self._families((), {})

    def collect(self) -> Iterator[Metric]:
        """Yield the families for the counts read by the last :meth:`refresh`."""
        yield from self._families(self._counts, self._endings())

    def _endings(self) -> dict[str, dict[TaskStatus, int]]:
        endings = self._forge.backend.builtin_task_store.lease_expiry_counts()
        if self._forge.current_dispatcher() is not None:
            # Lanes this process claims report zeros before their first ending.
            for lane in self._forge.lanes:
                endings.setdefault(lane, dict.fromkeys(TaskStatus, 0))
        return endings

    def _families(
        self, counts: Sequence[TaskLaneCounts], endings: dict[str, dict[TaskStatus, int]]
    ) -> Iterator[Metric]:
        depth = GaugeMetricFamily(
            "task_queue_depth",
            "Unfinished tasks per lane and status (pending or running), from the store.",
            labels=["lane", "status"],
        )
        due = GaugeMetricFamily(
            "task_queue_due", "Pending tasks whose run_at has passed.", labels=["lane"]
        )
        expired = GaugeMetricFamily(
            "task_queue_lease_expired",
            "Running tasks whose lease has expired (their worker is gone).",
            labels=["lane"],
        )
        lag = GaugeMetricFamily(
            "task_queue_lag_seconds", "How long the oldest due task has waited.", labels=["lane"]
        )
        waiting = GaugeMetricFamily(
            "task_lane_partitions_waiting",
            "Partitions of the lane with due pending tasks, from the store.",
            labels=["lane"],
        )
        for item in counts:
            depth.add_metric([item.lane, TaskStatus.PENDING.value], item.pending)
            depth.add_metric([item.lane, TaskStatus.RUNNING.value], item.running)
            due.add_metric([item.lane], item.due)
            expired.add_metric([item.lane], item.expired)
            lag.add_metric([item.lane], item.queue_lag_seconds)
            waiting.add_metric([item.lane], item.partitions_waiting)
        ended = CounterMetricFamily(
            "dispatch_tasks_lease_expired",
            "Tasks this process's claims ended because their lease had expired.",
            labels=["lane", "outcome"],
        )
        for lane in sorted(endings):
            for status, outcome in _OUTCOMES:
                ended.add_metric([lane, outcome], endings[lane].get(status, 0))
        capped = GaugeMetricFamily(
            "task_lane_cluster_limit",
            "The most running tasks of the lane across every instance (declared).",
            labels=["lane"],
        )
        for lane, limit in sorted(self._forge.lane_cluster_limits.items()):
            capped.add_metric([lane], limit)
        per_partition = GaugeMetricFamily(
            "task_lane_partition_limit",
            "The most running tasks of one partition of the lane across every instance (declared).",
            labels=["lane"],
        )
        for lane, limit in sorted(self._forge.lane_partition_limits.items()):
            per_partition.add_metric([lane], limit)
        rate = GaugeMetricFamily(
            "task_lane_rate_limit",
            "The most task starts of the lane per rate window across every instance (declared).",
            labels=["lane"],
        )
        period = GaugeMetricFamily(
            "task_lane_rate_period_seconds",
            "The length of the lane's rate window (declared).",
            labels=["lane"],
        )
        for lane, (count, window) in sorted(self._forge.lane_rate_limits.items()):
            rate.add_metric([lane], count)
            period.add_metric([lane], window.total_seconds())
        partition_rate = GaugeMetricFamily(
            "task_lane_partition_rate_limit",
            "The most task starts of one partition of the lane per window (declared).",
            labels=["lane"],
        )
        partition_period = GaugeMetricFamily(
            "task_lane_partition_rate_period_seconds",
            "The length of the lane's per-partition rate window (declared).",
            labels=["lane"],
        )
        for lane, (count, window) in sorted(self._forge.lane_partition_rate_limits.items()):
            partition_rate.add_metric([lane], count)
            partition_period.add_metric([lane], window.total_seconds())
        remaining = GaugeMetricFamily(
            "task_lane_rate_remaining",
            "Task starts left in the lane's current rate window, from the store.",
            labels=["lane"],
        )
        for lane, left in sorted(self._remaining.items()):
            remaining.add_metric([lane], left)
        yield from (depth, due, expired, lag, waiting, ended, capped, per_partition)
        yield from (rate, period, remaining, partition_rate, partition_period)
