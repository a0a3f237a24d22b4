"""How an execution applies operator control: the snooze cap and per-kind backoff."""

from __future__ import annotations

from typing import Any

from ._control import TaskSnooze
from ._retry import TaskFailureClassification, TaskRetryClass, TaskRetryPolicy
from ._spec import ErasedTaskSpec
from .protocols import ExecutableTaskRecord

__all__ = ["retry_policy_for", "snooze_failure"]


def retry_policy_for(erased: ErasedTaskSpec[Any], default: TaskRetryPolicy) -> TaskRetryPolicy:
    """The kind's own backoff (``TaskSpec.retry_policy``), else the worker's ``default``."""
    return erased.spec.retry_policy or default


def snooze_failure(
    task: ExecutableTaskRecord[Any], snooze: TaskSnooze, max_snoozes: int
) -> TaskFailureClassification | None:
    """The failure a snooze turns into once the task has snoozed ``max_snoozes`` times.

    ``None`` while the snooze is allowed (the count is the record's ``snooze_count``).
    The failure allows a manual retry.
    """
    snoozed = task.snooze_count
    if snoozed < max_snoozes:
        return None
    message = f"Task snoozed {snoozed} times; the limit is {max_snoozes}"
    return TaskFailureClassification(TaskRetryClass.MANUAL, message)
