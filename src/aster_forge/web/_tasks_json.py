"""JSON projections of background tasks, lanes and dispatch statistics."""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from datetime import datetime
from typing import Any

from .._json import load_json
from ..tasks._internal import (
    BackgroundTaskRecord,
    DispatchStats,
    TaskLaneCounts,
    TaskLaneState,
    TaskRateLimit,
    TaskStatus,
    rate_remaining,
)
from ._serialize import iso, wire

__all__ = [
    "MAX_DETAIL_JSON_CHARS",
    "dispatch_stats_json",
    "lanes_json",
    "lease_has_expired",
    "task_actions",
    "task_json",
    "task_runs",
]

_DONE_STEPS = frozenset({"succeeded", "skipped"})

MAX_DETAIL_JSON_CHARS = 65_536
"""Stored payload/result texts longer than this are answered as a truncated preview."""
# Statuses whose current (or last) run is not yet counted in ``attempt``.
_RUN_IN_PROGRESS_OR_SUCCEEDED = frozenset({TaskStatus.RUNNING, TaskStatus.SUCCEEDED})


def task_actions(record: BackgroundTaskRecord) -> list[str]:
    """The operator actions the admin API accepts for ``record`` now.

    ``retry``: a cancelled task, or a failed one stored with manual retry allowed
    (the store's conditional write applies the same rule; ``?force=true`` overrides
    it). ``cancel``: a pending task, or a running one not already asked to stop.
    """
    actions = []
    if record.status is TaskStatus.CANCELLED or (
        record.status is TaskStatus.FAILED and record.manual_retry_allowed
    ):
        actions.append("retry")
    if record.status is TaskStatus.PENDING or (
        record.status is TaskStatus.RUNNING and not record.cancel_requested
    ):
        actions.append("cancel")
    return actions


def lease_has_expired(record: BackgroundTaskRecord, now: datetime) -> bool:
    """Whether ``record`` runs on a lease that expired by ``now``: its worker stopped
    renewing (crashed, killed, cut off) and the next claim of its lane rescues it."""
    return (
        record.status is TaskStatus.RUNNING
        and record.lease_expires_at is not None
        and record.lease_expires_at <= now
    )


def task_runs(record: BackgroundTaskRecord) -> int:
    """How many attempts the task has used, the running or successful one included.

    ``attempt`` counts the attempts that ended without success; a task that
    succeeded on its first run has ``attempt == 0`` but used one run.
    """
    extra = 1 if record.status in _RUN_IN_PROGRESS_OR_SUCCEEDED else 0
    return record.attempt + extra


class _Undecodable(ValueError):
    """A stored text that does not decode (malformed or nested too deeply)."""


def _json_or_none(text: str | None) -> tuple[Any, bool]:
    """Return ``(value, ok)``; a stored text that is not JSON gives ``(None, False)``."""
    if text is None:
        return None, True
    try:
        return load_json(text, what="stored value", error=_Undecodable), True
    except _Undecodable:
        return None, False


def _steps(text: str | None) -> tuple[list[dict[str, Any]] | None, bool]:
    value, ok = _json_or_none(text)
    if not ok or value is None:
        return None, ok
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        return None, False
    return value, True


def task_json(
    record: BackgroundTaskRecord, *, now: datetime, detail: bool = False
) -> dict[str, Any]:
    """Return one task row as JSON.

    ``lease_expired`` says a running task's lease expired by ``now`` (see
    :func:`lease_has_expired`): it shows ``running`` but no worker runs it.

    Steps are the stored step objects (``key``, ``title``, ``status``,
    ``progress_current``, ``progress_total``, ``detail``, timestamps), plus a summary
    (``steps_done``/``steps_total``) for progress bars. ``detail`` adds the decoded
    payload and result, and the failure's stored traceback (``last_traceback``). A
    stored value that is not valid JSON is reported as ``null`` with ``*_invalid: true``
    rather than failing the whole response.
    """
    steps, steps_ok = _steps(record.steps_json)
    done = sum(1 for step in steps or () if step.get("status") in _DONE_STEPS)
    item: dict[str, Any] = {
        "id": record.id,
        "kind": record.kind,
        "lane": record.lane,
        "status": wire(record.status),
        "attempt": record.attempt,
        "runs": task_runs(record),
        "max_attempts": record.max_attempts,
        "actions": task_actions(record),
        "priority": record.priority,
        "run_at": iso(record.run_at),
        "claimed_by": record.claimed_by,
        "lease_expires_at": iso(record.lease_expires_at),
        "lease_expired": lease_has_expired(record, now),
        "dedupe_key": record.dedupe_key,
        "last_error": record.last_error,
        "failure_reason": wire(record.failure_reason),
        "manual_retry_allowed": record.manual_retry_allowed,
        "cancel_requested": record.cancel_requested,
        "rescued": record.rescued,
        "created_at": iso(record.created_at),
        "updated_at": iso(record.updated_at),
        "started_at": iso(record.started_at),
        "finished_at": iso(record.finished_at),
        "snooze_count": record.snooze_count,
        "steps": steps,
        "steps_invalid": not steps_ok,
        "steps_done": done,
        "steps_total": len(steps or ()),
    }
    if detail:
        item["last_traceback"] = record.last_traceback  # list rows stay small
        item.update(_stored_json("payload", record.payload_json))
        item.update(_stored_json("result", record.result_json))
    return item


