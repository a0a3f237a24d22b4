"""``trace_context`` is stored as given by every enqueue path and returned by claims.

PostgreSQL alone has six statements (one task with or without a key, a batch with or
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


def _context(n: int) -> str:
    return f'{{"traceparent":"00-{n:032x}-{n:016x}-01","tracestate":"k=é"}}'


def _tasks(lane: str, contexts: list[str | None], *, keyed: bool) -> list[NewTask]:
    return [
        NewTask(
            "k",
            lane,
            payload_json=f'{{"n": {index}}}',
            dedupe_key=f"{lane}-{index}" if keyed else None,
            trace_context=context,
        )
        for index, context in enumerate(contexts)
    ]


@pytest.mark.parametrize("coalesce", [True, False], ids=["coalesced", "direct"])
async def test_every_enqueue_path_stores_the_trace_context(
    engine: AsyncEngine, coalesce: bool
) -> None:
    await create_background_tasks_table(engine)
    store = BackgroundTaskDbStore(engine, coalesce_enqueues=coalesce)
    expected: dict[int, str | None] = {}
    shared = _context(1)
    batches: dict[str, tuple[list[str | None], bool, bool]] = {
        # lane: (contexts, keyed, one call per task)
        "one-plain": ([_context(2)], False, True),
        "one-keyed": ([_context(3)], True, True),
        "one-none": ([None], False, True),
        "many-shared": ([shared, shared, shared], False, False),
        "many-mixed": ([_context(4), None, _context(5)], False, False),
        "many-keyed": ([_context(6), None, shared], True, False),
    }
    for lane, (contexts, keyed, single) in batches.items():
        tasks = _tasks(lane, contexts, keyed=keyed)
        results = (
            [await store.enqueue(task) for task in tasks]
            if single
            else await store.enqueue_many(tasks)
        )
        for task, result in zip(tasks, results, strict=True):
            assert result.record.trace_context == task.trace_context
            expected[result.task_id] = task.trace_context
    async with engine.begin() as conn:
        tasks = _tasks("in-transaction", [_context(7), None], keyed=False)
        for task, result in zip(
            tasks, await store.enqueue_many(tasks, connection=conn), strict=True
        ):
            assert result.record.trace_context == task.trace_context
            expected[result.task_id] = task.trace_context
    for task_id, context in expected.items():
        stored = await store.get_task(task_id)
        assert stored is not None and stored.trace_context == context, task_id
    for lane in [*batches, "in-transaction"]:
        for claimed in await store.claim_due_for_lane(lane, 10, "w", _TTL):
            assert claimed.trace_context == expected[claimed.id]


async def test_the_in_memory_store_keeps_the_trace_context() -> None:
    store = InMemoryTaskStore()
    made = await store.enqueue(NewTask("k", "l", trace_context=_context(9)))
    assert made.record.trace_context == _context(9)
    (claimed,) = await store.claim_due_for_lane("l", 1, "w", _TTL)
    assert claimed.trace_context == _context(9)


def test_a_trace_context_must_be_storable_text() -> None:
    with pytest.raises(TaskEnqueueValueError, match="trace_context must be JSON text"):
        NewTask("k", "l", trace_context={"traceparent": "x"})  # type: ignore[arg-type]
    with pytest.raises(TaskEnqueueValueError, match="trace_context contains a NUL"):
        NewTask("k", "l", trace_context="\x00")
