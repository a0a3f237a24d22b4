"""Dedupe windows through the Forge API on every backend (the worker running, or not)."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

import pytest

from aster_forge import EnqueueResult, Forge, ForgeWorkerSettings, TaskExecutionContext, TaskStatus
from aster_forge.tasks import DispatchPollConfig
from aster_forge.tasks.errors import TaskDedupeKeyError

from ._bodies import Thumbnail

_FAST = ForgeWorkerSettings(
    poll=DispatchPollConfig(
        base_interval=timedelta(milliseconds=20), max_interval=timedelta(milliseconds=100)
    )
)
_ACTIVE = {TaskStatus.PENDING, TaskStatus.RUNNING}


async def _status(forge: Forge, result: EnqueueResult, *wanted: TaskStatus) -> None:
    store = forge.backend.task_store
    for _ in range(500):
        record = await store.get_task(result.record.id)
        assert record is not None
        if record.status in wanted:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"task {result.record.id} never reached {wanted}")


async def test_a_key_held_until_its_task_finishes(forge_url: str) -> None:
    forge = Forge(forge_url, create_tables=True, settings=_FAST)
    forge.lane("media", concurrency=4)
    gate, started = asyncio.Event(), asyncio.Event()

    @forge.task(lane="media")
    async def thumbnail(ctx: TaskExecutionContext, payload: Thumbnail) -> None:
        started.set()
        await gate.wait()

    async with forge.running():
        first = await thumbnail.enqueue({"file_id": 1}, dedupe_key="file-1", dedupe_while=_ACTIVE)
        await asyncio.wait_for(started.wait(), 10)
        hit = await thumbnail.enqueue({"file_id": 1}, dedupe_key="file-1", dedupe_while=_ACTIVE)
        assert not hit.created and hit.record.id == first.record.id
        # Kept only while pending: the running task no longer holds the key.
        second = await thumbnail.enqueue(
            {"file_id": 1}, dedupe_key="file-1", dedupe_while={TaskStatus.PENDING}
        )
        assert second.created and second.record.id != first.record.id
        gate.set()
        await _status(forge, first, TaskStatus.SUCCEEDED)
        await _status(forge, second, TaskStatus.SUCCEEDED)
        third = await thumbnail.enqueue({"file_id": 1}, dedupe_key="file-1", dedupe_while=_ACTIVE)
        assert third.created and third.record.id not in {first.record.id, second.record.id}
        await _status(forge, third, TaskStatus.SUCCEEDED)
    await forge.aclose()


async def test_replace_rewrites_the_pending_task(forge_at: str) -> None:
    forge = Forge(forge_at, create_tables=True, settings=_FAST)

    @forge.task
    async def thumbnail(ctx: TaskExecutionContext, payload: Thumbnail) -> None:
        return None

    first = await thumbnail.enqueue({"file_id": 1}, dedupe_key="debounce", delay=timedelta(hours=1))
    later = await thumbnail.enqueue(
        {"file_id": 2, "width": 8},
        dedupe_key="debounce",
        delay=timedelta(minutes=5),
        dedupe_for=timedelta(hours=1),
        dedupe_replace=True,
    )
    assert not later.created and later.record.id == first.record.id
    assert json.loads(later.record.payload_json) == {"file_id": 2, "width": 8}
    assert later.record.run_at < first.record.run_at
    with pytest.raises(TaskDedupeKeyError, match="need a dedupe_key"):
        await thumbnail.enqueue({"file_id": 3}, dedupe_replace=True)
    with pytest.raises(TaskDedupeKeyError, match="must include"):
        await thumbnail.enqueue({"file_id": 3}, dedupe_key="x", dedupe_while={TaskStatus.RUNNING})
    await forge.aclose()
