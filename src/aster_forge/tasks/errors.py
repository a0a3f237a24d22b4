"""Exceptions raised by :mod:`aster_forge.tasks`."""

from __future__ import annotations

import enum
from typing import ClassVar

from .._errors import AsterForgeError


class AsterForgeTasksError(AsterForgeError):
    """Raised as the base class of every :mod:`aster_forge.tasks` error."""


# --- tasks core ---


class TaskCoreErrorKind(enum.StrEnum):
    """The shared control and validation failures a :class:`TaskCoreError` carries."""

    CODEC = "codec"
    INVALID_VALUE = "invalid_value"
    IO = "io"
    LEASE_LOST = "lease_lost"
    RENEWAL_TIMEOUT = "renewal_timeout"
    SHUTDOWN_REQUESTED = "shutdown_requested"
    CANCEL_REQUESTED = "cancel_requested"


class TaskCoreError(AsterForgeTasksError):
    """Raised by the shared task machinery before a product maps it to its own errors.

    The ``kind`` attribute says which shared failure it is; the predicates
    (:meth:`is_lease_lost` ...) and the module-level ``is_task_*`` functions are what a
    product's error mapper uses.
    """

    kind: ClassVar[TaskCoreErrorKind] = TaskCoreErrorKind.INVALID_VALUE

    def is_codec(self) -> bool:
        """Whether a stored value could not be decoded or encoded."""
        return self.kind is TaskCoreErrorKind.CODEC

    def is_invalid_value(self) -> bool:
        """Whether a step, registry or catalog value failed validation."""
        return self.kind is TaskCoreErrorKind.INVALID_VALUE

    def is_lease_lost(self) -> bool:
        """Whether the worker lost its processing lease to another claim."""
        return self.kind is TaskCoreErrorKind.LEASE_LOST

    def is_lease_renewal_timed_out(self) -> bool:
        """Whether the lease could not be renewed before it would expire."""
        return self.kind is TaskCoreErrorKind.RENEWAL_TIMEOUT

    def is_worker_shutdown_requested(self) -> bool:
        """Whether the worker is shutting down and should release the task."""
        return self.kind is TaskCoreErrorKind.SHUTDOWN_REQUESTED

    def is_cancel_requested(self) -> bool:
        """Whether an operator asked to cancel the running task."""
        return self.kind is TaskCoreErrorKind.CANCEL_REQUESTED

    def is_lease_control(self) -> bool:
        """Whether this is a lease-control stop (lost, timeout, shutdown, operator cancel)."""
        return self.kind in _LEASE_CONTROL_KINDS


_LEASE_CONTROL_KINDS = frozenset(
    {
        TaskCoreErrorKind.LEASE_LOST,
        TaskCoreErrorKind.RENEWAL_TIMEOUT,
        TaskCoreErrorKind.SHUTDOWN_REQUESTED,
        TaskCoreErrorKind.CANCEL_REQUESTED,
    }
)


class TaskCodecError(TaskCoreError, ValueError):
    """Raised when a stored payload, result or steps value cannot be decoded or encoded."""

    kind = TaskCoreErrorKind.CODEC


class TaskPayloadError(TaskCodecError):
    """Raised when a task payload does not validate against, or encode as, its kind's type.

    At execution this is a permanent failure: retrying the same stored payload cannot
    succeed. At enqueue nothing is written. The message names the kind and the fields,
    never their values, and the error is not chained to the validator's error (which
    quotes the input).

    Attributes:
        task_kind: The wire value (or name) of the task kind.
        fields: The dotted locations of the invalid fields (``"<root>"`` for the document).
    """

    def __init__(self, message: str, *, task_kind: str, fields: tuple[str, ...]) -> None:
        super().__init__(message)
        self.task_kind = task_kind
        self.fields = fields


