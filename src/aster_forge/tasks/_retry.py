"""Failures: retry classification, backoff, and what a failed attempt stores and logs.

Pure functions the executor applies to failures; a success never formats anything.
"""

from __future__ import annotations

import enum
import math
import random
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from .._validation import check_int_setting, check_number_setting, check_stored_duration
from .errors import AsterForgeTasksError, TaskCodecError, TaskInvalidValueError

__all__ = [
    "MAX_TASK_ERROR_LENGTH",
    "MAX_TASK_TRACEBACK_FRAMES",
    "MAX_TASK_TRACEBACK_LENGTH",
    "ClassifiedTaskError",
    "TaskErrorClassifier",
    "TaskFailureClassification",
    "TaskRetryClass",
    "TaskRetryPolicy",
    "classify_task_error",
    "describe_exception",
    "exception_type_name",
    "format_task_traceback",
    "should_auto_retry",
]


class TaskRetryClass(enum.StrEnum):
    """What may happen after a task failure."""

    RETRYABLE = "retryable"
    """Back to pending with a backoff delay while the attempt budget lasts, then failed."""

    MANUAL = "manual"
    """Failed at once; an operator may retry it by hand."""

    PERMANENT = "permanent"
    """Failed at once and for good; retrying the same input cannot succeed."""

    def should_auto_retry(self) -> bool:
        """Whether the executor may retry automatically."""
        return self is TaskRetryClass.RETRYABLE

    def can_manual_retry(self) -> bool:
        """Whether an operator may retry the failed task by hand."""
        return self is not TaskRetryClass.PERMANENT


@dataclass(frozen=True, slots=True)
class TaskFailureClassification:
    """How one failure is treated and what text is stored and shown for it.

    Attributes:
        retry_class: Whether and how the task may be retried.
        message: The error text stored on the task and put on the failed step.
    """

    retry_class: TaskRetryClass
    message: str


#: A product hook mapping its exceptions to a classification; ``None`` = not mine.
TaskErrorClassifier = Callable[[Exception], TaskFailureClassification | None]


class ClassifiedTaskError(AsterForgeTasksError):
    """Raised by product task code to fail a task with a chosen class and public message.

    Example:
        >>> raise ClassifiedTaskError("Quota exceeded", TaskRetryClass.MANUAL)
        Traceback (most recent call last):
        ...
        aster_forge.tasks._retry.ClassifiedTaskError: Quota exceeded

    Attributes:
        message: The text stored on the task and shown on the failed step.
        retry_class: How the failure is retried.
    """

    def __init__(self, message: str, retry_class: TaskRetryClass = TaskRetryClass.RETRYABLE):
        super().__init__(message)
        self.message = message
        self.retry_class = retry_class


def classify_task_error(
    exc: Exception, *classifiers: TaskErrorClassifier | None
) -> TaskFailureClassification:
    """Classify a failure that escaped a task body.

    Order: a :class:`ClassifiedTaskError` (the product chose class and message); a codec
    failure such as an invalid payload (:class:`~aster_forge.tasks.TaskCodecError`,
    permanent: the same stored value fails the same way again; its message names kind and
    field, never values); each product ``classifier`` in turn (``None`` entries and
    ``None`` answers are skipped); finally RETRYABLE with ``Type: message``, the
    exception's type and its own text, at most 2,000 characters (a worker with
    ``redact_errors`` stores only the type).

    ``classifiers`` are the product's mappings, most specific first.
    """
    if isinstance(exc, ClassifiedTaskError):
        return TaskFailureClassification(exc.retry_class, exc.message)
    if isinstance(exc, TaskCodecError):
        return TaskFailureClassification(TaskRetryClass.PERMANENT, str(exc))
    for classifier in classifiers:
        if classifier is None:
            continue
        chosen = classifier(exc)
        if chosen is not None:
            return chosen
    return TaskFailureClassification(TaskRetryClass.RETRYABLE, describe_exception(exc))


def should_auto_retry(retry_class: TaskRetryClass, attempt: int, max_attempts: int) -> bool:
    """Whether a failed execution goes back to pending rather than to failed.

    ``attempt`` counts the execution that just failed (>= 1).
    """
    return retry_class.should_auto_retry() and attempt < max_attempts


