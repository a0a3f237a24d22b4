"""The enqueue coalescer's contract, driven step by step with events (no database).

The store's end-to-end behaviour on every backend is in ``test_enqueue_coalescing.py``.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Sequence
from datetime import UTC, datetime

import pytest

from aster_forge import BackgroundTaskRecord, EnqueueResult, TaskStatus
from aster_forge.db import DatabaseDataError, DatabaseOperationError, DatabaseUnavailableError
from aster_forge.db._enqueue_coalescer import EnqueueCoalescer
from aster_forge.tasks import NewTask

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _result(task: NewTask, task_id: int) -> EnqueueResult:
    record = BackgroundTaskRecord(
        id=task_id,
        kind=task.kind,
        lane=task.lane,
        status=TaskStatus.PENDING,
        payload_json=task.payload_json or "null",
        result_json=None,
        steps_json=None,
        attempt=0,
        max_attempts=1,
        run_at=NOW,
        priority=0,
        processing_token=None,
        lease_expires_at=None,
        claimed_by=None,
        dedupe_key=None,
        last_error=None,
        failure_reason=None,
        manual_retry_allowed=False,
        cancel_requested=False,
        rescued=False,
        created_at=NOW,
        updated_at=NOW,
        started_at=None,
        finished_at=None,
    )
    return EnqueueResult(record, created=True)


class Database:
    """Records every statement; each one waits for :meth:`answer` before it returns."""

    def __init__(self) -> None:
        self.statements: list[list[str]] = []
        self.written: list[str] = []
        self.refuse: set[str] = set()
        self.lose_connection = False
        self._gates: list[asyncio.Event] = []
        self._sent = asyncio.Event()

    async def one(self, task: NewTask) -> EnqueueResult:
        (result,) = await self.many([task])
        return result

    async def many(self, tasks: Sequence[NewTask]) -> list[EnqueueResult]:
        self.statements.append([json.loads(task.payload_json or "null") for task in tasks])
        gate = asyncio.Event()
        self._gates.append(gate)
        self._sent.set()
        await gate.wait()
        if self.lose_connection:
            raise DatabaseUnavailableError("connection lost", operation="enqueue tasks")
        names = [json.loads(task.payload_json or "null") for task in tasks]
        if self.refuse.intersection(names):
            raise DatabaseDataError("value refused", operation="enqueue tasks")
        results = []
        for task, name in zip(tasks, names, strict=True):
            self.written.append(name)
            results.append(_result(task, len(self.written)))
        return results

    async def answer(self) -> None:
        """Let the oldest waiting statement return, then let its callers run."""
        while not self._gates:
            self._sent.clear()
            await self._sent.wait()
        self.release()
        for _ in range(5):
            await asyncio.sleep(0)

    def release(self) -> None:
        """Let the oldest waiting statement return; its callers run at the next step."""
        self._gates.pop(0).set()


def _task(name: str) -> NewTask:
    return NewTask("k", "lane", payload_json=f'"{name}"')


def _name(result: EnqueueResult) -> str:
    return json.loads(result.record.payload_json)  # type: ignore[no-any-return]


def _start(coalescer: EnqueueCoalescer, *names: str) -> list[asyncio.Task[EnqueueResult]]:
    return [asyncio.create_task(coalescer.enqueue(_task(name)), name=name) for name in names]


async def test_a_caller_alone_is_sent_at_once_and_never_batched() -> None:
    db = Database()
    coalescer = EnqueueCoalescer(db.one, db.many)
    for name in ("a", "b", "c"):
        (call,) = _start(coalescer, name)
        await db.answer()
        assert _name(await call) == name
    assert db.statements == [["a"], ["b"], ["c"]]
    assert coalescer.batches == 0


async def test_callers_arriving_while_a_statement_is_in_flight_share_the_next_one() -> None:
    db = Database()
    coalescer = EnqueueCoalescer(db.one, db.many)
    calls = _start(coalescer, "a", "b", "c", "d")
    await asyncio.sleep(0)
    assert db.statements == [["a"]]  # b, c and d wait for it: nothing else on the wire
    await db.answer()
    assert db.statements == [["a"], ["b", "c", "d"]]
    await db.answer()
    results = await asyncio.gather(*calls)
    assert [_name(r) for r in results] == ["a", "b", "c", "d"]
    assert len({r.record.id for r in results}) == 4
    assert coalescer.batches == 1


async def test_a_batch_is_capped_and_the_rest_follows_at_once() -> None:
    db = Database()
    coalescer = EnqueueCoalescer(db.one, db.many, max_batch=2)
    calls = _start(coalescer, "a", "b", "c", "d", "e")
    for _ in range(3):
        await db.answer()
    await asyncio.gather(*calls)
    assert db.statements == [["a"], ["b", "c"], ["d", "e"]]


async def test_a_batch_is_capped_by_its_text_and_a_large_task_goes_alone() -> None:
    db = Database()
    coalescer = EnqueueCoalescer(db.one, db.many, max_batch_chars=10)
    calls = _start(coalescer, "a", "b", "c", "d", "e" * 20, "f")
    for _ in range(4):
        await db.answer()
    await asyncio.gather(*calls)
    # Each payload is 3 characters ('"b"'): three fit in 10; the 22-character one alone.
    assert db.statements == [["a"], ["b", "c", "d"], ["e" * 20], ["f"]]


async def test_a_caller_answered_from_a_batch_that_enqueues_again_joins_the_next_batch() -> None:
    db = Database()
    coalescer = EnqueueCoalescer(db.one, db.many)

    async def twice(name: str) -> None:
        await coalescer.enqueue(_task(name))
        await coalescer.enqueue(_task(name + "2"))

    calls = [asyncio.create_task(twice(name)) for name in ("a", "b", "c")]
    for _ in range(3):
        await db.answer()
    await asyncio.gather(*calls)
    # a alone; a2 queues behind b and c before their batch leaves; b2 and c2 join
    # the next batch instead of each going alone.
    assert db.statements == [["a"], ["b", "c", "a2"], ["b2", "c2"]]


async def test_a_refused_batch_is_sent_again_one_task_each_and_fails_only_its_caller() -> None:
    db = Database()
    db.refuse = {"bad"}
    coalescer = EnqueueCoalescer(db.one, db.many)
    calls = _start(coalescer, "a", "b", "bad", "d")
    for _ in range(5):
        await db.answer()
    outcomes = await asyncio.gather(*calls, return_exceptions=True)
    assert db.statements == [["a"], ["b", "bad", "d"], ["b"], ["bad"], ["d"]]
    assert isinstance(outcomes[2], DatabaseDataError)
    assert [_name(o) for o in outcomes if isinstance(o, EnqueueResult)] == [
        "a",
        "b",
        "d",
    ]
    assert db.written == ["a", "b", "d"]


async def test_an_unknown_outcome_fails_the_whole_batch_and_is_never_sent_again() -> None:
    db = Database()
    coalescer = EnqueueCoalescer(db.one, db.many)
    calls = _start(coalescer, "a", "b", "c")
    await db.answer()
    db.lose_connection = True
    await db.answer()
    assert all(call.done() for call in calls)  # answered at once: nothing is sent again
    outcomes = await asyncio.gather(*calls, return_exceptions=True)
    assert isinstance(outcomes[0], EnqueueResult)
    assert all(isinstance(o, DatabaseUnavailableError) for o in outcomes[1:])
    assert db.statements == [["a"], ["b", "c"]]  # no replay of b or c
    db.lose_connection = False
    (again,) = _start(coalescer, "e")
    await db.answer()
    assert _name(await again) == "e"  # the coalescer is idle again


async def test_a_caller_cancelled_while_queued_is_left_out_of_its_batch() -> None:
    db = Database()
    coalescer = EnqueueCoalescer(db.one, db.many)
    a, b, c = _start(coalescer, "a", "b", "c")
    await asyncio.sleep(0)
    b.cancel()
    await db.answer()
    await db.answer()
    assert _name(await c) == "c"
    with pytest.raises(asyncio.CancelledError):
        await b
    assert db.statements == [["a"], ["c"]]
    assert db.written == ["a", "c"]
    await a


async def test_a_caller_cancelled_on_the_wire_does_not_stop_the_others() -> None:
    db = Database()
    coalescer = EnqueueCoalescer(db.one, db.many)
    a, b, c = _start(coalescer, "a", "b", "c")
    await db.answer()
    assert db.statements == [["a"], ["b", "c"]]
    b.cancel()
    await db.answer()
    assert _name(await c) == "c"
    with pytest.raises(asyncio.CancelledError):
        await b
    assert db.written == ["a", "b", "c"]  # b was on the wire: its row was written
    await a


async def test_a_cancelled_inline_caller_still_hands_the_queue_to_a_writer() -> None:
    db = Database()
    coalescer = EnqueueCoalescer(db.one, db.many)
    a, b = _start(coalescer, "a", "b")
    await asyncio.sleep(0)
    a.cancel()
    with pytest.raises(asyncio.CancelledError):
        await a
    await db.answer()  # the cancelled statement's gate (nobody waits for it)
    await db.answer()
    assert _name(await b) == "b"


async def test_a_writer_cancelled_mid_statement_fails_its_batch_and_what_queued() -> None:
    db = Database()
    coalescer = EnqueueCoalescer(db.one, db.many)
    calls = _start(coalescer, "a", "b", "c")
    await db.answer()
    assert db.statements[-1] == ["b", "c"]
    late = _start(coalescer, "d")
    await asyncio.sleep(0)
    writer = coalescer._writer
    assert writer is not None
    writer.cancel()
    await asyncio.wait({writer})
    outcomes = await asyncio.gather(*calls[1:], *late, return_exceptions=True)
    assert all(isinstance(o, DatabaseOperationError) for o in outcomes)
    assert "outcome is unknown" in str(outcomes[0])
    assert "nothing was written" in str(outcomes[2])
    (again,) = _start(coalescer, "e")
    await db.answer()  # the cancelled statement's gate (nobody waits for it)
    await db.answer()
    assert _name(await again) == "e"
    await calls[0]


async def test_a_writer_cancelled_before_it_ran_fails_the_queue_and_goes_idle() -> None:
    db = Database()
    coalescer = EnqueueCoalescer(db.one, db.many)
    a, b = _start(coalescer, "a", "b")
    await asyncio.sleep(0)
    db.release()
    await asyncio.sleep(0)  # a returns and hands b to a writer that has not run yet
    assert coalescer._writer is not None
    coalescer._writer.cancel()  # cancelled before its first step, as a closing loop does
    with pytest.raises(DatabaseOperationError, match="nothing was written"):
        await b
    assert db.statements == [["a"]]
    await a
    (again,) = _start(coalescer, "c")
    await db.answer()
    assert _name(await again) == "c"


async def test_join_waits_for_the_queued_batch() -> None:
    db = Database()
    coalescer = EnqueueCoalescer(db.one, db.many)
    calls = _start(coalescer, "a", "b")
    await db.answer()
    joined = asyncio.create_task(coalescer.join())
    await asyncio.sleep(0)
    assert not joined.done()
    await db.answer()
    await joined
    await asyncio.gather(*calls)


async def test_a_call_from_another_event_loop_goes_alone() -> None:
    # A store shared with a thread that runs its own loop (``enqueue_sync``): its call
    # cannot wait on this loop's batch, whose answer could never reach it.
    db = Database()

    async def one(task: NewTask) -> EnqueueResult:
        if threading.current_thread() is threading.main_thread():
            return await db.one(task)
        return _result(task, 99)

    coalescer = EnqueueCoalescer(one, db.many)
    (a,) = _start(coalescer, "a")
    await asyncio.sleep(0)  # a is in flight: this loop's coalescer is busy
    # The bound only keeps a regression from hanging the thread (and the run) forever.
    call = asyncio.wait_for(coalescer.enqueue(_task("b")), timeout=10)
    other = await asyncio.to_thread(asyncio.run, call)
    assert _name(other) == "b"
    assert db.statements == [["a"]]
    await db.answer()
    assert _name(await a) == "a"


def test_max_batch_must_be_positive() -> None:
    db = Database()
    with pytest.raises(ValueError, match="max_batch"):
        EnqueueCoalescer(db.one, db.many, max_batch=0)
    with pytest.raises(ValueError, match="max_batch_chars"):
        EnqueueCoalescer(db.one, db.many, max_batch_chars=0)
