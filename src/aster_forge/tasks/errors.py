"""Exceptions raised by :mod:`aster_forge.tasks`."""

from __future__ import annotations

from typing import ClassVar

from .._errors import AsterForgeError


class AsterForgeTasksError(AsterForgeError):
    """Raised as the base class of every :mod:`aster_forge.tasks` error."""


# --- tasks core ---


class TaskCoreError(AsterForgeTasksError):
    """Raised by the shared task machinery before a product maps it to its own errors.

    Catch the subclass that names the failure (``TaskLeaseLostError``,
    ``TaskCodecError`` ...); :func:`~aster_forge.tasks.task_lease_termination_of` finds
    a lease-control stop that a product wrapped with ``raise ... from``.
    """


class TaskCodecError(TaskCoreError, ValueError):
    """Raised when a stored payload, result or steps value cannot be decoded or encoded."""


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


class TaskTransactionUnavailableError(TaskCoreError, RuntimeError):
    """Raised by ``ctx.transaction()`` when the task's store keeps no database a body
    can write in (``memory://``, or a store that does not implement
    ``begin_task_transaction``)."""


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

    _reason = "lease lost"


class TaskLeaseRenewalTimeoutError(TaskLeaseControlError, TimeoutError):
    """Raised when the lease could not be renewed before it would have expired."""

    _reason = "lease renewal timed out"


class TaskWorkerShutdownRequestedError(TaskLeaseControlError):
    """Raised when the worker is shutting down and the task should be released."""

    _reason = "worker shutdown requested"


class TaskCancelRequestedError(TaskLeaseControlError):
    """Raised when an operator cancelled the running task; it ends ``cancelled``."""

    _reason = "cancel requested"


# --- dedupe / schedule ---


class TaskDedupeKeyError(TaskInvalidValueError):
    """Raised when a dedupe key (or one of its parts) is empty, too long or has control chars,
    or its window (``held_while``, ``held_for``, ``replace``) is invalid."""


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
    """Raised when a periodic job or its runner is declared wrongly.

    For example a negative interval, a schedule that is not a schedule value, a hook
    that is not callable, or two jobs or workers with the same name.
    """


# --- dispatch and execution ---


class TaskDispatchConfigError(TaskInvalidValueError):
    """Raised when a lane, poll or dispatcher configuration value is invalid."""