class TaskInvalidValueError(TaskCoreError, ValueError):
    """Raised when a step, registry or runtime-task catalog value fails validation."""

    kind = TaskCoreErrorKind.INVALID_VALUE


class TaskStepNotFoundError(TaskInvalidValueError, LookupError):
    """Raised when a step mutation names a step key the step list does not contain."""

    def __init__(self, key: str, known: tuple[str, ...]) -> None:
        super().__init__(f"task step {key!r} not found (known steps: {', '.join(known) or '-'})")
        self.key = key


class TaskRegistryError(TaskInvalidValueError):
    """Raised when a task registry is inconsistent or a lookup names an unknown kind/lane."""


class RuntimeTaskCatalogError(TaskInvalidValueError):
    """Raised when a runtime-task catalog is inconsistent (wire values, display names)."""


class TaskIoError(TaskCoreError, OSError):
    """Raised when task file-system work (temp directories) fails."""

    kind = TaskCoreErrorKind.IO


class TaskLeaseControlError(TaskCoreError):
    """Raised when the worker must stop the task because of its lease, not the task.

    Attributes:
        task_id: The task whose lease is affected.
        processing_token: The token the worker held.
    """

    _reason: ClassVar[str] = "lease control"

    def __init__(self, task_id: int, processing_token: str) -> None:
        super().__init__(
            f"background task {self._reason} for task #{task_id} with token {processing_token}"
        )
        self.task_id = task_id
        self.processing_token = processing_token


class TaskLeaseLostError(TaskLeaseControlError):
    """Raised when the worker's processing lease was lost or taken over by another claim."""

    kind = TaskCoreErrorKind.LEASE_LOST
    _reason = "lease lost"


class TaskLeaseRenewalTimeoutError(TaskLeaseControlError, TimeoutError):
    """Raised when the lease could not be renewed before it would have expired."""

    kind = TaskCoreErrorKind.RENEWAL_TIMEOUT
    _reason = "lease renewal timed out"


class TaskWorkerShutdownRequestedError(TaskLeaseControlError):
    """Raised when the worker is shutting down and the task should be released."""

    kind = TaskCoreErrorKind.SHUTDOWN_REQUESTED
    _reason = "worker shutdown requested"


class TaskCancelRequestedError(TaskLeaseControlError):
    """Raised when an operator cancelled the running task; it ends ``cancelled``."""

    kind = TaskCoreErrorKind.CANCEL_REQUESTED
    _reason = "cancel requested"


def _core_errors(exc: BaseException) -> list[TaskCoreError]:
    """The TaskCoreErrors in ``exc``'s cause/context chain (a product may wrap them)."""
    found: list[TaskCoreError] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, TaskCoreError):
            found.append(current)
        current = current.__cause__ or current.__context__
    return found


def is_task_lease_lost(exc: BaseException) -> bool:
    """Whether ``exc`` is (or wraps, via ``raise ... from``) a lease-lost error."""
    return any(err.is_lease_lost() for err in _core_errors(exc))


def is_task_lease_renewal_timed_out(exc: BaseException) -> bool:
    """Whether ``exc`` is (or wraps) a lease-renewal-timeout error."""
    return any(err.is_lease_renewal_timed_out() for err in _core_errors(exc))


def is_task_worker_shutdown_requested(exc: BaseException) -> bool:
    """Whether ``exc`` is (or wraps) a worker-shutdown-requested error."""
    return any(err.is_worker_shutdown_requested() for err in _core_errors(exc))


def is_task_cancel_requested(exc: BaseException) -> bool:
    """Whether ``exc`` is (or wraps) an operator-cancel stop."""
    return any(err.is_cancel_requested() for err in _core_errors(exc))


def is_task_lease_control_error(exc: BaseException) -> bool:
    """Whether ``exc`` is (or wraps) any lease-control stop: lost, timeout, shutdown, cancel."""
    return any(err.is_lease_control() for err in _core_errors(exc))


# --- dedupe / schedule ---


