"""The retention job: delete finished tasks past their status's age, in bounded batches."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta

from ..runtime import CancellationToken
from ..runtime._internal import Clock, SystemClock, sleep_or_cancelled
from ._control import TaskPruneReport, TaskRetention, TaskRetentionStore
from ._records import TaskStatus

__all__ = ["prune_finished_tasks", "run_task_retention", "task_retention_worker"]

logger = logging.getLogger("aster_forge.tasks.retention")

#: Called with every pass's report (e.g. to export metrics); failures are logged.
PruneReportHook = Callable[[TaskPruneReport], Awaitable[None]]


async def prune_finished_tasks(
    store: TaskRetentionStore,
    retention: TaskRetention,
    *,
    stop: CancellationToken | None = None,
    clock: Clock | None = None,
) -> TaskPruneReport:
    """Run one retention pass: per pruned status, delete batches until one comes back short.

    Each batch is one short statement of at most ``retention.batch_size`` rows, so no
    lock is held for long and workers keep claiming and writing in between.

    ``stop`` ends the pass after the current batch; ``clock`` measures its duration.
    """
    timer = clock if clock is not None else SystemClock()
    started = timer.monotonic()
    removed: dict[TaskStatus, int] = {}
    batches = 0
    for status, age in retention.ages().items():
        removed[status] = 0
        while stop is None or not stop.cancelled:
            deleted = await store.delete_finished_tasks(status, age, limit=retention.batch_size)
            batches += 1
            removed[status] += deleted
            if deleted < retention.batch_size:
                break
    elapsed = timedelta(seconds=max(timer.monotonic() - started, 0.0))
    return TaskPruneReport(removed=removed, batches=batches, duration=elapsed)


async def run_task_retention(
    store: TaskRetentionStore,
    retention: TaskRetention,
    *,
    stop: CancellationToken,
    clock: Clock | None = None,
    on_report: PruneReportHook | None = None,
) -> None:
    """Prune every ``retention.interval`` until ``stop`` is cancelled.

    Run it on one instance only: as a worker of a
    :class:`~aster_forge.tasks.LeasedScheduledRuntimeConfig` (see
    :func:`task_retention_worker`). A failed pass is logged and retried at the next
    interval; it never ends the loop. ``on_report`` receives each pass's report.
    """
    timer = clock if clock is not None else SystemClock()
    while not stop.cancelled:
        try:
            report = await prune_finished_tasks(store, retention, stop=stop, clock=timer)
        except Exception as exc:
            logger.warning("task retention pass failed (%s); retrying later", type(exc).__name__)
        else:
            logger.info(
                "task retention removed %s finished tasks in %s batches (%.3fs)",
                report.total,
                report.batches,
                report.duration_seconds,
                extra={"removed": {s.value: n for s, n in report.removed.items()}},
            )
            if on_report is not None:
                try:
                    await on_report(report)
                except Exception:
                    logger.warning("task retention report hook failed", exc_info=True)
        if await sleep_or_cancelled(timer, stop, retention.interval.total_seconds()):
            return


def task_retention_worker(
    store: TaskRetentionStore,
    retention: TaskRetention | None = None,
    *,
    on_report: PruneReportHook | None = None,
    clock: Clock | None = None,
) -> Callable[[CancellationToken], Awaitable[None]]:
    """A worker for :attr:`LeasedScheduledRuntimeConfig.workers`: retention on the lease holder.

    Example:
        >>> from aster_forge.testing import InMemoryTaskStore
        >>> worker = task_retention_worker(InMemoryTaskStore())
        >>> worker.__name__
        'task_retention'

    The default ``retention`` keeps succeeded tasks 7 days, failed 30, cancelled 7,
    pruning hourly, 1,000 rows a batch.
    """
    policy = retention if retention is not None else TaskRetention()

    async def task_retention(token: CancellationToken) -> None:
        await run_task_retention(store, policy, stop=token, clock=clock, on_report=on_report)

    return task_retention
