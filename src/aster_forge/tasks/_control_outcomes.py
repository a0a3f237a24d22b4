"""How an execution applies operator control: the snooze cap, per-kind backoff, the writes."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from ._control import TaskSnooze
from ._lease import TaskLease
from ._retry import TaskFailureClassification, TaskRetryClass, TaskRetryPolicy
from ._spec import ErasedTaskSpec

__all__ = ["retry_policy_for", "snooze_failure", "write_cancelled", "write_snoozed"]


def retry_policy_for(erased: ErasedTaskSpec[Any], default: TaskRetryPolicy) -> TaskRetryPolicy:
    """The kind's own backoff (``TaskSpec.retry_policy``), else the worker's ``default``."""
    return erased.spec.retry_policy or default


def snooze_failure(
    task: object, snooze: TaskSnooze, max_snoozes: int
) -> TaskFailureClassification | None:
    """The failure a snooze turns into once the task has snoozed ``max_snoozes`` times.

    ``None`` while the snooze is allowed. The count is the record's ``snooze_count``
    (a row type without one counts as never snoozed). The failure allows a manual retry.
    """
    snoozed = int(getattr(task, "snooze_count", 0))
    if snoozed < max_snoozes:
        return None
    message = f"Task snoozed {snoozed} times; the limit is {max_snoozes}"
    return TaskFailureClassification(TaskRetryClass.MANUAL, message)


async def write_cancelled(store: Any, lease: TaskLease, steps_json: str | None) -> bool:
    """Write the operator's cancel, fenced (``mark_task_cancelled``).

    A store without the control protocol gets its shutdown release instead, which ends a
    cancel-flagged task ``cancelled`` without counting an attempt.
    """
    mark = getattr(store, "mark_task_cancelled", None)
    if mark is None:
        released: bool = await store.release_task_for_shutdown(lease)
        return released
    cancelled: bool = await mark(lease, steps_json=steps_json)
    return cancelled


async def write_snoozed(
    store: Any, lease: TaskLease, delay: timedelta, steps_json: str | None
) -> bool:
    """Write a snooze, fenced (``mark_task_snoozed``).

    A store without the control protocol gets a retry that counts no attempt instead.
    """
    mark = getattr(store, "mark_task_snoozed", None)
    if mark is None:
        retried: bool = await store.mark_task_retry(
            lease, delay=delay, error="Task snoozed", steps_json=steps_json, count_attempt=False
        )
        return retried
    snoozed: bool = await mark(lease, delay=delay, steps_json=steps_json)
    return snoozed
