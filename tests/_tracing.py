"""Set and clear the OpenTelemetry tracer provider of the test process.

The API lets a process set its provider once; tests set their own and clear it after,
so every other test runs as a process without tracing does.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once


def set_tracer_provider(provider: trace.TracerProvider | None) -> None:
    """Make ``provider`` the process's tracer provider (``None``: none, the default)."""
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None
    if provider is not None:
        trace.set_tracer_provider(provider)


def clear_tracer_provider() -> None:
    """Forget a provider a test (or a docs example) set; nothing when none was."""
    api = sys.modules.get("opentelemetry.trace")
    if api is not None and api._TRACER_PROVIDER is not None:
        set_tracer_provider(None)


@contextmanager
def collected_spans() -> Iterator[InMemorySpanExporter]:
    """An SDK provider exporting to memory, the process's provider meanwhile."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    set_tracer_provider(provider)
    try:
        yield exporter
    finally:
        set_tracer_provider(None)
        provider.shutdown()


def spans_named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    """The finished spans called ``name``."""
    return [span for span in exporter.get_finished_spans() if span.name == name]
