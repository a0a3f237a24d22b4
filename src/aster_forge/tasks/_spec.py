"""Typed task specs, their payload/result codecs, and the erased adapter the executor calls."""

from __future__ import annotations

import asyncio
import contextlib
import enum
import inspect
import math
import re
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import pydantic
from pydantic_core import PydanticSerializationError

from ._retry import (
    ClassifiedTaskError,
    TaskErrorClassifier,
    TaskFailureClassification,
    TaskRetryClass,
    TaskRetryPolicy,
    classify_task_error,
    describe_exception,
)
from ._steps import (
    TaskStepInfo,
    TaskStepSpec,
    initial_task_steps_from_specs,
    parse_task_steps_json,
    serialize_task_steps_json,
)
from .errors import TaskCodecError, TaskInvalidValueError, TaskPayloadError

if TYPE_CHECKING:
    from ._context import TaskExecutionContext

__all__ = ["ErasedTaskSpec", "TaskSpec", "task_kind_label"]

StateT = TypeVar("StateT")
PayloadT = TypeVar("PayloadT")
ResultT = TypeVar("ResultT")
KindT = TypeVar("KindT")

# Output that may hide a value pydantic altered silently (see encode_payload).
_SUSPECT_OUTPUT = re.compile(b"null|NaN|Infinity|" + re.escape("\ufffd".encode()))

TaskRunFn = Callable[["TaskExecutionContext", StateT, PayloadT], Awaitable[ResultT]]


_LABELS: dict[object, str] = {}


def task_kind_label(kind: object) -> str:
    """The text used for a task kind in messages: an enum's string value, else its name."""
    try:
        return _LABELS[kind]  # asked twice per attempt (kind and lane): kept per kind
    except (KeyError, TypeError):
        pass
    if isinstance(kind, enum.Enum):
        label = str(kind.value) if isinstance(kind.value, str) else kind.name
    else:
        label = str(kind)
    if len(_LABELS) < 4096:  # kinds and lanes are few
        with contextlib.suppress(TypeError):  # an unhashable value: named, not kept
            _LABELS[kind] = label
    return label


