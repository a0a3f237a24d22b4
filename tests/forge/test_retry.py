"""Per-task retry policies: ``@forge.task(retry=TaskRetryPolicy(...))`` sets the backoff of
that task's retryable failures and its default attempt budget, on every backend."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from aster_forge import Forge, ForgeDeclarationError, TaskRetryPolicy, TaskStatus
from aster_forge.tasks import ClaimedTaskOutcome

# Jitter off so the stored run_at is exactly "failure time + backoff".
_HOURLY = TaskRetryPolicy(
    base_delay=timedelta(hours=1), max_delay=timedelta(hours=1), jitter=0.0, max_attempts=4
)
_DAILY = TaskRetryPolicy(
    base_delay=timedelta(days=1), max_delay=timedelta(days=1), jitter=0.0, max_attempts=2
)
# The store and database clocks may differ a little from the test's.
_SLACK = timedelta(seconds=5)


async def test_a_retryable_failure_is_rescheduled_by_its_own_tasks_policy(
    forge_url: str,
) -> None:
    forge = Forge(forge_url)

    @forge.task(retry=_HOURLY)
    async def hourly(payload: int) -> None:
        raise ConnectionError("upstream down")

    @forge.task(retry=_DAILY, max_attempts=7)
    async def daily(payload: int) -> None:
        raise ConnectionError("upstream down")

    @forge.task
    async def worker_default(payload: int) -> None:
        raise ConnectionError("upstream down")

    assert (hourly.max_attempts, daily.max_attempts) == (4, 7)  # the policy's, unless given
    assert hourly.retry is _HOURLY and worker_default.retry is None
    try:
        await forge.migrate()
        ids = {
            task.name: (await task.enqueue(1)).record.id for task in (hourly, daily, worker_default)
        }
        before = datetime.now(UTC)
        drained = await forge.drain()
        after = datetime.now(UTC)
        assert drained.count(ClaimedTaskOutcome.RETRIED) == 3
        store = forge.backend.task_store
        due = {}
        for name, task_id in ids.items():
            record = await store.get_task(task_id)
            assert record is not None and record.status is TaskStatus.PENDING
            assert record.attempt == 1
            due[name] = record.run_at.astimezone(UTC)
        assert (await store.get_task(ids["hourly"])).max_attempts == 4  # type: ignore[union-attr]
        assert before + _HOURLY.base_delay - _SLACK <= due["hourly"]
        assert due["hourly"] <= after + _HOURLY.base_delay + _SLACK
        assert before + _DAILY.base_delay - _SLACK <= due["daily"]
        assert due["daily"] <= after + _DAILY.base_delay + _SLACK
        # Without a policy of its own the worker's (seconds, not hours) applies.
        assert due["worker_default"] <= after + timedelta(minutes=10)
    finally:
        await forge.aclose()


def test_a_retry_that_is_not_a_policy_is_a_declaration_error() -> None:
    forge = Forge("memory://")
    with pytest.raises(ForgeDeclarationError, match="'bad': retry must be a TaskRetryPolicy"):

        @forge.task(name="bad", retry=timedelta(seconds=5))  # type: ignore[call-overload, untyped-decorator]
        async def bad(payload: int) -> None:
            return None