def _stored_json(name: str, text: str | None) -> dict[str, Any]:
    """``<name>`` decoded, or (beyond :data:`MAX_DETAIL_JSON_CHARS`) a text preview.

    A large payload is never decoded or sent whole: the answer carries its first
    characters as ``<name>_preview`` with ``<name>_truncated: true``.
    """
    size = 0 if text is None else len(text)
    if text is not None and size > MAX_DETAIL_JSON_CHARS:
        return {
            name: None,
            f"{name}_invalid": False,
            f"{name}_truncated": True,
            f"{name}_preview": text[:MAX_DETAIL_JSON_CHARS],
            f"{name}_size": size,
        }
    value, ok = _json_or_none(text)
    return {
        name: value,
        f"{name}_invalid": not ok,
        f"{name}_truncated": False,
        f"{name}_preview": None,
        f"{name}_size": size,
    }


def dispatch_stats_json(stats: DispatchStats) -> dict[str, Any]:
    """Return a dispatch stats snapshot as JSON."""
    return {
        "claimed": stats.claimed,
        "rescued": stats.rescued,
        "succeeded": stats.succeeded,
        "retried": stats.retried,
        "failed_permanently": stats.failed_permanently,
        "lease_lost": stats.lease_lost,
        "released_on_shutdown": stats.released_on_shutdown,
        "store_errors": stats.store_errors,
        "claim_calls": stats.claim_calls,
        "claim_errors": stats.claim_errors,
        "claim_latency_seconds_mean": stats.claim_latency_seconds_mean,
        "claim_latency_seconds_max": stats.claim_latency_seconds_max,
        "queue_lag_seconds": stats.queue_lag_seconds,
        "in_flight": stats.in_flight,
    }


def lanes_json(
    limits: Mapping[str, int],
    stats: Mapping[str, DispatchStats],
    counts: Sequence[TaskLaneCounts],
    states: Sequence[TaskLaneState] = (),
    cluster_limits: Mapping[str, int] | None = None,
    partition_limits: Mapping[str, int] | None = None,
    rate_limits: Mapping[str, TaskRateLimit] | None = None,
    now: datetime | None = None,
    partition_rate_limits: Mapping[str, TaskRateLimit] | None = None,
) -> list[dict[str, Any]]:
    """Merge lane limits, in-process dispatch stats and store counts, one item per lane.

    ``in_flight`` is this process's executing tasks (from the dispatcher);
    ``running`` is every running row in the store (all instances), which
    ``cluster_limit`` caps when the lane declares one; ``partition_limit`` is the
    lane's cap per partition (claims then take partitions in turn); ``rate_limit`` is
    the lane's ``count`` starts per ``period_seconds`` and ``rate_remaining`` the starts
    left in the window ``now`` falls in, from the stored lane state;
    ``partition_rate_limit`` is the cap on each partition's starts per window;
    ``partitions_waiting`` counts the partitions with due tasks and
    ``top_partitions_waiting`` names the few with the most; ``paused`` is the stored pause
    state (every instance skips a paused lane); a lane with a stored state is listed
    even when idle.
    """
    capped = cluster_limits or {}
    per_partition = partition_limits or {}
    by_lane = {c.lane: c for c in counts}
    stored = [s.lane for s in states]
    paused = {s.lane: s for s in states if s.paused}
    rated = rate_limits or {}
    partition_rated = partition_rate_limits or {}
    by_state = {s.lane: s for s in states}
    names = list(dict.fromkeys([*limits, *stats, *by_lane, *stored]))
    items = []
    for name in sorted(names):
        count = by_lane.get(name)
        snapshot = stats.get(name)
        items.append(
            {
                "lane": name,
                "limit": limits.get(name),
                "cluster_limit": capped.get(name),
                "partition_limit": per_partition.get(name),
                "rate_limit": _rate_json(rated.get(name)),
                "rate_remaining": None
                if now is None
                else _remaining(rated.get(name), by_state.get(name), now),
                "partition_rate_limit": _rate_json(partition_rated.get(name)),
                "in_flight": None if snapshot is None else snapshot.in_flight,
                "pending": None if count is None else count.pending,
                "due": None if count is None else count.due,
                "partitions_waiting": None if count is None else count.partitions_waiting,
                "top_partitions_waiting": None
                if count is None
                else [{"partition": p, "due": n} for p, n in count.top_partitions_waiting],
                "running": None if count is None else count.running,
                "expired": None if count is None else count.expired,
                "queue_lag_seconds": None if count is None else count.queue_lag_seconds,
                "oldest_due_run_at": None if count is None else iso(count.oldest_due_run_at),
                "stats": None if snapshot is None else dispatch_stats_json(snapshot),
                "paused": name in paused,
                "paused_at": iso(paused[name].paused_at) if name in paused else None,
            }
        )
    return items


def label_keys(mapping: Mapping[Hashable, Any]) -> dict[str, Any]:
    """Return ``mapping`` keyed by lane wire values (enum values, else ``str``)."""
    return {str(wire(key)): value for key, value in mapping.items()}


def _rate_json(rate: TaskRateLimit | None) -> dict[str, Any] | None:
    if rate is None:
        return None
    return {"count": rate[0], "period_seconds": rate[1].total_seconds()}


def _remaining(
    rate: TaskRateLimit | None, state: TaskLaneState | None, now: datetime
) -> int | None:
    return None if rate is None else rate_remaining(rate, state, now)