@dataclass(frozen=True, slots=True)
class TaskSpec(Generic[StateT, PayloadT, ResultT]):
    """The typed definition of one task kind: payload/result types, steps and body.

    Payload and result types are anything pydantic's ``TypeAdapter`` accepts: models,
    dataclasses, TypedDicts, primitives; ``result_type=None`` means the kind returns no
    result (``run`` returns ``None`` and nothing is stored).

    Example:
        >>> from pydantic import BaseModel
        >>> class Resize(BaseModel):
        ...     width: int
        >>> async def run(ctx, state, payload: Resize) -> int:
        ...     return payload.width * 2
        >>> spec = TaskSpec(kind="resize", payload_type=Resize, result_type=int, run=run)
        >>> spec.decode_payload('{"width": 3}')
        Resize(width=3)

    Attributes:
        kind: The product kind enum member this spec runs.
        payload_type: The payload type.
        result_type: The result type, or ``None`` for a result-less kind.
        run: ``async run(ctx, state, payload) -> result``, the product's task body. A
            plain ``def`` body is run in a worker thread (``asyncio.to_thread``) so it
            cannot block the event loop.
        steps: The kind's step definitions (may be empty).
        error_classifier: Maps the body's exceptions to a retry class and message;
            unclassified exceptions are retryable with a fixed message.
        retry_policy: This kind's backoff (base, multiplier, cap, jitter) and default
            attempt budget; ``None`` uses the worker's policy.
    """

    kind: Any
    payload_type: Any
    result_type: Any
    run: TaskRunFn[StateT, PayloadT, ResultT]
    steps: tuple[TaskStepSpec, ...] = ()
    error_classifier: TaskErrorClassifier | None = None
    retry_policy: TaskRetryPolicy | None = None
    _payload: pydantic.TypeAdapter[PayloadT] = field(init=False, repr=False, compare=False)
    _result: pydantic.TypeAdapter[ResultT] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "steps", tuple(self.steps))
        if self.retry_policy is not None and not isinstance(self.retry_policy, TaskRetryPolicy):
            raise TaskInvalidValueError(
                f"task spec {task_kind_label(self.kind)!r}: retry_policy must be a TaskRetryPolicy"
            )
        keys = [step.key for step in self.steps]
        if len(set(keys)) != len(keys):
            raise TaskInvalidValueError(
                f"task spec {task_kind_label(self.kind)!r} declares a step key twice: {keys}"
            )
        try:
            payload = pydantic.TypeAdapter(self.payload_type)
            result = None if self.result_type is None else pydantic.TypeAdapter(self.result_type)
        except (pydantic.PydanticSchemaGenerationError, pydantic.PydanticUserError) as exc:
            raise TaskInvalidValueError(
                f"task spec {task_kind_label(self.kind)!r}: payload/result type is not "
                f"supported by pydantic: {exc}"
            ) from exc
        object.__setattr__(self, "_payload", payload)
        object.__setattr__(self, "_result", result)

    @property
    def label(self) -> str:
        """The kind as text, for messages and logs."""
        return task_kind_label(self.kind)

    def encode_payload(self, payload: PayloadT) -> str:
        """Encode a payload to the JSON text stored in the task row.

        The text is standard JSON: a ``NaN`` or infinite float is refused (pydantic
        would write it as ``null``), as is text no backend can store (a lone surrogate).

        Raises:
            TaskPayloadError: (a :class:`TaskCodecError`) When a field holds a
                non-finite float or a lone surrogate; names the kind and the fields,
                never their values.
            TaskCodecError: When the value does not serialise as the payload type.
        """
        try:
            encoded = self._payload.dump_json(payload)
        except (PydanticSerializationError, ValueError, TypeError) as exc:
            # Not chained: the serializer's message quotes the offending value.
            fields = tuple(_unstorable_fields(payload))
            if fields:
                raise self._payload_error("cannot encode payload", fields) from None
            raise TaskCodecError(
                f"cannot encode payload for task kind {self.label!r} ({type(exc).__name__})"
            ) from None
        if _SUSPECT_OUTPUT.search(encoded) is not None:
            # pydantic writes NaN/inf as null (or as a non-standard constant) and a lone
            # surrogate in a dict key as U+FFFD: look closer at the value itself.
            fields = tuple(_unstorable_fields(self._payload.dump_python(payload)))
            if fields:
                raise self._payload_error("cannot encode payload", fields)
        return encoded.decode()

    def validate_payload(self, payload: object) -> PayloadT:
        """Validate a payload object (or anything that validates into one, e.g. a dict).

        Raises:
            TaskPayloadError: Naming the kind and the invalid fields, never their values.
        """
        try:
            return self._payload.validate_python(payload)
        except pydantic.ValidationError as exc:
            raise self._invalid_payload(exc) from None

    def _invalid_payload(self, exc: pydantic.ValidationError) -> TaskPayloadError:
        # Raised ``from None`` by the callers: pydantic's text quotes the input.
        fields, detail = _validation_summary(exc)
        return TaskPayloadError(
            f"invalid payload for task kind {self.label!r}: {detail}",
            task_kind=self.label,
            fields=fields,
        )

    def _payload_error(self, what: str, fields: tuple[str, ...]) -> TaskPayloadError:
        listed = ", ".join(repr(f) for f in fields)
        return TaskPayloadError(
            f"{what} for task kind {self.label!r}: field {listed} is not storable JSON "
            "(a NaN or infinite number, or a lone surrogate)",
            task_kind=self.label,
            fields=fields,
        )

    def decode_payload(self, text: str | bytes) -> PayloadT:
        """Decode and validate stored payload JSON.

        Raises:
            TaskPayloadError: When the JSON is malformed or a field does not validate; the
                message names the kind and the offending fields (never their values). It
                is not chained to pydantic's error, whose text quotes the input.
        """
        try:
            return self._payload.validate_json(text)
        except pydantic.ValidationError as exc:
            raise self._invalid_payload(exc) from None

    def encode_result(self, result: ResultT) -> str | None:
        """Encode a result to JSON text (``None`` for a result-less kind).

        Raises:
            TaskCodecError: When the value does not serialise as the result type.
        """
        if self._result is None:
            return None
        try:
            return self._result.dump_json(result).decode()
        except (PydanticSerializationError, ValueError, TypeError) as exc:
            raise TaskCodecError(
                f"cannot encode result for task kind {self.label!r} ({type(exc).__name__})"
            ) from None

    def decode_result(self, text: str | bytes) -> ResultT:
        """Decode stored result JSON (for APIs that show a finished task's result).

        Raises:
            TaskCodecError: When the kind has no result type or the JSON does not validate.
        """
        if self._result is None:
            raise TaskCodecError(f"task kind {self.label!r} has no result type")
        try:
            return self._result.validate_json(text)
        except pydantic.ValidationError as exc:
            _, detail = _validation_summary(exc)
            raise TaskCodecError(f"invalid result for task kind {self.label!r}: {detail}") from None

    def payload_json_schema(self) -> dict[str, Any]:
        """The JSON Schema of the payload type."""
        return self._payload.json_schema()

    def result_json_schema(self) -> dict[str, Any] | None:
        """The JSON Schema of the result type, ``None`` for a result-less kind."""
        return None if self._result is None else self._result.json_schema()

    def initial_steps(self, *, now: datetime | None = None) -> tuple[TaskStepInfo, ...]:
        """The step list a new task of this kind starts with."""
        return initial_task_steps_from_specs(self.steps, now=now)

    def erase(
        self, *, fallback_classifier: TaskErrorClassifier | None = None
    ) -> ErasedTaskSpec[StateT]:
        """Wrap this spec in the JSON-in/JSON-out adapter the executor calls."""
        return ErasedTaskSpec(self, fallback_classifier=fallback_classifier)


