"""A task's ``partition`` is stored as given by every enqueue path and returned by claims.

PostgreSQL has six enqueue statements (one task with or without a key, a batch with or
without keys and a shared value, the product's transaction); SQLite and MariaDB take
the portable insert. The in-memory store keeps it too.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from aster_forge.db import BackgroundTaskDbStore, create_background_tasks_table
from aster_forge.tasks import NewTask
from aster_forge.tasks.errors import TaskEnqueueValueError
from aster_forge.testing import InMemoryTaskStore

_TTL = timedelta(minutes=5)


def _tasks(lane: str, partitions: list[str | None], *, keyed: bool) -> list[NewTask]:
    return [
        NewTask(
            "k",
            lane,
            payload_json=f'{{"n": {index}}}',
            dedupe_key=f"{lane}-{index}" if keyed else None,
            partition=partition,
        )
        for index, partition in enumerate(partitions)
    ]


@pytest.mark.parametrize("coalesce", [True, False], ids=["coalesced", "direct"])
async def test_every_enqueue_path_stores_the_partition(engine: AsyncEngine, coalesce: bool) -> None:
    await create_background_tasks_table(engine)
    store = BackgroundTaskDbStore(engine, coalesce_enqueues=coalesce)
    expected: dict[int, str | None] = {}
    batches: dict[str, tuple[list[str | None], bool, bool]] = {
        # lane: (partitions, keyed, one call per task)
        "one-plain": (["tenant-1"], False, True),
        "one-keyed": (["tenant-2"], True, True),
        "one-none": ([None], False, True),
        "many-shared": (["t", "t", "t"], False, False),
        "many-mixed": (["a", None, "é" * 255], False, False),
        "many-keyed": (["a", None, "b"], True, False),
    }
    for lane, (partitions, keyed, single) in batches.items():
        tasks = _tasks(lane, partitions, keyed=keyed)
        results = (
            [await store.enqueue(task) for task in tasks]
            if single
            else await store.enqueue_many(tasks)
        )
        for task, result in zip(tasks, results, strict=True):
            assert result.record.partition_key == task.partition
            expected[result.task_id] = task.partition
    async with engine.begin() as conn:
        tasks = _tasks("in-transaction", ["x", None], keyed=False)
        for task, result in zip(
            tasks, await store.enqueue_many(tasks, connection=conn), strict=True
        ):
            assert result.record.partition_key == task.partition
            expected[result.task_id] = task.partition
    for task_id, partition in expected.items():
        stored = await store.get_task(task_id)
        assert stored is not None and stored.partition_key == partition, task_id
    for lane in [*batches, "in-transaction"]:
        for claimed in await store.claim_due_for_lane(lane, 10, "w", _TTL):
            assert claimed.partition_key == expected[claimed.id]


async def test_the_in_memory_store_keeps_the_partition() -> None:
    store = InMemoryTaskStore()
    made = await store.enqueue(NewTask("k", "l", partition="tenant-9"))
    assert made.record.partition_key == "tenant-9"
    (claimed,) = await store.claim_due_for_lane("l", 1, "w", _TTL)
    assert claimed.partition_key == "tenant-9"


def test_a_partition_must_be_storable_text() -> None:
    with pytest.raises(TaskEnqueueValueError, match="partition must be a str or None, got int"):
        NewTask("k", "l", partition=7)  # type: ignore[arg-type]
    with pytest.raises(TaskEnqueueValueError, match="partition must be 1 to 255 characters"):
        NewTask("k", "l", partition="")
    with pytest.raises(TaskEnqueueValueError, match="partition must be 1 to 255 characters"):
        NewTask("k", "l", partition="x" * 256)
    with pytest.raises(TaskEnqueueValueError, match="partition contains a NUL"):
        NewTask("k", "l", partition="a\x00b")
