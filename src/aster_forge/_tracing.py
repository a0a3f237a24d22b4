"""OpenTelemetry spans for enqueues, attempts and scheduler firings; off, it costs nothing.

aster-forge never imports OpenTelemetry itself. An application that set a tracer
provider has imported ``opentelemetry.trace``, so while that module is not loaded (the
``tracing`` extra absent, or never configured) every function here returns after one
dict lookup, and while the provider is the API's default (no SDK configured) after one
call more: no span, no carrier, nothing stored.

The enqueue is a PRODUCER span; the propagator's carrier taken inside it is stored
with the task (``trace_context``). Each attempt is a CONSUMER span that *links* to
that context and starts a trace of its own: attempts run minutes or days later, and
more than once (retries, snoozes, rescues), which would stretch the request's trace
over all of that; the messaging conventions require the link and leave a parent
optional.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer

__all__ = [
    "attempt_event",
    "attempt_failed",
    "current_span",
    "end_attempt",
    "enqueue_span",
    "enqueued",
    "firing_span",
    "start_attempt",
    "trace_context",
]

API = "opentelemetry.trace"
"""The API module: tracing is off, and nothing needs asking, until it is imported."""

INSTRUMENTATION = "aster_forge"
SYSTEM = "aster_forge"

_OFF: nullcontext[None] = nullcontext()
_cached: tuple[object, Tracer] | None = None


def _tracer() -> Tracer | None:
    """The tracer of the configured provider, or ``None`` while tracing is off."""
    api: Any = sys.modules.get(API)
    if api is None:
        return None
    # The global the API's own proxy tracers read: None until a provider is set (also
    # by the first get_tracer() when OTEL_PYTHON_TRACER_PROVIDER names one).
    # get_tracer_provider() would look the environment variable up on every call.
    if api.__dict__.get("_TRACER_PROVIDER", api) is None:
        return None
    provider = api.get_tracer_provider()
    if isinstance(provider, api.ProxyTracerProvider | api.NoOpTracerProvider):
        return None
    global _cached
    # Kept with its provider and compared by identity: a test (or a reconfigured process)
    # may set another, and a freed provider's id can be reused by the next one.
    if _cached is None or _cached[0] is not provider:
        _cached = (provider, provider.get_tracer(INSTRUMENTATION))
    return _cached[1]


def trace_context() -> str | None:
    """The current context as the propagator's carrier (JSON text), or ``None``.

    ``None`` while tracing is off or when there is nothing to propagate.
    """
    if _tracer() is None:
        return None
    from opentelemetry import propagate

    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return json.dumps(carrier, sort_keys=True, separators=(",", ":")) if carrier else None


def enqueue_span(name: str, count: int) -> AbstractContextManager[Span | None]:
    """``send <name>``: the PRODUCER span around one enqueue call of ``count`` tasks."""
    tracer = _tracer()
    if tracer is None:
        return _OFF
    from opentelemetry.trace import SpanKind

    attributes: dict[str, Any] = {
        "messaging.system": SYSTEM,
        "messaging.operation.name": "send",
        "messaging.operation.type": "send",
        "aster_forge.task.kind": name,
    }
    if count != 1:
        attributes["messaging.batch.message_count"] = count
    return tracer.start_as_current_span(
        f"send {name}", kind=SpanKind.PRODUCER, attributes=attributes
    )


def enqueued(span: Span | None, lane: str, task_ids: Sequence[int], created: bool) -> None:
    """What one enqueue wrote: the lane, and the task id when it was one task."""
    if span is None:
        return
    span.set_attribute("messaging.destination.name", lane)
    span.set_attribute("aster_forge.task.lane", lane)
    if len(task_ids) == 1:
        span.set_attribute("messaging.message.id", str(task_ids[0]))
        span.set_attribute("aster_forge.task.id", task_ids[0])
        span.set_attribute("aster_forge.task.created", created)


def firing_span(name: str, scheduled_at: datetime) -> AbstractContextManager[Span | None]:
    """``fire <name>``: one firing of a periodic job (its enqueue nests under it)."""
    tracer = _tracer()
    if tracer is None:
        return _OFF
    attributes = {
        "aster_forge.schedule.name": name,
        "aster_forge.schedule.scheduled_at": scheduled_at.isoformat(),
    }
    return tracer.start_as_current_span(f"fire {name}", attributes=attributes)


def dependents_settled(
    *, ended: Sequence[int], released: Sequence[int], cancelled: Sequence[int]
) -> None:
    """``join dependents``: the endings of ``ended`` told to their workflow dependents.

    Recorded by the write that tells them (in its transaction): ``released`` became due
    (a fan-in's last dependency among them), ``cancelled`` were cancelled by a failed or
    cancelled dependency. Nothing while tracing is off or when nobody waited.
    """
    if not (released or cancelled):
        return
    tracer = _tracer()
    if tracer is None:
        return
    attributes: dict[str, Any] = {
        "messaging.system": SYSTEM,
        "aster_forge.workflow.ended": list(ended),
        "aster_forge.workflow.released": list(released),
        "aster_forge.workflow.cancelled": list(cancelled),
    }
    tracer.start_span("join dependents", attributes=attributes).end()


def _links(carrier_json: str | None) -> list[Any]:
    """A link to the stored enqueue context (none when absent or unreadable)."""
    if carrier_json is None:
        return []
    from opentelemetry import propagate, trace

    try:
        carrier = json.loads(carrier_json)
    except ValueError:
        return []  # written by hand or by another tool: the attempt still runs
    if not isinstance(carrier, dict):
        return []
    parent = trace.get_current_span(propagate.extract(carrier)).get_span_context()
    return [trace.Link(parent)] if parent.is_valid else []


def start_attempt(
    *,
    task_id: int,
    kind: str,
    lane: str | None,
    attempt: int,
    max_attempts: int,
    rescued: bool,
    trace_context: str | None,
    partition: str | None = None,
) -> Span | None:
    """``process <kind>``: the CONSUMER span of one attempt, linked to its enqueue.

    Returns ``None`` while tracing is off. The caller ends it (:func:`end_attempt`).
    """
    tracer = _tracer()
    if tracer is None:
        return None
    from opentelemetry.context import Context
    from opentelemetry.trace import SpanKind

    attributes: dict[str, Any] = {
        "messaging.system": SYSTEM,
        "messaging.operation.name": "process",
        "messaging.operation.type": "process",
        "messaging.message.id": str(task_id),
        "aster_forge.task.id": task_id,
        "aster_forge.task.kind": kind,
        "aster_forge.task.attempt": attempt,
        "aster_forge.task.max_attempts": max_attempts,
    }
    if lane is not None:
        attributes["messaging.destination.name"] = lane
        attributes["aster_forge.task.lane"] = lane
    if partition is not None:
        attributes["aster_forge.task.partition"] = partition
    span = tracer.start_span(
        f"process {kind}",
        context=Context(),  # a root: whatever the worker's task runs under is not its parent
        kind=SpanKind.CONSUMER,
        attributes=attributes,
        links=_links(trace_context),
    )
    if rescued:
        span.add_event("aster_forge.task.rescued")
    return span


def current_span(span: Span | None) -> AbstractContextManager[Any]:
    """Make ``span`` current while the body runs, so the product's spans nest under it."""
    if span is None:
        return _OFF
    from opentelemetry.trace import use_span

    return use_span(span, end_on_exit=False, record_exception=False, set_status_on_exception=False)


def attempt_failed(span: Span | None, exc: BaseException, *, redact: bool) -> None:
    """Record the body's exception on the attempt (only its type when ``redact``)."""
    if span is None:
        return
    kind = type(exc).__qualname__
    span.set_attribute("error.type", kind)
    if redact:
        span.add_event("exception", {"exception.type": kind})
    else:
        span.record_exception(exc)


def attempt_event(
    span: Span | None, name: str, attributes: Mapping[str, str | int | float] | None = None
) -> None:
    """Add the event ``aster_forge.task.<name>`` to the attempt."""
    if span is not None:
        span.add_event(f"aster_forge.task.{name}", dict(attributes or {}))


def end_attempt(
    span: Span | None,
    *,
    outcome: str,
    failed: bool,
    delay: timedelta | None = None,
    error: str | None = None,
) -> None:
    """End the attempt: its outcome, an event for a retry, snooze or lost lease, status."""
    if span is None:
        return
    from opentelemetry.trace import StatusCode

    span.set_attribute("aster_forge.task.outcome", outcome)
    if outcome in ("retried", "snoozed"):
        seconds = delay.total_seconds() if delay is not None else 0.0
        span.add_event(
            f"aster_forge.task.{'retry' if outcome == 'retried' else 'snooze'}",
            {"aster_forge.task.delay_seconds": seconds},
        )
    elif outcome == "lease_lost":
        span.add_event("aster_forge.task.lease_lost")
    if failed:
        span.set_status(StatusCode.ERROR, error)
    span.end()