class ErasedTaskSpec(Generic[StateT]):
    """A :class:`TaskSpec` seen through raw JSON, so one executor can run every kind.

    The executor never sees payload or result types: it hands over the stored payload
    text and gets back the result text to store.
    """

    __slots__ = ("_async", "_fallback", "_spec")

    def __init__(
        self,
        spec: TaskSpec[StateT, Any, Any],
        *,
        fallback_classifier: TaskErrorClassifier | None = None,
    ) -> None:
        self._spec = spec
        self._fallback = fallback_classifier
        # Decided once per kind, not per execution (the check walks code flags).
        self._async = inspect.iscoroutinefunction(spec.run)

    @property
    def spec(self) -> TaskSpec[StateT, Any, Any]:
        """The typed spec this adapter wraps."""
        return self._spec

    @property
    def kind(self) -> Any:
        """The kind the spec runs."""
        return self._spec.kind

    @property
    def steps(self) -> tuple[TaskStepSpec, ...]:
        """The kind's step definitions."""
        return self._spec.steps

    async def run_json(
        self, ctx: TaskExecutionContext, state: StateT, payload_json: str | bytes
    ) -> str | None:
        """Decode the payload, run the body, encode the result.

        Args:
            ctx: The execution context of the claimed task.
            state: The product's application state.
            payload_json: The stored payload text.

        Returns:
            The result JSON text to store, or ``None`` for a result-less kind.

        Raises:
            TaskPayloadError: When the payload does not validate (a permanent failure).
            TaskCodecError: When the result does not encode.
            Exception: Whatever the product body raises, unchanged, for the executor to
                classify with :meth:`classify`.
        """
        payload = self._spec.decode_payload(payload_json)
        run = self._spec.run
        if self._async:
            result = await run(ctx, state, payload)
        else:
            # A plain def body may block (sync drivers, CPU work): never on the event loop.
            result = await asyncio.to_thread(run, ctx, state, payload)
            if inspect.isawaitable(result):
                result = await result  # a callable object returning a coroutine
        return self._spec.encode_result(result)

    def classify(self, exc: Exception) -> TaskFailureClassification:
        """Classify a failure of this kind's body.

        See :func:`~aster_forge.tasks.classify_task_error`; the spec's classifier is
        consulted before the registry-wide fallback. Lease-control errors must be handled
        by the executor before calling this.
        """
        return classify_task_error(exc, self._spec.error_classifier, self._fallback)

    def classify_failure(
        self,
        exc: BaseException,
        product: TaskErrorClassifier | None = None,
        *,
        redact: bool = False,
    ) -> tuple[TaskFailureClassification, bool]:
        """Classify what a body raised, and say whether it is an expected outcome.

        A typed error (:class:`ClassifiedTaskError`, a codec error) or an error one of the
        classifiers (the spec's, then the ``product``-wide one) claims is expected: it is
        logged without a traceback. Anything else takes the registry fallback, else
        RETRYABLE with ``Type: message`` (only the type with ``redact``).

        Returns:
            The classification and whether it was expected.
        """
        if isinstance(exc, ClassifiedTaskError | TaskCodecError):
            return self.classify(exc), True
        if isinstance(exc, Exception):
            for classifier in (self._spec.error_classifier, product, self._fallback):
                chosen = classifier(exc) if classifier is not None else None
                if chosen is not None:
                    return chosen, classifier is not self._fallback
        unexpected = describe_exception(exc, redact=redact)
        return TaskFailureClassification(TaskRetryClass.RETRYABLE, unexpected), False

    def initial_steps_json(self, *, now: datetime | None = None) -> str | None:
        """The initial steps JSON for a new task of this kind, ``None`` when it has no steps."""
        if not self._spec.steps:
            return None
        return serialize_task_steps_json(self._spec.initial_steps(now=now))

    def stored_steps(self, steps_json: str | None) -> tuple[TaskStepInfo, ...]:
        """The step list a claimed task runs with: its stored steps, else the spec's.

        A task enqueued without ``steps_json`` (by a store without a registry) still
        runs with its kind's steps, so the body's step updates find their keys.

        Raises:
            TaskCodecError: When ``steps_json`` is not a valid step list.
        """
        if steps_json is None:
            return self._spec.initial_steps() if self._spec.steps else ()
        return parse_task_steps_json(steps_json)

    def __repr__(self) -> str:
        return f"ErasedTaskSpec(kind={self._spec.label!r})"


