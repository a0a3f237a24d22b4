"""What a failed attempt leaves behind: the exception's type and message, its traceback,
a timeout's limit; with ``redact_errors`` only the type."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from aster_forge import BackgroundTaskRecord, Forge, ForgeWorkerSettings, TaskStatus
from aster_forge.tasks import ClaimedTaskOutcome


class QuoteServiceError(Exception):
    """What an HTTP client raises for a 5xx reply (its text names status and URL)."""


def _raise_for_status(status: int) -> None:
    raise QuoteServiceError(f"Server error '{status} Service Unavailable' for url '/quotes'")


async def _stored(forge: Forge, task_id: int) -> BackgroundTaskRecord:
    record = await forge.backend.task_store.get_task(task_id)
    assert record is not None
    return record


async def test_a_failed_attempt_keeps_the_message_and_the_traceback(forge_url: str) -> None:
    forge = Forge(forge_url)

    @forge.task(max_attempts=2)
    async def fetch_quote(payload: int) -> None:
        _raise_for_status(payload)

    try:
        await forge.migrate()
        task_id = (await fetch_quote.enqueue(503)).record.id
        drained = await forge.drain()
        assert [t.outcome for t in drained] == [ClaimedTaskOutcome.RETRIED]
        error = (
            "tests.forge.test_failures.QuoteServiceError: "
            "Server error '503 Service Unavailable' for url '/quotes'"
        )
        record = await _stored(forge, task_id)
        assert record.status is TaskStatus.PENDING and record.last_error == error
        trace = record.last_traceback
        assert trace is not None and trace.startswith("Traceback (most recent call last):")
        assert "in fetch_quote" in trace and "in _raise_for_status" in trace
        assert trace.rstrip().endswith(error)
    finally:
        await forge.aclose()


async def test_a_timeout_names_its_limit_and_where_the_body_was(forge_url: str) -> None:
    forge = Forge(forge_url)
    never = asyncio.Event()

    @forge.task(timeout=timedelta(milliseconds=50), max_attempts=1)
    async def stuck(payload: int) -> None:
        await never.wait()  # the body never finishes: only the timeout ends it

    try:
        await forge.migrate()
        task_id = (await stuck.enqueue(1)).record.id
        drained = await forge.drain()
        assert [t.outcome for t in drained] == [ClaimedTaskOutcome.FAILED]
        record = await _stored(forge, task_id)
        assert record.status is TaskStatus.FAILED
        assert record.last_error == "TimeoutError: timed out after 0.05s"
        assert record.last_traceback is not None
        assert "in stuck" in record.last_traceback and "never.wait()" in record.last_traceback
    finally:
        await forge.aclose()


async def test_a_timeout_raised_by_the_body_itself_keeps_its_own_text() -> None:
    forge = Forge("memory://")

    @forge.task(timeout=timedelta(hours=1), max_attempts=1)
    async def dial(payload: int) -> None:
        raise TimeoutError("connect to smtp:25 timed out")

    task_id = (await dial.enqueue(1)).record.id
    await forge.drain()
    record = await _stored(forge, task_id)
    assert record.last_error == "TimeoutError: connect to smtp:25 timed out"


async def test_redact_errors_keeps_only_the_exception_type(forge_url: str) -> None:
    forge = Forge(forge_url, settings=ForgeWorkerSettings(redact_errors=True))

    @forge.task(max_attempts=1)
    async def charge(payload: str) -> None:
        raise ValueError(f"card {payload} declined")

    try:
        await forge.migrate()
        task_id = (await charge.enqueue("4111-1111")).record.id
        drained = await forge.drain()
        assert [t.error for t in drained] == ["ValueError"]
        record = await _stored(forge, task_id)
        assert (record.last_error, record.last_traceback) == ("ValueError", None)
    finally:
        await forge.aclose()
