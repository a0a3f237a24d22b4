"""Batched, still fenced success writes: many finished tasks, one store round trip."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, cast

from ._lease import TaskLease
from ._records import TaskCompletion
from .protocols import ClaimedTaskExecutionStore

__all__ = ["TaskCompletionBatcher"]

logger = logging.getLogger("aster_forge.tasks.execution")

#: Told what became of one queued success: applied or refused (a bool), or the error.
WrittenCallback = Callable[[bool | BaseException], None]

DEFAULT_MAX_COMPLETION_BATCH = 128

_Entry = tuple[TaskCompletion, WrittenCallback]

#: The fewest successes a statement carries when it is sent beside another one.
DEFAULT_MIN_SPLIT = 16


class TaskCompletionBatcher:
    """Coalesces success writes of one worker into ``mark_tasks_succeeded_many`` calls.

    No timer: the first success is written at once, and successes that arrive while a
    write is in flight go out together once it returned (at most ``max_batch`` per
    statement), so a batch grows with the round trip and an idle worker adds no latency.
    Each entry stays fenced by its own token (a refused entry reports ``False`` for its
    task only). :meth:`succeed` resolves only after the statement that wrote or refused
    the entry returned; if the statement raises, every entry of it sees the error. A
    cancelled caller does not withdraw its entry (it may be on the wire already): shield
    the wait. :meth:`succeed_then` calls back instead of returning a future.

    With ``max_in_flight`` above one, a batch of at least ``min_split`` entries may go
    out beside the write in flight (a large one split in parts of at least
    ``min_split``), so the worker runs the tasks one statement brought while the
    database writes the other's; smaller batches wait, as a statement per few tasks
    costs the database more than the overlap gains.

    Args:
        store: The store whose ``mark_tasks_succeeded_many`` writes a batch.
        max_batch: The most entries per statement.
        write: What writes one batch (default ``store.mark_tasks_succeeded_many``; a
            worker passes one that also claims the freed slots).
        max_in_flight: The most statements in flight at once.
        min_split: The fewest entries of a statement sent beside another.

    Raises:
        ValueError: When ``max_batch``, ``max_in_flight`` or ``min_split`` is below 1.
    """

    def __init__(
        self,
        store: ClaimedTaskExecutionStore,
        *,
        max_batch: int = DEFAULT_MAX_COMPLETION_BATCH,
        write: Callable[[list[TaskCompletion]], Awaitable[Sequence[bool]]] | None = None,
        max_in_flight: int = 1,
        min_split: int = DEFAULT_MIN_SPLIT,
    ) -> None:
        for name, value in (
            ("max_batch", max_batch),
            ("max_in_flight", max_in_flight),
            ("min_split", min_split),
        ):
            if value < 1:
                raise ValueError(f"{name} must be >= 1")
        self._store: Any = store
        self._write: Callable[[list[TaskCompletion]], Awaitable[Sequence[bool]]] = (
            write or cast(Any, store).mark_tasks_succeeded_many
        )
        self._max_batch = max_batch
        self._max_in_flight = max_in_flight
        self._min_split = min_split
        self._queue: list[_Entry] = []
        self._writers: set[asyncio.Task[None]] = set()
        self._gathering = False
        self.batches = 0
        """How many store calls were made (for measurements)."""

    def succeed(
        self, lease: TaskLease, result_json: str | None, steps_json: str | None
    ) -> asyncio.Future[bool]:
        """Queue a fenced success write; the future resolves once it was written or refused."""
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self.succeed_then(lease, result_json, steps_json, functools.partial(_resolve, future))
        return future

    def succeed_then(
        self,
        lease: TaskLease,
        result_json: str | None,
        steps_json: str | None,
        written: WrittenCallback,
    ) -> None:
        """Queue a fenced success write; ``written`` is called once the statement returned."""
        self._queue.append((TaskCompletion(lease, result_json, steps_json), written))
        if self._gathering:
            return  # a writer takes the batch after this loop turn
        if not self._writers:
            self._gathering = True
            self._spawn()
        elif len(self._writers) < self._max_in_flight and len(self._queue) >= self._min_split:
            self._spawn()  # worth a statement beside the one in flight

    def _spawn(self) -> None:
        writer = asyncio.create_task(self._flush(), name="aster-forge:task-completions")
        self._writers.add(writer)
        writer.add_done_callback(self._never_ran)

    def _never_ran(self, writer: asyncio.Task[None]) -> None:
        """A writer cancelled before its first step (a closing loop) ran no cleanup.

        Left in place, it would keep the burst gathering and itself in flight forever;
        its queue is told the write was interrupted, as on a cancellation mid-write.
        """
        if writer not in self._writers:
            return  # it ran: its own cleanup did all this
        self._writers.discard(writer)
        if self._writers:
            return  # another writer takes the queue
        self._gathering = False
        self._interrupt([])

    async def join(self) -> None:
        """Wait until every queued write has been sent and answered."""
        while self._writers:
            await asyncio.gather(*self._writers, return_exceptions=True)

    def _take(self) -> list[_Entry]:
        """The next batch for the calling writer (empty: nothing it should send)."""
        queued = len(self._queue)
        others = len(self._writers) - 1
        if not queued or (others and queued < self._min_split):
            return []  # a small batch waits for the write in flight (its writer takes it)
        # Split what is queued among the writers that may still start, each part at
        # least min_split entries; the rest goes to a writer started for it.
        parts = min(self._max_in_flight - others, queued // self._min_split)
        size = min(-(-queued // max(parts, 1)), self._max_batch)
        batch = self._queue[:size]
        del self._queue[:size]
        if len(self._queue) >= self._min_split and len(self._writers) < self._max_in_flight:
            self._spawn()
        self.batches += 1
        return batch

    async def _flush(self) -> None:
        me = cast("asyncio.Task[None]", asyncio.current_task())
        gathering = self._gathering  # only the first writer of a burst gathers
        try:
            if gathering:
                # One loop turn lets tasks finishing in the same turn join the batch.
                await asyncio.sleep(0)
                gathering = self._gathering = False
            # What queued while a write was in flight goes out at once (it waited a
            # round trip already).
            while batch := self._take():
                await self._send(batch)
        finally:
            if gathering:
                self._gathering = False  # cancelled while gathering
            self._writers.discard(me)

    async def _send(self, batch: list[_Entry]) -> None:
        try:
            results = await self._write([c for c, _ in batch])
            if len(results) != len(batch):
                raise RuntimeError(
                    f"mark_tasks_succeeded_many returned {len(results)} results "
                    f"for {len(batch)} completions"
                )
        except Exception as exc:
            for _, waiter in batch:
                _tell(waiter, exc)
        except BaseException:
            # Cancelled mid-write: the outcome is unknown; tell every waiter.
            self._interrupt(batch)
            raise
        else:
            for (_, waiter), ok in zip(batch, results, strict=True):
                _tell(waiter, bool(ok))

    def _interrupt(self, batch: list[_Entry]) -> None:
        """Tell ``batch`` and everything queued that the write was interrupted; empty the queue."""
        interrupted = RuntimeError("the batched success write was interrupted")
        queued, self._queue = self._queue, []
        for _, waiter in (*batch, *queued):
            _tell(waiter, interrupted)


def _resolve(future: asyncio.Future[bool], outcome: bool | BaseException) -> None:
    if future.done():
        return
    if isinstance(outcome, BaseException):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)


def _tell(waiter: WrittenCallback, outcome: bool | BaseException) -> None:
    try:
        waiter(outcome)
    except Exception:
        logger.exception("recording a batched success write failed")
