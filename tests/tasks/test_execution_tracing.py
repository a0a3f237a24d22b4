"""The attempt span of a claimed execution at the tasks level: a store-level enqueue
links it, a rescue and a lost lease show as events (in-memory store, manual clock)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from aster_forge import TaskExecutionContext
from aster_forge.tasks import (
    ClaimedTaskOutcome,
    TaskLeaseLostError,
)
from aster_forge.testing import InMemoryTaskStore, ManualClock

from .._tracing import collected_spans, spans_named
from ._dispatch_support import (
    LEASE_TTL,
    REGISTRY,
    Harness,
    Job,
    Kind,
    Lane,
    claim_one,
    enqueue,
    make_config,
    new_task,
    run_claimed,
)


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    with collected_spans() as exporter:
        yield exporter


async def test_a_rescued_claim_links_to_the_registry_built_enqueue(
    spans: InMemorySpanExporter,
) -> None:
    clock = ManualClock()
    store = InMemoryTaskStore(clock)
    with trace.get_tracer("product").start_as_current_span("POST /mail") as request:
        task = REGISTRY.new_task(Kind.MAIL, Job(name="m"))
    (task_id,) = await enqueue(store, task)
    await claim_one(store, Lane.FALLBACK, owner="a-worker-that-dies")
    await clock.advance(LEASE_TTL * 2)
    record = await claim_one(store, Lane.FALLBACK)
    assert record.rescued and record.trace_context == task.trace_context
    report = await run_claimed(store, record, make_config(Harness(), clock))
    assert report.outcome is ClaimedTaskOutcome.SUCCEEDED
    (attempt,) = spans_named(spans, "process mail")
    assert [event.name for event in attempt.events] == ["aster_forge.task.rescued"]
    attributes = dict(attempt.attributes or {})
    assert (attributes["aster_forge.task.id"], attributes["aster_forge.task.attempt"]) == (
        task_id,
        2,  # the lost worker's attempt counted
    )
    # No send span at this level: the attempt links to the span the request was in.
    assert [link.context.span_id for link in attempt.links] == [request.get_span_context().span_id]


async def test_a_lost_lease_shows_as_an_event(spans: InMemorySpanExporter) -> None:
    clock = ManualClock()
    store = InMemoryTaskStore(clock)
    harness = Harness()

    async def lost(ctx: TaskExecutionContext, job: Job) -> int:
        raise TaskLeaseLostError(ctx.task_id, ctx.lease.processing_token)

    harness.actions["lost"] = lost
    await enqueue(store, new_task(Kind.MAIL, "lost"))
    record = await claim_one(store, Lane.FALLBACK)
    report = await run_claimed(store, record, make_config(harness, clock))
    assert report.outcome is ClaimedTaskOutcome.LEASE_LOST
    (attempt,) = spans_named(spans, "process mail")
    assert [event.name for event in attempt.events] == ["aster_forge.task.lease_lost"]
    assert dict(attempt.attributes or {})["aster_forge.task.outcome"] == "lease_lost"
    assert attempt.status.status_code is StatusCode.UNSET
    assert attempt.links == ()  # enqueued with no trace context