class TaskDedupeKeyError(TaskInvalidValueError):
    """Raised when a dedupe key (or one of its parts) is empty, too long or has control chars."""


class ScheduledTaskValueError(TaskInvalidValueError):
    """Raised when a scheduled-task namespace, name, owner id, duration or outcome is invalid.

    Stores raise it before any statement runs, so bad input never reaches the database.
    """


class CronScheduleError(ScheduledTaskValueError):
    """Raised when a cron schedule's expression or timezone is invalid.

    Raised when the :class:`~aster_forge.tasks.CronSchedule` is built (at
    declaration), and its message names the expression and the timezone.
    """


class CronExtraMissingError(AsterForgeTasksError, ImportError):
    """Raised when a cron schedule is used but the ``cron`` extra is not installed.

    Install it with ``pip install 'aster-forge[cron]'``.
    """


# --- reference task store ---


class TaskEnqueueValueError(TaskInvalidValueError):
    """Raised when an enqueue request (kind, lane, payload, timing, attempts) is invalid.

    Raised before any I/O, so nothing is written.
    """


class TaskKindNotRegisteredError(TaskEnqueueValueError):
    """Raised when a task is enqueued with a kind its store's registry does not know.

    Attributes:
        task_kind: The kind's wire value as given.
    """

    def __init__(self, task_kind: str) -> None:
        super().__init__(f"task kind {task_kind!r} is not registered")
        self.task_kind = task_kind


class TaskLaneMismatchError(TaskEnqueueValueError):
    """Raised when a task is enqueued on a lane that is not its kind's own lane.

    Attributes:
        task_kind: The kind's wire value.
        lane: The lane the task named.
        expected_lane: The lane the registry assigns to the kind.
    """

    def __init__(self, task_kind: str, lane: str, expected_lane: str) -> None:
        super().__init__(f"task kind {task_kind!r} runs in lane {expected_lane!r}, not {lane!r}")
        self.task_kind = task_kind
        self.lane = lane
        self.expected_lane = expected_lane


class TaskNotFoundError(AsterForgeTasksError, LookupError):
    """Raised when an admin operation names a task id that does not exist.

    Attributes:
        task_id: The missing id.
    """

    def __init__(self, task_id: int) -> None:
        super().__init__(f"background task #{task_id} not found")
        self.task_id = task_id


class TaskStateError(AsterForgeTasksError, ValueError):
    """Raised when a task's status does not allow the requested admin operation.

    Attributes:
        task_id: The task.
        status: Its status wire value when the operation was refused.
    """

    def __init__(self, task_id: int, status: str, message: str) -> None:
        super().__init__(f"background task #{task_id} ({status}): {message}")
        self.task_id = task_id
        self.status = status


# --- runtime workers and scheduling ---


class BackgroundTasksError(AsterForgeTasksError):
    """Raised as the base class of the runtime-worker errors (groups, periodic, scheduled)."""


class BackgroundTaskSpawnError(BackgroundTasksError, ValueError):
    """Raised when a worker cannot be spawned: blank or duplicate name, or not a callable."""


class BackgroundTasksClosedError(BackgroundTasksError, RuntimeError):
    """Raised when spawning into a :class:`~aster_forge.tasks.BackgroundTasks` group that
    is shutting down or already shut down."""


class PeriodicTaskConfigError(BackgroundTasksError, ValueError):
    """Raised when a periodic or scheduled task is given an invalid interval, name or hook."""


class ScheduledRuntimeDeclarationError(BackgroundTasksError, ValueError):
    """Raised when a leased scheduled runtime's declarations are invalid.

    For example two scheduled tasks with the same wire name, a declaration made after
    ``declare`` returned, or a kind with no wire value.
    """


# --- dispatch and execution ---


class TaskDispatchConfigError(TaskInvalidValueError):
    """Raised when a lane, poll or dispatcher configuration value is invalid."""
