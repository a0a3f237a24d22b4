"""Reading a task body's signature: which arguments it takes and its payload/result types."""

from __future__ import annotations

import asyncio
import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..tasks import TaskExecutionContext
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


def _is_ctx(param: inspect.Parameter, hints: dict[str, Any]) -> bool:
    hint = hints.get(param.name)
    if hint is None:
        return param.name == "ctx"
    return isinstance(hint, type) and issubclass(hint, TaskExecutionContext)


def read_body(fn: Callable[..., Any], *, what: str) -> BodyShape:
    """Read ``fn``'s signature: ``()``, ``(payload)``, ``(ctx)``, ``(ctx, payload)`` or
    ``(ctx, payload, state)``.

    Args:
        fn: The task body.
        what: How to name the task in errors (e.g. ``"task 'thumbnail'"``).

    Raises:
        ForgeDeclarationError: Not callable, annotations that do not resolve, keyword-only
            or variadic parameters, more than three parameters, or a payload parameter
            without a type annotation.
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
    takes_ctx = bool(params) and _is_ctx(params[0], hints)
    rest = params[1:] if takes_ctx else params
    if len(rest) == 2 and not takes_ctx:
        raise ForgeDeclarationError(
            f"{what}: with two parameters the first must be the TaskExecutionContext"
        )
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
