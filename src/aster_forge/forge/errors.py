"""Exceptions raised by the Forge application layer (:mod:`aster_forge.forge`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._errors import AsterForgeError

if TYPE_CHECKING:
    from ..tasks._internal import BackgroundTaskRecord


class ForgeError(AsterForgeError):
    """Raised as the base class of every Forge application-layer error."""


class ForgeDeclarationError(ForgeError, ValueError):
    """Raised at declaration time when a task, lane, periodic job or setting is wrong.

    For example: a task name or lane declared twice, a task on an undeclared lane, a
    body whose signature the forge cannot read, a bad cron string or interval, or a
    ``ForgeWorkerSettings`` field of the wrong type or value (the message names the
    field and what to pass).
    """


class ForgePayloadError(ForgeError, ValueError):
    """Raised when a payload fails validation at enqueue; nothing was written.

    The message names the task and the offending fields, never their values.

    Attributes:
        task: The task's wire name.
        fields: The dotted locations of the fields that failed.
    """

    def __init__(self, message: str, *, task: str, fields: tuple[str, ...]) -> None:
        super().__init__(message)
        self.task = task
        self.fields = fields


class ForgeStateError(ForgeError, RuntimeError):
    """Raised when the forge is used in a state that does not allow the call.

    For example: declaring a task after the forge started, reading ``forge.state``
    before it was set, or ``enqueue_sync`` called from a running event loop.
    """


class ForgeTaskFailedError(ForgeError):
    """Raised by :meth:`~aster_forge.Forge.result` when the task ended failed or cancelled.

    The message carries the task's last error text (the words its body or the worker
    chose, bounded as stored), never its payload.

    Attributes:
        task: The task's stored row (``status``, ``last_error``, ``failure_reason``).
    """

    def __init__(self, task: BackgroundTaskRecord) -> None:
        detail = f": {task.last_error}" if task.last_error else ""
        super().__init__(f"task {task.id} ({task.kind}) ended {task.status.value}{detail}")
        self.task = task
