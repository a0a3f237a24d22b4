"""A stale writer on demand: fenced writes held between the lease check and the database.

A worker that loses its lease writes nothing *if it notices*: its own lease guard stops
it. The token fence in the database is there for the case it cannot notice: the process
checked its lease, decided to write, and then stalled (a GC pause, a frozen VM, a
partition) before the statement reached the server. :class:`WriteGate` reproduces
exactly that: once closed, every fenced store call of the worker is held (as a
statement already on the wire: cancelling the caller does not withdraw it) until the
gate opens on SIGUSR1. The scenario opens it only once another worker has rescued the
tasks and is running them under its own tokens, so each held write reaches a row that
belongs to someone else.

The stale worker's tasks pick their final write from their sequence number
(:func:`mode_of`): a step update, a success, a retry, a permanent failure, or (a body
that waits for shutdown) a release.
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from aster_forge import ClassifiedTaskError, TaskExecutionContext, TaskRetryClass
from aster_forge.runtime import CancellationToken

from ._product import REPORT_SEQ_BASE, ChaosState, Job

__all__ = ["FINAL_WRITES", "Mode", "WriteGate", "mode_of", "stale_hook"]

T = TypeVar("T")


class Mode(enum.StrEnum):
    """Which fenced write a stale task is held at (the log's ``op`` names)."""

    STEPS = "steps"
    SUCCEED = "succeed"
    RETRY = "retry"
    FAIL = "fail"
    RELEASE = "release"


FINAL_WRITES = frozenset({Mode.STEPS, Mode.SUCCEED, Mode.RETRY, Mode.FAIL})
"""Held before the worker starts shutting down (then the release follows)."""

_BY_REMAINDER = {1: Mode.SUCCEED, 2: Mode.RETRY, 3: Mode.FAIL, 4: Mode.RELEASE}


def mode_of(seq: int) -> Mode:
    """The write a stale task ends with: reports update a step, work tasks by ``seq % 10``."""
    if seq >= REPORT_SEQ_BASE:
        return Mode.STEPS
    return _BY_REMAINDER.get(seq % 10, Mode.SUCCEED)


class WriteGate:
    """Holds every fenced write while closed (see the module docstring).

    Args:
        shutdown: Cancelled once every write in :data:`FINAL_WRITES` is held (or a
            second after the gate closed), so the release-mode task releases next.
    """

    def __init__(self, shutdown: CancellationToken) -> None:
        self._open = asyncio.Event()
        self._open.set()
        self._shutdown = shutdown
        self._calls: set[asyncio.Task[Any]] = set()
        self._fallback: asyncio.Task[None] | None = None
        self.held: set[str] = set()

    @property
    def closed(self) -> bool:
        """Whether writes are being held now."""
        return not self._open.is_set()

    def close(self) -> None:
        """Start holding writes (idempotent; only the first call counts)."""
        if self._fallback is not None:
            return
        self._open.clear()
        self._fallback = asyncio.create_task(self._shutdown_later(), name="chaos:stall-fallback")

    def open(self) -> None:
        """Let every held write go to the database."""
        self._open.set()

    async def call(self, op: str, write: Callable[[bool], Awaitable[T]]) -> T:
        """Run ``write(held)`` now, or once the gate opens when it is closed."""
        if not self.closed:
            return await write(False)
        self.held.add(op)
        if self.held >= FINAL_WRITES:
            self._shutdown.cancel()
        task = asyncio.create_task(self._later(write), name=f"chaos:held-{op}")
        self._calls.add(task)
        task.add_done_callback(self._calls.discard)
        # Shielded: a caller that gives up (the heartbeat's deadline) leaves it on the wire.
        return await asyncio.shield(task)

    async def _later(self, write: Callable[[bool], Awaitable[T]]) -> T:
        await self._open.wait()
        return await write(True)

    async def _shutdown_later(self) -> None:
        await asyncio.sleep(1.0)
        self._shutdown.cancel()

    async def join(self) -> None:
        """Wait for every held write to finish (call after :meth:`open`)."""
        if self._fallback is not None:
            self._fallback.cancel()
            await asyncio.gather(self._fallback, return_exceptions=True)
        while self._calls:
            await asyncio.gather(*list(self._calls), return_exceptions=True)


_RUN = sa.text(
    "INSERT INTO chaos_runs (task_id, token, owner, lane) VALUES (:id, :token, :owner, :lane)"
)


def stale_hook(engine: AsyncEngine, owner: str, gate: WriteGate) -> Any:
    """The stale worker's body: run a little, close the gate, end with the task's write."""

    async def hook(ctx: TaskExecutionContext, state: ChaosState, job: Job) -> None:
        mode = mode_of(job.seq)
        lease = ctx.lease
        lane = "reports" if job.seq >= REPORT_SEQ_BASE else "fast"
        async with engine.begin() as conn:
            await conn.execute(
                _RUN,
                {
                    "id": lease.task_id,
                    "token": lease.processing_token,
                    "owner": owner,
                    "lane": lane,
                },
            )
        if ctx.steps:
            await ctx.step_active("collect")
        if mode is Mode.RELEASE:
            # Runs until the worker stops; raising then makes the outcome a release.
            await ctx.cancellation.wait()
            ctx.ensure_active()
            raise RuntimeError("unreachable: the context was cancelled")
        await asyncio.sleep(job.sleep_ms / 1000)
        gate.close()
        if mode is Mode.STEPS:
            await ctx.step_succeeded("collect")
        elif mode is Mode.RETRY:
            raise ClassifiedTaskError("stale retry")
        elif mode is Mode.FAIL:
            raise ClassifiedTaskError("stale failure", TaskRetryClass.PERMANENT)

    return hook


def now() -> float:
    """Wall-clock seconds (compared with the trigger log's ``clock_timestamp()``)."""
    return time.time()
