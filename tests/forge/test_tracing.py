"""OpenTelemetry: an enqueue is a PRODUCER span whose context is stored with the task, and
each attempt (on any engine, after any restart) a CONSUMER span linked to it.

The spans go to the SDK's in-memory exporter through a tracer provider set for the test
alone (:func:`spans`); every other test runs with no provider, as a process without the
``tracing`` extra does.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from aster_forge import (
    Forge,
    ForgeTask,
    ForgeWorkerSettings,
    TaskExecutionContext,
    TaskLogContextFilter,
    TaskRetryPolicy,
    TaskSnooze,
    TaskStatus,
)
from aster_forge._cli._logs import JsonLogFormatter
from aster_forge._tracing import enqueue_span
from aster_forge.tasks import ClaimedTaskOutcome

from .._tracing import collected_spans

_NO_DELAY = TaskRetryPolicy(base_delay=timedelta(0), max_delay=timedelta(0), jitter=0.0)


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    with collected_spans() as exporter:
        yield exporter


def _one(exporter: InMemorySpanExporter, name: str) -> ReadableSpan:
    found = [span for span in exporter.get_finished_spans() if span.name == name]
    assert len(found) == 1, [span.name for span in exporter.get_finished_spans()]
    return found[0]


def _named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [span for span in exporter.get_finished_spans() if span.name == name]


class _Product:
    """The same declarations on any number of forges (one per engine, as processes are)."""

    def __init__(self, url: str) -> None:
        self.forge = Forge(url)
        self.forge.lane("mail", concurrency=2)
        tracer = trace.get_tracer("product")
        self.seen_logs: list[logging.LogRecord] = []
        product_log = logging.getLogger("product.body")

        @self.forge.task(lane="mail")
        async def send_mail(payload: int) -> int:
            with tracer.start_as_current_span("render"):
                product_log.warning("rendering")
            return payload

        @self.forge.task(lane="mail")
        def send_sms(payload: int) -> int:
            # A plain def body runs in a worker thread: the context follows it there.
            with tracer.start_as_current_span("dial"):
                product_log.warning("dialling")
            return payload

        @self.forge.task(max_attempts=2, retry=_NO_DELAY)
        async def flaky(payload: int) -> None:
            raise ConnectionError("upstream refused")

        @self.forge.task
        async def later(payload: int) -> None:
            raise TaskSnooze(timedelta(hours=1))

        self.send_mail: ForgeTask = send_mail
        self.send_sms: ForgeTask = send_sms
        self.flaky: ForgeTask = flaky
        self.later: ForgeTask = later


async def test_an_enqueue_in_a_request_links_the_attempt_on_another_engine(
    forge_url: str, spans: InMemorySpanExporter
) -> None:
    web, worker = _Product(forge_url), _Product(forge_url)
    try:
        await web.forge.migrate()
        with trace.get_tracer("product").start_as_current_span("POST /signup") as request:
            made = await web.send_mail.enqueue(7)
        await web.forge.aclose()  # the enqueuing process is gone: the context is in the row
        stored = await worker.forge.backend.task_store.get_task(made.task_id)
        assert stored is not None and stored.trace_context is not None
        assert f"{request.get_span_context().trace_id:032x}" in stored.trace_context
        drained = await worker.forge.drain()
        assert drained.succeeded == 1
    finally:
        await web.forge.aclose()
        await worker.forge.aclose()

    send = _one(spans, "send send_mail")
    process = _one(spans, "process send_mail")
    assert send.kind is SpanKind.PRODUCER and process.kind is SpanKind.CONSUMER
    # The enqueue nests in the request; the attempt starts a trace of its own, linked.
    assert send.parent is not None and send.parent.span_id == request.get_span_context().span_id
    assert process.parent is None
    assert process.context.trace_id != send.context.trace_id
    assert [link.context.span_id for link in process.links] == [send.context.span_id]
    assert json.loads(stored.trace_context)["traceparent"].split("-")[2] == (
        f"{send.context.span_id:016x}"
    )
    assert dict(send.attributes or {}) == {
        "messaging.system": "aster_forge",
        "messaging.operation.name": "send",
        "messaging.operation.type": "send",
        "messaging.destination.name": "mail",
        "messaging.message.id": str(made.task_id),
        "aster_forge.task.kind": "send_mail",
        "aster_forge.task.lane": "mail",
        "aster_forge.task.id": made.task_id,
        "aster_forge.task.created": True,
    }
    assert dict(process.attributes or {}) == {
        "messaging.system": "aster_forge",
        "messaging.operation.name": "process",
        "messaging.operation.type": "process",
        "messaging.destination.name": "mail",
        "messaging.message.id": str(made.task_id),
        "aster_forge.task.id": made.task_id,
        "aster_forge.task.kind": "send_mail",
        "aster_forge.task.lane": "mail",
        "aster_forge.task.attempt": 1,
        "aster_forge.task.max_attempts": 5,
        "aster_forge.task.outcome": "succeeded",
    }
    assert process.status.status_code is StatusCode.UNSET
    # The product's own span inside the body nests under the attempt.
    render = _one(spans, "render")
    assert render.parent is not None and render.parent.span_id == process.context.span_id


async def test_a_plain_def_body_runs_in_the_attempts_context(
    forge_url: str, spans: InMemorySpanExporter
) -> None:
    product = _Product(forge_url)
    try:
        await product.forge.migrate()
        await product.send_sms.enqueue_many([1, 2])
        assert (await product.forge.drain()).succeeded == 2
    finally:
        await product.forge.aclose()
    send = _one(spans, "send send_sms")
    assert dict(send.attributes or {})["messaging.batch.message_count"] == 2
    attempts = {span.context.span_id: span for span in _named(spans, "process send_sms")}
    dials = _named(spans, "dial")
    assert len(attempts) == 2 and len(dials) == 2
    assert {dial.parent.span_id for dial in dials if dial.parent} == set(attempts)
    for attempt in attempts.values():
        assert [link.context.span_id for link in attempt.links] == [send.context.span_id]


async def test_a_failure_records_its_exception_and_a_retry_shows_as_an_event(
    forge_url: str, spans: InMemorySpanExporter
) -> None:
    product = _Product(forge_url)
    try:
        await product.forge.migrate()
        made = await product.flaky.enqueue(1)
        drained = await product.forge.drain()
        assert [task.outcome for task in drained] == [
            ClaimedTaskOutcome.RETRIED,
            ClaimedTaskOutcome.FAILED,
        ]
    finally:
        await product.forge.aclose()
    first, second = sorted(
        _named(spans, "process flaky"),
        key=lambda span: str(dict(span.attributes or {})["aster_forge.task.attempt"]),
    )
    send = _one(spans, "send flaky")
    for attempt, outcome in ((first, "retried"), (second, "failed")):
        attributes = dict(attempt.attributes or {})
        assert attributes["aster_forge.task.outcome"] == outcome
        assert attributes["aster_forge.task.id"] == made.task_id
        assert attributes["error.type"] == "ConnectionError"
        assert attempt.status.status_code is StatusCode.ERROR
        assert attempt.status.description == "ConnectionError: upstream refused"
        (exception,) = [event for event in attempt.events if event.name == "exception"]
        assert dict(exception.attributes or {})["exception.type"] == "ConnectionError"
        assert "upstream refused" in str(dict(exception.attributes or {})["exception.message"])
        # Both attempts read the enqueue's context from the row.
        assert [link.context.span_id for link in attempt.links] == [send.context.span_id]
    (retry,) = [event for event in first.events if event.name == "aster_forge.task.retry"]
    assert dict(retry.attributes or {}) == {"aster_forge.task.delay_seconds": 0.0}
    assert not [event for event in second.events if event.name.startswith("aster_forge.")]


async def test_a_snooze_shows_as_an_event(forge_url: str, spans: InMemorySpanExporter) -> None:
    product = _Product(forge_url)
    try:
        await product.forge.migrate()
        await product.later.enqueue(1)
        assert [task.outcome for task in await product.forge.drain()] == [
            ClaimedTaskOutcome.SNOOZED
        ]
    finally:
        await product.forge.aclose()
    attempt = _one(spans, "process later")
    assert dict(attempt.attributes or {})["aster_forge.task.outcome"] == "snoozed"
    assert [(event.name, dict(event.attributes or {})) for event in attempt.events] == [
        ("aster_forge.task.snooze", {"aster_forge.task.delay_seconds": 3600.0})
    ]
    assert attempt.status.status_code is StatusCode.UNSET  # a snooze is not a failure


async def test_a_body_logs_its_task_on_every_record(forge_url: str) -> None:
    product = _Product(forge_url)
    handler = _Capture()
    handler.addFilter(TaskLogContextFilter())
    logger = logging.getLogger("product.body")
    logger.addHandler(handler)
    try:
        await product.forge.migrate()
        mail = await product.send_mail.enqueue(1)
        sms = await product.send_sms.enqueue(2)
        logger.warning("outside any task")
        assert (await product.forge.drain()).succeeded == 2
    finally:
        logger.removeHandler(handler)
        await product.forge.aclose()
    fields = {
        record.getMessage(): {
            name: getattr(record, name, None)
            for name in ("task_id", "task_kind", "task_lane", "task_attempt")
        }
        for record in handler.records
    }
    assert fields == {
        "outside any task": dict.fromkeys(("task_id", "task_kind", "task_lane", "task_attempt")),
        "rendering": {
            "task_id": mail.task_id,
            "task_kind": "send_mail",
            "task_lane": "mail",
            "task_attempt": 1,
        },
        "dialling": {
            "task_id": sms.task_id,
            "task_kind": "send_sms",
            "task_lane": "mail",
            "task_attempt": 1,
        },
    }
    line = json.loads(JsonLogFormatter().format(handler.records[1]))
    assert (line["task_id"], line["task_kind"], line["task_lane"], line["task_attempt"]) == (
        mail.task_id,
        "send_mail",
        "mail",
        1,
    )


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


async def test_without_a_provider_nothing_is_traced_or_stored(forge_url: str) -> None:
    product = _Product(forge_url)
    try:
        await product.forge.migrate()
        with trace.get_tracer("product").start_as_current_span("POST /signup"):
            made = await product.send_mail.enqueue(7)
        stored = await product.forge.backend.task_store.get_task(made.task_id)
        assert stored is not None and stored.trace_context is None
        assert (await product.forge.drain()).succeeded == 1
    finally:
        await product.forge.aclose()


async def test_a_periodic_firing_is_traced(spans: InMemorySpanExporter) -> None:
    forge = Forge("memory://")
    ran = asyncio.Event()
    seen: list[datetime] = []

    @forge.periodic(every=timedelta(milliseconds=250))
    async def sweep(ctx: TaskExecutionContext, scheduled_at: datetime) -> None:
        seen.append(scheduled_at)
        ran.set()

    async with forge.running():
        await asyncio.wait_for(ran.wait(), timeout=30)
    sends = {span.parent.span_id: span for span in _named(spans, "send sweep") if span.parent}
    attempts = {
        link.context.span_id: span for span in _named(spans, "process sweep") for link in span.links
    }
    # A firing whose task ran: its enqueue nests under it, the attempt links to that.
    traced = [
        fire
        for fire in _named(spans, "fire sweep")
        if fire.context.span_id in sends and sends[fire.context.span_id].context.span_id in attempts
    ]
    assert traced, [span.name for span in spans.get_finished_spans()]
    attributes = dict(traced[0].attributes or {})
    assert attributes["aster_forge.schedule.name"] == "sweep"
    assert datetime.fromisoformat(str(attributes["aster_forge.schedule.scheduled_at"])) in seen


async def test_redacted_errors_put_only_the_exception_type_on_the_span(
    forge_url: str, spans: InMemorySpanExporter
) -> None:
    forge = Forge(forge_url, settings=ForgeWorkerSettings(redact_errors=True))

    @forge.task(max_attempts=1)
    async def charge(payload: int) -> None:
        raise ValueError("card 4111-1111-1111-1111 declined")

    try:
        await forge.migrate()
        await charge.enqueue(1)
        assert (await forge.drain()).failed == 1
    finally:
        await forge.aclose()
    attempt = _one(spans, "process charge")
    assert attempt.status.status_code is StatusCode.ERROR
    assert [(event.name, dict(event.attributes or {})) for event in attempt.events] == [
        ("exception", {"exception.type": "ValueError"})
    ]
    assert "4111" not in str(attempt.to_json())


async def test_a_workflow_join_is_traced_by_the_write_that_releases_it(
    forge_at: str, spans: InMemorySpanExporter
) -> None:
    forge = Forge(forge_at)

    @forge.task
    async def part(payload: int) -> int:
        return payload

    @forge.task(max_attempts=1)
    async def broken(payload: int) -> int:
        raise ValueError("no")

    @forge.task
    async def join(payload: int) -> int:
        return payload

    try:
        await forge.migrate()
        parts = [part.step(1), part.step(2)]
        fan_in, orphan = join.step(0, after=parts), join.step(1, after=[broken.step(3)])
        made = await forge.workflow([fan_in, orphan])
        await forge.drain()
        cancelled_row = await forge.get_task(made[orphan].task_id)
        assert cancelled_row is not None and cancelled_row.status is TaskStatus.CANCELLED
    finally:
        await forge.aclose()

    joins = _named(spans, "join dependents")
    released = [i for join in joins for i in _ids(join, "aster_forge.workflow.released")]
    cancelled = [i for join in joins for i in _ids(join, "aster_forge.workflow.cancelled")]
    # Each fan-in is released (or cancelled) by exactly one write: its last dependency's.
    assert released == [made[fan_in].task_id]
    assert cancelled == [made[orphan].task_id]


def _ids(span: ReadableSpan, key: str) -> list[int]:
    value = (span.attributes or {}).get(key)
    assert isinstance(value, tuple | list), value
    return [int(item) for item in value]


async def test_an_attempt_names_its_partition(forge_url: str, spans: InMemorySpanExporter) -> None:
    product = _Product(forge_url)
    try:
        await product.forge.migrate()
        await product.send_mail.enqueue(1, partition="tenant-7")
        await product.send_mail.enqueue(2)
        assert (await product.forge.drain()).succeeded == 2
    finally:
        await product.forge.aclose()
    partitions = sorted(
        str(dict(span.attributes or {}).get("aster_forge.task.partition"))
        for span in _named(spans, "process send_mail")
    )
    assert partitions == ["None", "tenant-7"]  # left out when the task has none


def test_each_new_provider_gets_the_spans_even_at_a_freed_providers_address() -> None:
    # Providers set and freed one after another often reuse an address: a tracer cached
    # by the address alone would keep sending spans to the first provider's exporter.
    for _ in range(50):
        with collected_spans() as exporter, enqueue_span("mail", 1):
            pass
        assert [span.name for span in exporter.get_finished_spans()] == ["send mail"]
        gc.collect()  # frees the provider now, as a later collection would
