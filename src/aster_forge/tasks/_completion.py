"""Batched, still fenced success writes: many finished tasks, one store round trip."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, cast

from ._lease import TaskLease
from ._records import TaskCompletion
from .protocols import ClaimedTaskExecutionStore

__all__ = ["TaskCompletionBatcher", "supports_batched_success"]

logger = logging.getLogger("aster_forge.tasks.execution")

#: Told what became of one queued success: applied or refused (a bool), or the error.
WrittenCallback = Callable[[bool | BaseException], None]

DEFAULT_MAX_COMPLETION_BATCH = 128


def supports_batched_success(store: object) -> bool:
    """Whether ``store`` has ``mark_tasks_succeeded_many`` (the batcher's fast path)."""
    return callable(getattr(store, "mark_tasks_succeeded_many", None))


class TaskCompletionBatcher:
    """Coalesces success writes of one worker into ``mark_tasks_succeeded_many`` calls.

    No timer: the first success is written at once; successes that arrive while a
    write is in flight wait for it and then go out together (up to ``max_batch`` per
    statement). Under load the batch grows with the round-trip time, idle there is no
    added latency. Each entry stays fenced by its own token; a refused entry reports
    ``False`` for that task only. :meth:`succeed` returns only after the statement that
    wrote (or refused) the entry has returned, so an outcome is never reported before
    it is stored; if the statement raises, every entry of that batch sees the error.
    A caller cancelled while waiting does not withdraw its entry (it may already be on
    the wire): use :func:`asyncio.shield` and wait for the result. A caller that need not
    wait passes ``written`` instead and is called back once the statement returned.

    Args:
        store: A store with ``mark_tasks_succeeded_many`` (see
            :func:`supports_batched_success`).
        max_batch: The most entries per statement.
        write: What writes one batch (default ``store.mark_tasks_succeeded_many``; a
            worker passes one that also claims the freed slots).
    """

    def __init__(
        self,
        store: ClaimedTaskExecutionStore,
        *,
        max_batch: int = DEFAULT_MAX_COMPLETION_BATCH,
        write: Callable[[list[TaskCompletion]], Awaitable[Sequence[bool]]] | None = None,
    ) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        self._store: Any = store
        self._write: Callable[[list[TaskCompletion]], Awaitable[Sequence[bool]]] = (
            write or cast(Any, store).mark_tasks_succeeded_many
        )
        self._max_batch = max_batch
        self._queue: list[tuple[TaskCompletion, asyncio.Future[bool] | WrittenCallback]] = []
        self._flusher: asyncio.Task[None] | None = None
        self.batches = 0
        """How many store calls were made (for measurements)."""

    def succeed(
        self, lease: TaskLease, result_json: str | None, steps_json: str | None
    ) -> asyncio.Future[bool]:
        """Queue a fenced success write; the future resolves once it was written or refused."""
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._queue_entry(TaskCompletion(lease, result_json, steps_json), future)
        return future

    def succeed_then(
        self,
        lease: TaskLease,
        result_json: str | None,
        steps_json: str | None,
        written: WrittenCallback,
    ) -> None:
        """Queue a fenced success write; ``written`` is called once the statement returned."""
        self._queue_entry(TaskCompletion(lease, result_json, steps_json), written)

    def _queue_entry(
        self, completion: TaskCompletion, waiter: asyncio.Future[bool] | WrittenCallback
    ) -> None:
        self._queue.append((completion, waiter))
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush(), name="aster-forge:task-completions")

    async def join(self) -> None:
        """Wait until every queued write has been sent and answered."""
        while self._flusher is not None:
            await asyncio.gather(self._flusher, return_exceptions=True)

    async def _flush(self) -> None:
        try:
            # One loop turn lets tasks finishing in the same turn join the first batch.
            await asyncio.sleep(0)
            while self._queue:
                batch = self._queue[: self._max_batch]
                del self._queue[: self._max_batch]
                self.batches += 1
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
                    continue
                except BaseException:
                    # Cancelled mid-write: the outcome is unknown; tell every waiter.
                    interrupted = RuntimeError("the batched success write was interrupted")
                    for _, waiter in (*batch, *self._queue):
                        _tell(waiter, interrupted)
                    self._queue.clear()
                    raise
                for (_, waiter), ok in zip(batch, results, strict=True):
                    _tell(waiter, bool(ok))
        finally:
            self._flusher = None


def _tell(waiter: asyncio.Future[bool] | WrittenCallback, outcome: bool | BaseException) -> None:
    if isinstance(waiter, asyncio.Future):
        if not waiter.done():
            if isinstance(outcome, BaseException):
                waiter.set_exception(outcome)
            else:
                waiter.set_result(outcome)
        return
    try:
        waiter(outcome)
    except Exception:
        logger.exception("recording a batched success write failed")