def _validation_summary(exc: pydantic.ValidationError) -> tuple[tuple[str, ...], str]:
    fields: list[str] = []
    parts: list[str] = []
    for error in exc.errors(include_url=False, include_input=False, include_context=False):
        location = ".".join(str(part) for part in error["loc"]) or "<root>"
        fields.append(location)
        parts.append(f"field {location!r}: {error['msg']}")
    return tuple(fields), "; ".join(parts)


def _unstorable_fields(value: object, path: str = "") -> Iterator[str]:
    """The dotted locations of non-finite floats and lone surrogates inside ``value``."""
    here = path or "<root>"
    if isinstance(value, float):
        if not math.isfinite(value):
            yield here
    elif isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            yield here
    elif isinstance(value, Mapping):
        for key, item in value.items():
            # Escaped so a location never carries an unencodable character itself.
            name = str(key).encode("utf-8", "backslashreplace").decode()
            where = f"{path}.{name}" if path else name
            if isinstance(key, str | float):
                # A key is text too (or a float pydantic writes as text).
                yield from _unstorable_fields(key, where)
            yield from _unstorable_fields(item, where)
    elif isinstance(value, list | tuple | set | frozenset):
        for index, item in enumerate(value):
            yield from _unstorable_fields(item, f"{path}.{index}" if path else str(index))
    elif isinstance(value, pydantic.BaseModel):
        yield from _unstorable_fields(dict(value), path)
