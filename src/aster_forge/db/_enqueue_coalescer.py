"""Concurrent one-task enqueues share statements: a busy web service commits in batches.

Each enqueue outside the product's transaction is its own statement and its own commit:
the commit's flush to disk, not the row, is what it costs. A service whose requests
enqueue concurrently would make every caller wait for a connection and a commit of its
own. Instead, a caller that finds no enqueue in flight sends its task at once, exactly
as it would alone (no timer, no added latency); callers that arrive while a statement is
in flight queue, and go out together in one ``enqueue_many`` (one statement, one commit)
the moment it returns. Under load a batch holds what arrived during one round trip.

Each caller still gets its own outcome: its task is checked before it queues (a bad
task is refused to its caller alone); a batch the database refused as a whole, with
nothing written (a value or a constraint it rejected), is sent again one task per
statement, so only the caller whose row the database refuses sees the error. An error
that leaves the outcome unknown (the connection broke, a timeout) is raised to every
caller of the batch and nothing is sent again: nothing is replayed blindly. A caller
cancelled while queued is left out of its batch (nothing is written for it); one
cancelled while its batch is on the wire does not stop the statement for the others.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from ..tasks import NewTask
from ..tasks._internal import EnqueueResult
from .errors import DatabaseDataError, DatabaseIntegrityError, DatabaseOperationError

__all__ = ["DEFAULT_ENQUEUE_BATCH", "DEFAULT_ENQUEUE_BATCH_CHARS", "EnqueueCoalescer"]

#: The most queued tasks one statement carries.
DEFAULT_ENQUEUE_BATCH = 500

#: About the most payload and steps text one batch statement carries: far below any
#: server's packet limit (MariaDB's ``max_allowed_packet`` is 16 MiB by default), so
#: large payloads that go through alone are never refused for sharing a statement.
DEFAULT_ENQUEUE_BATCH_CHARS = 1 << 20

_OPERATION = "enqueue tasks"

#: Errors for which the database answered and rolled the whole batch back.
_REFUSED = (DatabaseDataError, DatabaseIntegrityError)

_Entry = tuple[NewTask, "asyncio.Future[EnqueueResult]"]


class EnqueueCoalescer:
    """Sends one task at once when nothing is in flight, else queues it for the next batch.

    Args:
        one: Enqueues one checked task (the single-task statement).
        many: Enqueues checked tasks atomically, results in input order.
        max_batch: The most tasks one batch statement carries.
        max_batch_chars: About the most payload and steps text one batch carries (a
            task larger than this still goes, in a batch of its own).

    Raises:
        ValueError: When ``max_batch`` or ``max_batch_chars`` is below 1.
    """

    def __init__(
        self,
        one: Callable[[NewTask], Awaitable[EnqueueResult]],
        many: Callable[[Sequence[NewTask]], Awaitable[list[EnqueueResult]]],
        *,
        max_batch: int = DEFAULT_ENQUEUE_BATCH,
        max_batch_chars: int = DEFAULT_ENQUEUE_BATCH_CHARS,
    ) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        if max_batch_chars < 1:
            raise ValueError("max_batch_chars must be >= 1")
        self._one = one
        self._many = many
        self._max_batch = max_batch
        self._max_batch_chars = max_batch_chars
        self._busy = False
        self._loop: asyncio.AbstractEventLoop | None = None  # the busy period's loop
        self._queue: list[_Entry] = []
        self._writer: asyncio.Task[None] | None = None
        self.batches = 0
        """How many batch statements were sent (for measurements and tests)."""

    async def enqueue(self, task: NewTask) -> EnqueueResult:
        """Enqueue ``task`` (already checked) alone, or with the callers queued beside it."""
        loop = asyncio.get_running_loop()
        if self._busy and loop is not self._loop:
            # A store shared with another thread's event loop: a future of this loop
            # cannot be answered from that one, so this call goes alone.
            return await self._one(task)
        if not self._busy:
            self._busy = True
            self._loop = loop
            try:
                return await self._one(task)
            finally:
                self._next()
        future: asyncio.Future[EnqueueResult] = loop.create_future()
        self._queue.append((task, future))
        return await future  # cancelled while queued: the writer leaves it out

    async def join(self) -> None:
        """Wait until every queued task has been sent and answered."""
        while (writer := self._writer) is not None:
            await asyncio.wait({writer})

    def _next(self) -> None:
        """The statement in flight returned: send what queued meanwhile, or go idle."""
        if not self._queue:
            self._busy = False
            return
        writer = asyncio.get_running_loop().create_task(
            self._drain(), name="aster-forge:enqueue-batch"
        )
        self._writer = writer
        writer.add_done_callback(self._writer_done)

    async def _drain(self) -> None:
        try:
            while self._queue:
                batch = self._take()
                if batch:
                    await self._send(batch)
                    # One loop turn: the callers just answered run first, and a caller
                    # that enqueues again joins the next batch instead of going alone.
                    await asyncio.sleep(0)
        finally:
            self._busy = False

    def _take(self) -> list[_Entry]:
        """The next batch: the oldest live entries, within both limits (at least one)."""
        batch: list[_Entry] = []
        chars = taken = 0
        for entry in self._queue:
            task, future = entry
            size = len(task.payload_json) + len(task.steps_json or "")
            if len(batch) == self._max_batch or (batch and chars + size > self._max_batch_chars):
                break
            taken += 1
            if not future.done():  # a caller cancelled while queued is left out
                batch.append(entry)
                chars += size
        del self._queue[:taken]
        return batch

    def _writer_done(self, writer: asyncio.Task[None]) -> None:
        # A writer cancelled before its first step ran no ``finally``: its queue would
        # wait for a statement that never comes.
        if self._writer is writer:
            self._writer = None
        if self._queue and writer.cancelled():
            self._busy = False
            queued, self._queue = self._queue, []
            _settle(queued, _not_sent())

    async def _send(self, batch: list[_Entry]) -> None:
        tasks = [task for task, _ in batch]
        try:
            if len(tasks) == 1:
                results = [await self._one(tasks[0])]
            else:
                self.batches += 1
                results = await self._many(tasks)
        except _REFUSED as exc:
            if len(batch) == 1:
                _settle(batch, exc)
                return
            # Nothing of the batch was written: each task alone finds its own outcome
            # (a caller cancelled meanwhile is left out, as if cancelled while queued).
            for entry in batch:
                if not entry[1].done():
                    await self._send([entry])
            return
        except Exception as exc:
            _settle(batch, exc)  # the outcome is unknown: never sent again
            return
        except BaseException:
            _settle(batch, _interrupted())
            raise
        for (_, future), result in zip(batch, results, strict=True):
            if not future.done():
                future.set_result(result)


def _interrupted() -> DatabaseOperationError:
    return DatabaseOperationError(
        "the batched enqueue was interrupted (its writer was cancelled); its outcome is unknown",
        operation=_OPERATION,
    )


def _not_sent() -> DatabaseOperationError:
    return DatabaseOperationError(
        "the enqueue was not sent: the batch writer was cancelled first; nothing was written",
        operation=_OPERATION,
    )


def _settle(entries: list[_Entry], error: BaseException) -> None:
    for _, future in entries:
        if not future.done():
            future.set_exception(error)
