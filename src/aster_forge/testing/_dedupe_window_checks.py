"""Dedupe window checks every store runs (mixed into the enqueue conformance suite)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, ClassVar

from ..tasks import BackgroundTaskStore, NewTask, TaskDedupeKey, TaskLease
from ..tasks._internal import BackgroundTaskRecord, TaskStatus
from ._task_control_conformance import lease_of

__all__ = ["DedupeWindowChecks"]

_LONG = timedelta(minutes=10)
_TOP_PRIORITY = 2**31 - 1
_HOUR = timedelta(hours=1)
_PENDING = frozenset({TaskStatus.PENDING})
_ACTIVE = frozenset({TaskStatus.PENDING, TaskStatus.RUNNING})


class DedupeWindowChecks:
    """The dedupe window checks :class:`TaskEnqueueConformance` runs.

    Mixed into the suite, which provides ``_make_store``, ``_advance``, ``short_ttl``,
    ``expiry_slack``, ``contenders`` and ``_window_lane``/``_window_kind``.
    """

    WINDOW_CHECKS: ClassVar[tuple[str, ...]] = (
        "check_dedupe_key_holds_for_ever_by_default",
        "check_dedupe_while_pending",
        "check_dedupe_while_pending_or_running",
        "check_dedupe_for_a_period",
        "check_dedupe_replace_rewrites_a_pending_holder",
        "check_dedupe_window_in_a_batch",
        "check_dedupe_window_race_makes_one_task",
    )

    _make_store: Callable[[], BackgroundTaskStore]
    _advance: Callable[[timedelta], Awaitable[None]]
    short_ttl: timedelta
    expiry_slack: timedelta
    contenders: int
    _window_kind: str
    _window_lane: str

    def _task(
        self, key: str, x: float = 1.0, *, delay: timedelta = timedelta(0), **window: Any
    ) -> NewTask:
        # The top priority: a claim of the shared lane takes it before other checks' rows.
        return NewTask(
            self._window_kind,
            self._window_lane,
            payload_json=json.dumps({"x": x}),
            delay=delay,
            priority=_TOP_PRIORITY,
            dedupe_key=TaskDedupeKey(key, **window),
        )

    async def _claim(self, store: BackgroundTaskStore, task_id: int) -> TaskLease:
        for _ in range(20):
            claimed = await store.claim_due_for_lane(self._window_lane, 50, "dedupe-check", _LONG)
            for record in claimed:
                if record.id == task_id:
                    return lease_of(record)
            if not claimed:
                break
        raise AssertionError(f"task {task_id} could not be claimed")

    @staticmethod
    async def _row(store: BackgroundTaskStore, task_id: int) -> BackgroundTaskRecord:
        record = await store.get_task(task_id)
        assert record is not None, f"task {task_id} vanished"
        return record

    async def _holders(self, store: BackgroundTaskStore, key: str) -> list[BackgroundTaskRecord]:
        page = await store.list_tasks(lane=self._window_lane, limit=1000)
        return [record for record in page.items if record.dedupe_key == key]

    async def check_dedupe_key_holds_for_ever_by_default(self) -> None:
        """Without a window a key keeps returning its task, even after it finished."""
        store = self._make_store()
        key = uuid.uuid4().hex
        first = await store.enqueue(self._task(key))
        assert first.created
        assert await store.mark_task_succeeded(
            await self._claim(store, first.record.id), None, None
        )
        again = await store.enqueue(self._task(key))
        assert not again.created and again.record.id == first.record.id, (
            "a key without a window must hold for ever"
        )

    async def check_dedupe_while_pending(self) -> None:
        """``held_while={PENDING}``: a hit while pending; a new task once it runs."""
        store = self._make_store()
        key = uuid.uuid4().hex
        first = await store.enqueue(self._task(key, held_while=_PENDING))
        hit = await store.enqueue(self._task(key, held_while=_PENDING))
        assert not hit.created and hit.record.id == first.record.id, "pending holder must hold"
        await self._claim(store, first.record.id)
        fresh = await store.enqueue(self._task(key, held_while=_PENDING))
        assert fresh.created and fresh.record.id != first.record.id, (
            "a running holder must not hold a key kept only while pending"
        )
        old = await self._row(store, first.record.id)
        assert old.status is TaskStatus.RUNNING and old.dedupe_key is None, (
            "the old task keeps running and gives its key up"
        )
        assert fresh.record.dedupe_key == key
        again = await store.enqueue(self._task(key, held_while=_PENDING))
        assert not again.created and again.record.id == fresh.record.id
        assert [r.id for r in await self._holders(store, key)] == [fresh.record.id]

    async def check_dedupe_while_pending_or_running(self) -> None:
        """``{PENDING, RUNNING}``: a hit until the task finishes, then a new task."""
        store = self._make_store()
        key = uuid.uuid4().hex
        first = await store.enqueue(self._task(key, held_while=_ACTIVE))
        lease = await self._claim(store, first.record.id)
        hit = await store.enqueue(self._task(key, held_while=_ACTIVE))
        assert not hit.created and hit.record.id == first.record.id, "running holder must hold"
        assert await store.mark_task_succeeded(lease, None, None)
        fresh = await store.enqueue(self._task(key, held_while=_ACTIVE))
        assert fresh.created and fresh.record.id != first.record.id, (
            "a finished holder must not hold a key kept while pending or running"
        )
        old = await self._row(store, first.record.id)
        assert old.status is TaskStatus.SUCCEEDED and old.dedupe_key is None

    async def check_dedupe_for_a_period(self) -> None:
        """``held_for``: the holder keeps the key that long after its enqueue only."""
        store = self._make_store()
        key = uuid.uuid4().hex
        first = await store.enqueue(self._task(key))
        await self._advance(self.short_ttl + self.expiry_slack)
        hit = await store.enqueue(self._task(key, held_for=_HOUR))
        assert not hit.created and hit.record.id == first.record.id, (
            "a holder enqueued within the period must hold"
        )
        fresh = await store.enqueue(self._task(key, held_for=self.short_ttl))
        assert fresh.created and fresh.record.id != first.record.id, (
            "a holder enqueued longer ago than the period must not hold"
        )
        old = await self._row(store, first.record.id)
        assert old.status is TaskStatus.PENDING and old.dedupe_key is None, (
            "the old task stays queued without its key"
        )
        again = await store.enqueue(self._task(key, held_for=_HOUR))
        assert not again.created and again.record.id == fresh.record.id

    async def check_dedupe_replace_rewrites_a_pending_holder(self) -> None:
        """``replace``: a pending holder takes the new payload and run time."""
        store = self._make_store()
        key = uuid.uuid4().hex
        first = await store.enqueue(self._task(key, 1.0, delay=_HOUR))
        kept = await store.enqueue(self._task(key, 5.0))
        assert json.loads(kept.record.payload_json) == {"x": 1.0}, "no replace: row as it was"
        hit = await store.enqueue(self._task(key, 2.0, replace=True))
        assert not hit.created and hit.record.id == first.record.id
        assert json.loads(hit.record.payload_json) == {"x": 2.0}, "the payload was not replaced"
        assert hit.record.run_at < first.record.run_at, "the run time was not replaced"
        stored = await self._row(store, first.record.id)
        assert (stored.payload_json, stored.run_at) == (hit.record.payload_json, hit.record.run_at)
        # Due now: a claim takes it; a running holder is returned as it is.
        await self._claim(store, first.record.id)
        running = await store.enqueue(self._task(key, 3.0, held_while=_ACTIVE, replace=True))
        assert not running.created and running.record.status is TaskStatus.RUNNING
        assert json.loads(running.record.payload_json) == {"x": 2.0}, "a running task changed"

    async def check_dedupe_window_in_a_batch(self) -> None:
        """A batch: an ended holder gives its key to the batch's first task of it, once."""
        store = self._make_store()
        ended, new = uuid.uuid4().hex, uuid.uuid4().hex
        holder = await store.enqueue(self._task(ended))
        await self._claim(store, holder.record.id)
        batch = [
            self._task(ended, 1.0, held_while=_PENDING),
            self._task(ended, 2.0, held_while=_PENDING, replace=True),
            self._task(new, 3.0, held_while=_PENDING),
        ]
        first, second, third = await store.enqueue_many(batch)
        assert first.created and first.record.id != holder.record.id
        assert not second.created and second.record.id == first.record.id
        assert json.loads(second.record.payload_json) == {"x": 1.0}, (
            "a key repeated in a batch returns the batch's own row as inserted"
        )
        assert third.created and third.record.dedupe_key == new
        assert [r.id for r in await self._holders(store, ended)] == [first.record.id]

    async def check_dedupe_window_race_makes_one_task(self) -> None:
        """Racing enqueues after a holder's window ended make exactly one new task."""
        key = uuid.uuid4().hex
        store = self._make_store()
        holder = await store.enqueue(self._task(key))
        await self._claim(store, holder.record.id)
        stores = [self._make_store() for _ in range(self.contenders)]
        results = await asyncio.gather(
            *(s.enqueue(self._task(key, held_while=_PENDING)) for s in stores)
        )
        created = [result for result in results if result.created]
        assert len(created) == 1, f"{len(created)} racers created a task for one key"
        assert {result.record.id for result in results} == {created[0].record.id}
        assert [r.id for r in await self._holders(store, key)] == [created[0].record.id]
