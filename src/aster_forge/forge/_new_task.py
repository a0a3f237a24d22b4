"""Building a validated :class:`~aster_forge.tasks.NewTask` from a kind and a payload.

To be replaced by ``TaskRegistry.new_task(...)`` once the registry validates enqueues
itself; until then this is the one place the Forge layer builds enqueue requests.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pydantic_core

from ..tasks import NewTask, TaskCodecError, TaskPayloadError, TaskRegistry
from .errors import ForgePayloadError

__all__ = ["new_task"]


def new_task(
    registry: TaskRegistry[Any, Any, Any],
    kind: Any,
    payload: Any,
    *,
    dedupe_key: str | None,
    run_at: datetime | None,
    delay: timedelta,
    priority: int,
    max_attempts: int,
) -> NewTask:
    """Validate ``payload`` against ``kind``'s payload type and build the enqueue request.

    The payload may be an instance of the payload type or plain data (a ``dict`` for a
    model); it is validated the way the worker will decode it, so a payload that would
    fail at execution fails here instead.

    Raises:
        ForgePayloadError: The payload does not validate (naming the task and fields).
        TaskEnqueueValueError: Another field is invalid (priority, run_at, ...).
    """
    spec = registry.typed_spec_for(kind)
    label = spec.label
    try:
        # Round-trip through JSON, exactly what the worker's decode will see; the stored
        # text is decoded once more, so a value JSON cannot carry (NaN) fails here.
        payload_json = spec.encode_payload(spec.decode_payload(pydantic_core.to_json(payload)))
        spec.decode_payload(payload_json)
    except TaskPayloadError as exc:
        # The message names the kind and the fields, never their values.
        raise ForgePayloadError(str(exc), task=label, fields=exc.fields) from exc
    except (pydantic_core.PydanticSerializationError, TaskCodecError) as exc:
        raise ForgePayloadError(
            f"task {label!r}: the payload does not encode as JSON ({type(payload).__name__})",
            task=label,
            fields=(),
        ) from exc
    return NewTask(
        kind=kind,
        lane=registry.lane_of(kind),
        payload_json=payload_json,
        steps_json=registry.spec_for(kind).initial_steps_json(),
        run_at=run_at,
        delay=delay,
        priority=priority,
        max_attempts=max_attempts,
        dedupe_key=dedupe_key,
    )
