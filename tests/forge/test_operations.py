"""The Forge's operations on its tasks (read, list, cancel, retry, prune, lanes, await a
result) on memory, SQLite, PostgreSQL and MariaDB, without touching ``forge.backend``."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from aster_forge import (
    ClassifiedTaskError,
    Forge,
    ForgeDeclarationError,
    ForgeTask,
    ForgeTaskFailedError,
    TaskCancelOutcome,
    TaskNotFoundError,
    TaskRetention,
    TaskRetryClass,
    TaskStateError,
    TaskStatus,
)

from ._bodies import Thumbnail, ThumbnailResult


@dataclass
class Product:
    forge: Forge
    render: ForgeTask


async def _product(url: str) -> Product:
    forge = Forge(url, create_tables=True)
    forge.lane("media", concurrency=2)

    @forge.task(lane="media", max_attempts=1)
    async def render(payload: Thumbnail) -> ThumbnailResult:
        if payload.width == 13:
            raise ClassifiedTaskError("width 13 is unlucky", TaskRetryClass.PERMANENT)
        return ThumbnailResult(path=f"/thumbs/{payload.file_id}.png")

    await forge.migrate()
    return Product(forge, render)


async def test_read_list_and_await_results(forge_at: str) -> None:
    product = await _product(forge_at)
    forge, render = product.forge, product.render
    made = [await render.enqueue(Thumbnail(file_id=i)) for i in range(3)]
    unlucky = await render.enqueue(Thumbnail(file_id=9, width=13))

    record = await forge.get_task(made[0].task_id)
    assert record is not None and record.status is TaskStatus.PENDING
    assert await forge.get_task(10_000_000) is None

    page = await forge.list_tasks(task=render, limit=2)
    assert [r.id for r in page.items] == [unlucky.task_id, made[2].task_id]
    rest = await forge.list_tasks(task="render", before_id=page.next_before_id)
    assert [r.id for r in rest.items] == [made[1].task_id, made[0].task_id]
    assert (await forge.list_tasks(lane="default")).items == []

    drained = await forge.drain()
    assert drained.succeeded == 3 and drained.failed == 1

    assert await forge.result(made[1]) == ThumbnailResult(path="/thumbs/1.png")
    assert await forge.result(made[2].task_id) == ThumbnailResult(path="/thumbs/2.png")
    with pytest.raises(ForgeTaskFailedError, match="width 13 is unlucky") as failed:
        await forge.result(unlucky)
    assert failed.value.task.status is TaskStatus.FAILED
    with pytest.raises(TaskNotFoundError):
        await forge.result(10_000_000)
    succeeded = await forge.list_tasks(status=TaskStatus.SUCCEEDED)
    assert {r.id for r in succeeded.items} == {m.task_id for m in made}
    await forge.aclose()


async def test_result_waits_for_a_worker_and_times_out_while_pending(forge_at: str) -> None:
    product = await _product(forge_at)
    forge, render = product.forge, product.render
    made = await render.enqueue(Thumbnail(file_id=5))
    # Nothing runs the task: the wait is bounded by the caller's own timeout.
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):
            await forge.result(made)
    assert (await forge.get_task(made.task_id)).status is TaskStatus.PENDING  # type: ignore[union-attr]

    waiting = asyncio.create_task(forge.result(made), name="await-result")
    await asyncio.sleep(0)
    assert not waiting.done()
    await forge.drain()
    async with asyncio.timeout(10):
        assert await waiting == ThumbnailResult(path="/thumbs/5.png")
    await forge.aclose()


async def test_cancel_and_retry(forge_at: str) -> None:
    product = await _product(forge_at)
    forge, render = product.forge, product.render
    pending = await render.enqueue(Thumbnail(file_id=1))
    assert await forge.cancel_task(pending.task_id) is TaskCancelOutcome.CANCELLED
    assert await forge.cancel_task(pending.task_id) is TaskCancelOutcome.ALREADY_FINISHED
    assert await forge.cancel_task(10_000_000) is TaskCancelOutcome.NOT_FOUND
    with pytest.raises(ForgeTaskFailedError, match="cancelled"):
        await forge.result(pending)

    later = datetime.now(UTC) + timedelta(hours=1)
    retried = await forge.retry_task(pending.task_id, run_at=later)
    assert retried.status is TaskStatus.PENDING and retried.attempt == 0
    assert (await forge.drain()).succeeded == 0  # not due for an hour
    with pytest.raises(TaskStateError):
        await forge.retry_task(pending.task_id)  # pending: nothing to retry
    with pytest.raises(TaskNotFoundError):
        await forge.retry_task(10_000_000)
    await forge.aclose()


async def test_pause_resume_and_unknown_lanes(forge_at: str) -> None:
    product = await _product(forge_at)
    forge, render = product.forge, product.render
    made = await render.enqueue(Thumbnail(file_id=2))
    paused = await forge.pause_lane("media")
    assert paused.paused
    assert (await forge.drain()).succeeded == 0
    assert [s.lane for s in await forge.lane_states() if s.paused] == ["media"]
    await forge.resume_lane("media")
    assert (await forge.drain()).succeeded == 1
    assert await forge.result(made) == ThumbnailResult(path="/thumbs/2.png")
    with pytest.raises(ForgeDeclarationError, match="nowhere"):
        await forge.pause_lane("nowhere")
    await forge.aclose()


async def test_prune_deletes_only_finished_tasks_past_their_age(forge_at: str) -> None:
    product = await _product(forge_at)
    forge, render = product.forge, product.render
    done = await render.enqueue(Thumbnail(file_id=3))
    await forge.drain()
    waiting = await render.enqueue(Thumbnail(file_id=4), delay=timedelta(hours=1))

    kept = await forge.prune()  # the default ages: a fresh success stays
    assert kept.total == 0
    report = await forge.prune(TaskRetention(succeeded=timedelta(0), batch_size=1))
    assert report.removed[TaskStatus.SUCCEEDED] == 1
    assert await forge.get_task(done.task_id) is None
    assert await forge.get_task(waiting.task_id) is not None
    await forge.aclose()


async def test_result_sync_from_a_thread(forge_at: str) -> None:
    product = await _product(forge_at)
    forge, render = product.forge, product.render
    made = await render.enqueue(Thumbnail(file_id=7))
    await forge.drain()
    outcome: list[object] = []

    def wait() -> None:
        try:
            outcome.append(forge.result_sync(made, timeout=timedelta(seconds=10)))
        except BaseException as exc:  # handed to the test's thread
            outcome.append(exc)

    thread = threading.Thread(target=wait, name="result-sync")
    thread.start()
    await asyncio.to_thread(thread.join)
    assert outcome == [ThumbnailResult(path="/thumbs/7.png")]
    await forge.aclose()


async def test_result_sync_times_out_and_rejects_a_negative_timeout() -> None:
    product = await _product("memory://")
    forge, render = product.forge, product.render
    made = await render.enqueue(Thumbnail(file_id=8))
    with pytest.raises(TimeoutError):
        await asyncio.to_thread(forge.result_sync, made, timeout=0.02)
    with pytest.raises(ValueError, match="negative"):
        await asyncio.to_thread(forge.result_sync, made, timeout=-1)
