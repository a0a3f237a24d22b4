"""Task step state: UI/progress semantics, separate from the task's database status.

All helpers are pure: they take a sequence of :class:`TaskStepInfo` and return a new
tuple, leaving the input untouched. Pass ``now`` for deterministic timestamps.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import pydantic

from ..runtime._internal import utc_now
from .errors import TaskCodecError, TaskInvalidValueError, TaskStepNotFoundError

__all__ = [
    "TaskStepInfo",
    "TaskStepSpec",
    "TaskStepStatus",
    "cancel_active_step",
    "initial_task_steps_from_specs",
    "mark_active_step_failed",
    "parse_task_steps_json",
    "serialize_task_steps_json",
    "set_task_step_active",
    "set_task_step_skipped",
    "set_task_step_succeeded",
    "task_step_status_json_schema",
    "task_steps_json_schema",
]

#: The detail the first step shows until a worker picks the task up.
WAITING_FOR_WORKER = "Waiting for worker"


class TaskStepStatus(enum.StrEnum):
    """The progress status of one task step (serialised as its lower-case value)."""

    PENDING = "pending"
    ACTIVE = "active"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SKIPPED = "skipped"
    CANCELLED = "cancelled"
    """The step was active when an operator cancelled the task."""


@dataclass(frozen=True, slots=True)
class TaskStepSpec:
    """A static step definition a task spec declares.

    Attributes:
        key: The stable step key stored in ``steps_json`` (non-empty).
        title: The human-readable title shown in UIs.
    """

    key: str
    title: str

    def __post_init__(self) -> None:
        if not self.key or self.key.strip() != self.key:
            raise TaskInvalidValueError(
                f"task step key must be non-empty and trimmed: {self.key!r}"
            )


@dataclass(frozen=True, slots=True)
class TaskStepInfo:
    """The stored/serialised state of one task step.

    Attributes:
        key: The stable step key.
        title: The human-readable title.
        status: The current status.
        progress_current: Work done so far (``0 <= current``, and ``<= total`` when total > 0).
        progress_total: Total work, ``0`` when unknown.
        detail: Optional detail text (the failure message for a failed step).
        started_at: When the step became active (aware UTC), if it has.
        finished_at: When the step finished (aware UTC), if it has.
    """

    key: str
    title: str
    status: TaskStepStatus
    progress_current: int = 0
    progress_total: int = 0
    detail: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None

    def __post_init__(self) -> None:
        if not self.key:
            raise TaskInvalidValueError("task step key must be non-empty")
        _check_progress(self.key, self.progress_current, self.progress_total)
        for name in ("started_at", "finished_at"):
            value = getattr(self, name)
            if value is not None and value.tzinfo is None:
                raise TaskInvalidValueError(
                    f"task step {self.key!r}: {name} must be timezone-aware"
                )


def _check_progress(key: str, current: int, total: int) -> None:
    if current < 0 or total < 0:
        raise TaskInvalidValueError(
            f"task step {key!r}: progress must not be negative ({current}/{total})"
        )
    if total > 0 and current > total:
        raise TaskInvalidValueError(
            f"task step {key!r}: progress current {current} exceeds total {total}"
        )


_STEPS_ADAPTER: pydantic.TypeAdapter[tuple[TaskStepInfo, ...]] = pydantic.TypeAdapter(
    tuple[TaskStepInfo, ...]
)
_STATUS_ADAPTER: pydantic.TypeAdapter[TaskStepStatus] = pydantic.TypeAdapter(TaskStepStatus)


def initial_task_steps_from_specs(
    specs: Sequence[TaskStepSpec], *, now: datetime | None = None
) -> tuple[TaskStepInfo, ...]:
    """Create the initial step list: the first step active ("Waiting for worker"), the rest pending.

    Raises:
        TaskInvalidValueError: When two specs share a key.
    """
    _ensure_unique([spec.key for spec in specs])
    started = now or utc_now()
    return tuple(
        TaskStepInfo(
            key=spec.key,
            title=spec.title,
            status=TaskStepStatus.ACTIVE if index == 0 else TaskStepStatus.PENDING,
            detail=WAITING_FOR_WORKER if index == 0 else None,
            started_at=started if index == 0 else None,
        )
        for index, spec in enumerate(specs)
    )


def set_task_step_active(
    steps: Sequence[TaskStepInfo],
    key: str,
    *,
    detail: str | None = None,
    progress: tuple[int, int] | None = None,
    now: datetime | None = None,
) -> tuple[TaskStepInfo, ...]:
    """Return ``steps`` with step ``key`` active (keeps its first ``started_at``).

    ``detail`` replaces the old text (``None`` clears it); ``progress`` is
    ``(current, total)``, ``None`` keeps the stored progress. ``now`` defaults to now, UTC.

    Raises:
        TaskStepNotFoundError: When no step has ``key``.
        TaskInvalidValueError: When ``progress`` is negative or current exceeds total.
    """
    return _transition(steps, key, TaskStepStatus.ACTIVE, detail=detail, progress=progress, now=now)


def set_task_step_succeeded(
    steps: Sequence[TaskStepInfo],
    key: str,
    *,
    detail: str | None = None,
    progress: tuple[int, int] | None = None,
    now: datetime | None = None,
) -> tuple[TaskStepInfo, ...]:
    """Return ``steps`` with step ``key`` succeeded.

    Without ``progress``, a step with a known total is completed (current = total).

    Raises:
        TaskStepNotFoundError: When no step has ``key``.
        TaskInvalidValueError: When ``progress`` is invalid.
    """
    return _transition(
        steps,
        key,
        TaskStepStatus.SUCCEEDED,
        detail=detail,
        progress=progress,
        now=now,
        complete=True,
    )


def set_task_step_skipped(
    steps: Sequence[TaskStepInfo],
    key: str,
    *,
    detail: str | None = None,
    now: datetime | None = None,
) -> tuple[TaskStepInfo, ...]:
    """Return ``steps`` with step ``key`` skipped (finished now, progress unchanged).

    Raises:
        TaskStepNotFoundError: When no step has ``key``.
    """
    return _transition(steps, key, TaskStepStatus.SKIPPED, detail=detail, progress=None, now=now)


def mark_active_step_failed(
    steps: Sequence[TaskStepInfo], message: str | None, *, now: datetime | None = None
) -> tuple[TaskStepInfo, ...]:
    """Return ``steps`` with the active step failed, carrying ``message`` as its detail.

    When no step is active, the *last* pending step is marked failed instead; when no
    step is active or pending, the list is returned unchanged.
    """
    at = now or utc_now()
    for index, step in enumerate(steps):
        if step.status is TaskStepStatus.ACTIVE:
            failed = replace(
                step,
                status=TaskStepStatus.FAILED,
                started_at=step.started_at or at,
                finished_at=at,
                detail=message,
            )
            return _with(steps, index, failed)
    for index in range(len(steps) - 1, -1, -1):
        step = steps[index]
        if step.status is TaskStepStatus.PENDING:
            failed = replace(
                step, status=TaskStepStatus.FAILED, started_at=at, finished_at=at, detail=message
            )
            return _with(steps, index, failed)
    return tuple(steps)


def end_active_step(
    steps: Sequence[TaskStepInfo],
    status: TaskStepStatus,
    detail: str | None,
    *,
    now: datetime | None = None,
) -> tuple[TaskStepInfo, ...]:
    """Return ``steps`` with the active step (if any) ended as ``status`` with ``detail``."""
    for index, step in enumerate(steps):
        if step.status is TaskStepStatus.ACTIVE:
            at = now or utc_now()
            ended = replace(
                step, status=status, started_at=step.started_at or at, finished_at=at, detail=detail
            )
            return _with(steps, index, ended)
    return tuple(steps)


CANCELLED_STEP_DETAIL = "Cancelled by an operator"
"""The detail of the step that was active when an operator cancelled the task."""


def cancel_active_step(steps: Sequence[TaskStepInfo]) -> tuple[TaskStepInfo, ...]:
    """Return ``steps`` with the active step (if any) ended ``cancelled`` by an operator.

    A task that ends cancelled, running or still waiting for a worker, shows no step as
    active.
    """
    return end_active_step(steps, TaskStepStatus.CANCELLED, CANCELLED_STEP_DETAIL)


def serialize_task_steps_json(steps: Sequence[TaskStepInfo]) -> str:
    """Serialise a step list to its stable JSON text (a list of objects, ISO timestamps).

    Raises:
        TaskInvalidValueError: When two steps share a key.
    """
    _ensure_unique([step.key for step in steps])
    return _STEPS_ADAPTER.dump_json(tuple(steps)).decode()


def parse_task_steps_json(
    text: str | bytes, *, specs: Sequence[TaskStepSpec] | None = None
) -> tuple[TaskStepInfo, ...]:
    """Parse stored steps JSON back into step values.

    With ``specs``, every stored step key must be one of their keys.

    Raises:
        TaskCodecError: When the text is not valid JSON or does not match the step shape
            (the message names the offending location).
        TaskInvalidValueError: When keys repeat or a key is unknown to ``specs``.
    """
    try:
        steps = _STEPS_ADAPTER.validate_json(text, strict=True)
    except pydantic.ValidationError as exc:
        raise TaskCodecError(f"invalid task steps JSON: {_describe(exc)}") from exc
    except TaskInvalidValueError as exc:  # raised by TaskStepInfo.__post_init__
        raise TaskCodecError(f"invalid task steps JSON: {exc}") from exc
    _ensure_unique([step.key for step in steps])
    if specs is not None:
        known = {spec.key for spec in specs}
        unknown = [step.key for step in steps if step.key not in known]
        if unknown:
            raise TaskInvalidValueError(
                f"task steps JSON has unknown step keys {unknown} (known: {sorted(known)})"
            )
    return steps


def task_steps_json_schema() -> dict[str, Any]:
    """Return the JSON Schema of a serialised step list (for OpenAPI documents)."""
    return _STEPS_ADAPTER.json_schema()


def task_step_status_json_schema() -> dict[str, Any]:
    """Return the JSON Schema of :class:`TaskStepStatus`."""
    return _STATUS_ADAPTER.json_schema()


def _describe(exc: pydantic.ValidationError) -> str:
    parts = []
    for error in exc.errors(include_url=False, include_input=False):
        location = ".".join(str(part) for part in error["loc"]) or "<root>"
        parts.append(f"{location}: {error['msg']}")
    return "; ".join(parts)


def _transition(
    steps: Sequence[TaskStepInfo],
    key: str,
    status: TaskStepStatus,
    *,
    detail: str | None,
    progress: tuple[int, int] | None,
    now: datetime | None,
    complete: bool = False,
) -> tuple[TaskStepInfo, ...]:
    """Move step ``key`` to ``status``, keeping its first ``started_at``.

    An active step has no ``finished_at``; any other status is finished at ``now``.
    Without ``progress`` the stored progress is kept, or, with ``complete``, a known
    total is reached (current = total).
    """
    index = _index_of(steps, key)
    at = now or utc_now()
    step = steps[index]
    if progress is not None:
        current, total = progress
    else:
        current, total = step.progress_current, step.progress_total
        if complete and total > 0:
            current = total
    updated = replace(
        step,
        status=status,
        started_at=step.started_at or at,
        finished_at=None if status is TaskStepStatus.ACTIVE else at,
        detail=detail,
        progress_current=current,
        progress_total=total,
    )
    return _with(steps, index, updated)


def _index_of(steps: Sequence[TaskStepInfo], key: str) -> int:
    for index, step in enumerate(steps):
        if step.key == key:
            return index
    raise TaskStepNotFoundError(key, tuple(step.key for step in steps))


def _with(
    steps: Sequence[TaskStepInfo], index: int, step: TaskStepInfo
) -> tuple[TaskStepInfo, ...]:
    return (*steps[:index], step, *steps[index + 1 :])


def _ensure_unique(keys: list[str]) -> None:
    seen: set[str] = set()
    for key in keys:
        if key in seen:
            raise TaskInvalidValueError(f"task step key {key!r} appears more than once")
        seen.add(key)