@dataclass(frozen=True, slots=True)
class TaskRetryPolicy:
    """Exponential backoff with jitter and a cap, plus the default attempt budget.

    The delay before retry ``n`` (``n`` = attempts counted so far, >= 1) is
    ``min(max_delay, base_delay * multiplier ** (n - 1))`` reduced by up to
    ``jitter`` of itself, so jitter never pushes it above the cap or below zero.

    Attributes:
        base_delay: The delay after the first failure.
        multiplier: The growth factor per attempt (>= 1).
        max_delay: The cap.
        jitter: The fraction (0..1) by which a delay may be randomly shortened.
        max_attempts: The default attempt budget for new tasks.
    """

    base_delay: timedelta = timedelta(seconds=5)
    multiplier: float = 3.0
    max_delay: timedelta = timedelta(minutes=5)
    jitter: float = 0.1
    max_attempts: int = 5

    def __post_init__(self) -> None:
        error = TaskInvalidValueError
        check_stored_duration(
            "TaskRetryPolicy.base_delay", self.base_delay, allow_zero=True, error=error
        )
        check_stored_duration(
            "TaskRetryPolicy.max_delay", self.max_delay, allow_zero=True, error=error
        )
        if self.max_delay < self.base_delay:
            raise error("TaskRetryPolicy.max_delay must be >= base_delay")
        check_number_setting("TaskRetryPolicy.multiplier", self.multiplier, error=error)
        if not (self.multiplier >= 1.0 and math.isfinite(self.multiplier)):
            raise error("TaskRetryPolicy.multiplier must be a finite number >= 1")
        check_number_setting("TaskRetryPolicy.jitter", self.jitter, error=error)
        if not 0.0 <= self.jitter <= 1.0:
            raise error("TaskRetryPolicy.jitter must be within [0, 1]")
        check_int_setting("TaskRetryPolicy.max_attempts", self.max_attempts, minimum=1, error=error)

    def backoff(self, attempt: int) -> timedelta:
        """The delay before the next run after ``attempt`` counted attempts, without jitter.

        Monotonic in ``attempt`` up to ``max_delay``; ``attempt < 1`` is treated as 1.
        """
        exponent = max(attempt, 1) - 1
        base = self.base_delay.total_seconds()
        cap = self.max_delay.total_seconds()
        if base == 0.0:
            return timedelta(0)
        # Compare in log space so huge attempt counts saturate instead of overflowing.
        if self.multiplier > 1.0 and exponent * math.log(self.multiplier) >= math.log(cap / base):
            return self.max_delay
        return min(self.max_delay, timedelta(seconds=base * self.multiplier**exponent))

    def delay(self, attempt: int, *, rng: random.Random | None = None) -> timedelta:
        """The jittered delay before the next run after ``attempt`` counted attempts.

        Args:
            attempt: Attempts counted so far, including the one that just failed.
            rng: The random source (default: the module's shared generator).

        Returns:
            A delay in ``[backoff * (1 - jitter), backoff]``; never negative, never above
            ``max_delay``.
        """
        backoff = self.backoff(attempt)
        if self.jitter == 0.0 or backoff == timedelta(0):
            return backoff
        fraction = (rng or random).random() * self.jitter
        return backoff * (1.0 - fraction)


# --- what a failed attempt stores and logs about its exception ---

MAX_TASK_ERROR_LENGTH = 2000
"""The longest stored error text (``Type: message``), in characters."""

MAX_TASK_TRACEBACK_LENGTH = 8192
"""The longest stored traceback, in characters (the newest lines are kept)."""

MAX_TASK_TRACEBACK_FRAMES = 30
"""Frames kept per exception of a traceback's chain (the innermost ones)."""

#: How many members of an exception group the error text names.
_GROUP_MEMBERS = 3

_ELLIPSIS = "…"
_CUT_TRACEBACK = "[older lines cut]\n"


def exception_type_name(exc: BaseException) -> str:
    """The exception's type as a traceback names it (``module.Qualname``; builtins bare)."""
    cls = type(exc)
    module = cls.__module__
    if module in ("builtins", "__main__"):
        return cls.__qualname__
    return f"{module}.{cls.__qualname__}"


def describe_exception(
    exc: BaseException, *, redact: bool = False, limit: int = MAX_TASK_ERROR_LENGTH
) -> str:
    """``Type: message`` for storing and logging, at most ``limit`` characters.

    The message is the exception's own text (the product's words); an exception group
    also names its first members. With ``redact`` (or an empty message) only the type.
    The text is made storable on every backend (NUL and lone surrogates escaped).
    """
    name = exception_type_name(exc)
    if redact:
        return name
    message = _message(exc)
    if isinstance(exc, BaseExceptionGroup):
        members = "; ".join(
            describe_exception(member, limit=limit) for member in exc.exceptions[:_GROUP_MEMBERS]
        )
        message = f"{message}: {members}" if message else members
    text = f"{name}: {message}" if message else name
    return _bounded_head(_storable(text), limit)


def format_task_traceback(exc: BaseException, *, limit: int = MAX_TASK_TRACEBACK_LENGTH) -> str:
    """The traceback Python would print for ``exc`` (its chain too), bounded.

    Each exception of the chain keeps its innermost :data:`MAX_TASK_TRACEBACK_FRAMES`
    frames; past ``limit`` characters the oldest lines are cut, so the raising frame and
    the final exception line always remain.
    """
    try:
        lines = traceback.format_exception(exc, limit=-MAX_TASK_TRACEBACK_FRAMES)
    except Exception:  # a broken __str__ deep in a chain must not lose the failure
        lines = [f"{exception_type_name(exc)} (its traceback could not be formatted)\n"]
    text = _storable("".join(lines))
    if len(text) <= limit:
        return text
    keep = text[-(limit - len(_CUT_TRACEBACK)) :]
    # Start at a whole line, so the text reads as a traceback.
    newline = keep.find("\n")
    if 0 <= newline < len(keep) - 1:
        keep = keep[newline + 1 :]
    return _CUT_TRACEBACK + keep


def _message(exc: BaseException) -> str:
    try:
        return str(exc).strip()
    except Exception:
        return "<the exception's str() failed>"


def _storable(text: str) -> str:
    """``text`` as every backend stores it alike: no NUL, no lone surrogate."""
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def _bounded_head(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[: limit - len(_ELLIPSIS)] + _ELLIPSIS
