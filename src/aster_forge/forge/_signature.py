"""Reading a task body's signature: which arguments it takes and its payload/result types."""

from __future__ import annotations

import asyncio
import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..tasks._internal import TaskExecutionContext
from .errors import ForgeDeclarationError

__all__ = ["BodyShape", "read_body"]

_NO_PAYLOAD: Any = None
"""The payload type of a body that takes no payload (``payload_json`` is ``null``)."""


@dataclass(frozen=True, slots=True)
class BodyShape:
    """How to call one task body.

    Attributes:
        takes_ctx: The first argument is the :class:`TaskExecutionContext`.
        takes_payload: A payload argument follows (or comes first without a context).
        takes_state: A third argument receives the forge's state (the product's resources).
        payload_type: The payload type (``None`` when the body takes no payload).
        result_type: The return annotation (``None`` when it returns nothing).
        is_async: The body is a coroutine function (a plain ``def`` runs in a thread).
    """

    takes_ctx: bool
    takes_payload: bool
    takes_state: bool
    payload_type: Any
    result_type: Any
    is_async: bool

    async def call(
        self, fn: Callable[..., Any], ctx: TaskExecutionContext, payload: Any, state: Any
    ) -> Any:
        """Call ``fn`` with the arguments its signature asks for."""
        args: list[Any] = []
        if self.takes_ctx:
            args.append(ctx)
        if self.takes_payload:
            args.append(payload)
        if self.takes_state:
            args.append(state)
        if self.is_async:
            return await fn(*args)
        # A plain def must not block the event loop (heartbeats keep running).
        return await asyncio.to_thread(fn, *args)


def _is_ctx_type(hint: object) -> bool:
    return isinstance(hint, type) and issubclass(hint, TaskExecutionContext)


def _takes_ctx(params: list[inspect.Parameter], hints: dict[str, Any], what: str) -> bool:
    """Whether the first parameter is the context, decided by position and count.

    A single parameter is the context only when annotated so (or unannotated and
    named ``ctx``); in a two- or three-parameter body the first parameter is always the
    context, so it must not be annotated as something else.
    """
    if not params:
        return False
    first = params[0]
    hint = hints.get(first.name)
    if len(params) == 1:
        return _is_ctx_type(hint) if hint is not None else first.name == "ctx"
    if hint is None or hint is Any or _is_ctx_type(hint):
        return True
    shape = "(ctx, payload)" if len(params) == 2 else "(ctx, payload, state)"
    raise ForgeDeclarationError(
        f"{what}: a body with {len(params)} parameters is {shape}, but its first "
        f"parameter {first.name!r} is annotated {inspect.formatannotation(hint)}; annotate it "
        f"'{first.name}: TaskExecutionContext' (or Any, or leave it unannotated)"
    )


def read_body(fn: Callable[..., Any], *, what: str) -> BodyShape:
    """Read ``fn``'s signature: ``()``, ``(payload)``, ``(ctx)``, ``(ctx, payload)`` or
    ``(ctx, payload, state)``.

    The shape follows from the number of parameters alone: with two or three, the first
    is the context (annotated ``TaskExecutionContext``, ``Any`` or not at all); a single
    parameter is the payload unless annotated ``TaskExecutionContext`` (or unannotated
    and named ``ctx``).

    Args:
        fn: The task body.
        what: How to name the task in errors (e.g. ``"task 'thumbnail'"``).

    Raises:
        ForgeDeclarationError: Not callable, annotations that do not resolve, keyword-only
            or variadic parameters, more than three parameters, a first parameter of a
            two- or three-parameter body annotated as something other than the
            context, or a payload parameter without a type annotation.
    """
    if not callable(fn):
        raise ForgeDeclarationError(f"{what}: the body is not callable")
    try:
        hints = typing.get_type_hints(fn)
    except (NameError, TypeError) as exc:
        raise ForgeDeclarationError(f"{what}: cannot resolve its annotations ({exc})") from None
    params = list(inspect.signature(fn).parameters.values())
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if any(param.kind not in positional for param in params):
        raise ForgeDeclarationError(
            f"{what}: the body takes only positional parameters: (ctx, payload, state)"
        )
    if len(params) > 3:
        raise ForgeDeclarationError(
            f"{what}: the body takes at most (ctx, payload, state), got {len(params)} parameters"
        )
    takes_ctx = _takes_ctx(params, hints, what)
    rest = params[1:] if takes_ctx else params
    takes_payload = len(rest) >= 1
    payload_type = _NO_PAYLOAD
    if takes_payload:
        name = rest[0].name
        if name not in hints:
            raise ForgeDeclarationError(
                f"{what}: the payload parameter {name!r} needs a type annotation "
                "(a pydantic model, dataclass, TypedDict or plain type)"
            )
        payload_type = hints[name]
    result_type = hints.get("return")
    if result_type is type(None):
        result_type = None
    return BodyShape(
        takes_ctx=takes_ctx,
        takes_payload=takes_payload,
        takes_state=len(rest) == 2,
        payload_type=payload_type,
        result_type=result_type,
        is_async=inspect.iscoroutinefunction(fn),
    )
