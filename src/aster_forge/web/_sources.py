"""``AdminSources``: what the admin API and dashboard read from (all optional)."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..metrics._internal import DispatchStatsSource
from ..runtime import AsterRuntime, RuntimeComponentRegistry
from ..runtime._internal import Clock, SystemClock
from ..tasks import BackgroundTaskStore, ScheduledTaskStore, TaskWorker
from ..tasks._internal import DispatchStats, TaskAdminStore, TaskRateLimit
from ._health import HealthSource
from ._leases import RuntimeLeaseSource
from ._tasks_json import label_keys

__all__ = ["AdminSources", "DispatcherSource", "LaneLimits"]

LaneLimits = Mapping[Any, int] | Callable[[], Mapping[Any, int]]
"""Lane concurrency limits: a mapping (lane or wire value -> limit) or a callable."""

DispatcherSource = TaskWorker[Any] | Callable[[], TaskWorker[Any] | None]
"""A task worker, or a callable returning the current one (``None`` while this instance
holds no runtime lease and so runs no worker)."""


@dataclass(frozen=True, slots=True)
class AdminSources:
    """Where the admin API reads from; every field is optional.

    Attributes:
        runtime: Supplies the component registry and the last startup/shutdown reports.
        components: The component registry (default: ``runtime.registry``).
        task_store: The task table (list, show, retry, cancel, lane counts).
        scheduled_store: The scheduled task catalog.
        leases: Lists runtime leases: any :class:`~aster_forge.runtime.RuntimeLeaseStore`
            (e.g. the process's :class:`~aster_forge.db.RuntimeLeaseDbStore`) or a
            :class:`RuntimeLeaseTableReader`.
        dispatcher: This process's dispatcher (lane limits, in-flight counts, stats),
            or a callable returning it.
        dispatch_stats: Dispatch statistics when there is no ``dispatcher``.
        lane_limits: Lane limits when there is no ``dispatcher``.
        cluster_limits: Each lane's cluster-wide limit when there is no ``dispatcher``
            (only lanes with one).
        partition_limits: Each lane's per-partition limit when there is no
            ``dispatcher`` (only lanes with one).
        rate_limits: Each lane's rate limit ``(count, period)`` when there is no
            ``dispatcher`` (only lanes with one).
        partition_rate_limits: Each lane's per-partition rate limit when there is no
            ``dispatcher`` (only lanes with one).
        lanes: Lanes to list even when they are idle (wire values or enum members).
        health: What ``/api/health`` runs; default ``runtime``, else ``components``.
        clock: Judges "due"/"claimed" for scheduled rows.
        title: The service title shown by the dashboard and in the OpenAPI document.
    """

    runtime: AsterRuntime | None = None
    components: RuntimeComponentRegistry | None = None
    task_store: BackgroundTaskStore | None = None
    scheduled_store: ScheduledTaskStore | None = None
    leases: RuntimeLeaseSource | None = None
    dispatcher: DispatcherSource | None = None
    dispatch_stats: DispatchStatsSource | None = None
    lane_limits: LaneLimits | None = None
    cluster_limits: Mapping[Any, int] | None = None
    partition_limits: Mapping[Any, int] | None = None
    rate_limits: Mapping[Any, TaskRateLimit] | None = None
    partition_rate_limits: Mapping[Any, TaskRateLimit] | None = None
    lanes: Sequence[Hashable] = ()
    health: HealthSource | None = None
    clock: Clock = field(default_factory=SystemClock)
    title: str = "aster-forge"

    @property
    def registry(self) -> RuntimeComponentRegistry | None:
        """The component registry to show (explicit, else the runtime's)."""
        if self.components is not None:
            return self.components
        return None if self.runtime is None else self.runtime.registry

    def health_source(self) -> HealthSource | None:
        """What the health view runs (explicit, else the runtime, else the registry)."""
        if self.health is not None:
            return self.health
        return self.runtime if self.runtime is not None else self.components

    def features(self) -> dict[str, bool]:
        """Which views are configured (the dashboard hides the others)."""
        return {
            "tasks": self.task_store is not None,
            "lanes": self.task_store is not None
            or self.dispatcher is not None
            or self.dispatch_stats is not None
            or self.lane_limits is not None,
            "scheduled": self.scheduled_store is not None,
            "leases": self.leases is not None,
            "components": self.registry is not None,
            "reports": self.registry is not None,
            "health": self.health_source() is not None,
            "overview": isinstance(self.task_store, TaskAdminStore),
        }

    def current_dispatcher(self) -> TaskWorker[Any] | None:
        """Return the dispatcher (calling the factory), or ``None``."""
        source = self.dispatcher
        if source is None or isinstance(source, TaskWorker):
            return source
        return source()

    def cluster_view(self) -> dict[str, int]:
        """Each lane's cluster-wide limit (lanes with one), by wire value."""
        dispatcher = self.current_dispatcher()
        if dispatcher is not None:
            return label_keys(
                {c.lane: c.cluster_limit for c in dispatcher.lanes if c.cluster_limit is not None}
            )
        return label_keys(dict(self.cluster_limits or {}))

    def partition_view(self) -> dict[str, int]:
        """Each lane's per-partition limit (lanes with one), by wire value."""
        dispatcher = self.current_dispatcher()
        if dispatcher is not None:
            return label_keys(
                {
                    c.lane: c.partition_limit
                    for c in dispatcher.lanes
                    if c.partition_limit is not None
                }
            )
        return label_keys(dict(self.partition_limits or {}))

    def rate_view(self) -> dict[str, TaskRateLimit]:
        """Each lane's rate limit (lanes with one), by wire value."""
        dispatcher = self.current_dispatcher()
        if dispatcher is not None:
            return label_keys(
                {c.lane: c.rate_limit for c in dispatcher.lanes if c.rate_limit is not None}
            )
        return label_keys(dict(self.rate_limits or {}))

    def partition_rate_view(self) -> dict[str, TaskRateLimit]:
        """Each lane's per-partition rate limit (lanes with one), by wire value."""
        dispatcher = self.current_dispatcher()
        if dispatcher is not None:
            return label_keys(
                {
                    c.lane: c.partition_rate_limit
                    for c in dispatcher.lanes
                    if c.partition_rate_limit is not None
                }
            )
        return label_keys(dict(self.partition_rate_limits or {}))

    def dispatch_view(self) -> tuple[dict[str, int], dict[str, DispatchStats]]:
        """Return lane limits and stats snapshots (in-flight counts included), by wire value."""
        dispatcher = self.current_dispatcher()
        if dispatcher is not None:
            limits = {c.lane: c.max_concurrency for c in dispatcher.lanes}
            stats = dict(dispatcher.stats.lanes())
            for config in dispatcher.lanes:
                # The dispatcher's own count is authoritative for "executing now".
                snapshot = stats.get(config.lane, DispatchStats())
                stats[config.lane] = replace(snapshot, in_flight=dispatcher.in_flight(config.lane))
            return label_keys(limits), label_keys(stats)
        limits_source = self.lane_limits
        mapping = (
            {}
            if limits_source is None
            else (limits_source() if callable(limits_source) else limits_source)
        )
        stats_source = self.dispatch_stats
        return (
            label_keys({lane: int(limit) for lane, limit in mapping.items()}),
            {} if stats_source is None else label_keys(stats_source.lanes()),
        )
