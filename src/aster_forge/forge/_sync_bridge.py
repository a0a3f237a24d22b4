"""Synchronous enqueues (Django, Flask, scripts) run on one event loop in a daemon thread.

A pooled connection belongs to the event loop that opened it, so synchronous code that
ran a fresh loop per call (``asyncio.run``) had to connect anew on every enqueue: a new
server session each time, which costs far more than the enqueue. The bridge keeps one loop
running in a thread of its own, with its own engine and store, and hands each call to
it: a calling thread waits only for its enqueue, the loop keeps one connection for
them, and calls from many threads at once share statements (the store's coalescing).

The loop and its thread are anyio's blocking portal (calls reach the loop with
``asyncio.run_coroutine_threadsafe``). It starts on the first call and stops when the
forge is closed, or at interpreter exit. A forked child never touches the parent's loop
or connections (the sockets are shared with the parent): it keeps them referenced,
unused, and starts its own bridge on its first call.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import threading
import weakref
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from anyio.from_thread import BlockingPortal, start_blocking_portal
from sqlalchemy.ext.asyncio import AsyncEngine

from ..db import BackgroundTaskDbStore

__all__ = ["SyncBridge", "awaited"]

logger = logging.getLogger("aster_forge.forge")

T = TypeVar("T")

#: How long closing at interpreter exit waits for the last writes and the thread.
_EXIT_TIMEOUT = 5.0


@dataclass(frozen=True, slots=True)
class _Running:
    loop: asyncio.AbstractEventLoop
    stop: AbstractContextManager[BlockingPortal]
    engine: AsyncEngine
    store: BackgroundTaskDbStore
    let_go: Callable[[], None]
    on_close: Callable[[], Awaitable[None]] | None
    calls: set[Future[Any]] = field(default_factory=set)


class SyncBridge:
    """One event loop in a daemon thread that runs a forge's enqueues for synchronous callers.

    Args:
        open_store: Builds the engine and the store the thread's loop uses; called on
            each start (nothing connects until the loop sends a statement).
        on_close: Awaited on the thread's loop when the bridge closes, before its
            connections (what the calls started there stops).
    """

    def __init__(
        self,
        open_store: Callable[[], tuple[AsyncEngine, BackgroundTaskDbStore]],
        *,
        on_close: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._open_store = open_store
        self._on_close = on_close
        self._lock = threading.Lock()
        self._running: _Running | None = None
        _BRIDGES.add(self)

    def run(
        self,
        call: Callable[[BackgroundTaskDbStore], Awaitable[T]],
        *,
        prepare: Callable[[AsyncEngine], Awaitable[None]] | None = None,
    ) -> T:
        """Run ``call(store)`` on the bridge's loop and wait for its result.

        If the calling thread is interrupted while it waits (``KeyboardInterrupt``), the
        call is cancelled as an awaiting caller's would be, and the interrupt re-raised.

        Args:
            call: The work, given the bridge's store.
            prepare: Awaited first on the same loop with the bridge's engine (creating
                missing tables before a first use).
        """
        with self._lock:
            # Scheduled under the lock: a close that follows finds the call on the loop
            # and lets it finish before the connections close.
            running = self._start()
            # Not portal.start_task_soon: it also waits for the loop to take each call, a
            # second hand-off between threads that costs more than the enqueue's client work.
            future = asyncio.run_coroutine_threadsafe(_call(call, prepare, running), running.loop)
            running.calls.add(future)
            future.add_done_callback(running.calls.discard)
        try:
            return future.result()
        except BaseException:
            future.cancel()
            raise

    def _start(self) -> _Running:
        if self._running is None:
            engine, store = self._open_store()
            # The loop runs nothing but enqueues: its connection stays checked out
            # between calls instead of going back to the pool whenever it idles.
            let_go = store.keep_connection()
            stop = start_blocking_portal(name="aster-forge-sync-enqueue")
            loop = stop.__enter__().call(asyncio.get_running_loop)
            self._running = _Running(loop, stop, engine, store, let_go, self._on_close)
            atexit.register(self.close)
        return self._running

    def _take(self) -> _Running | None:
        with self._lock:
            running, self._running = self._running, None
        return running

    async def aclose(self) -> None:
        """Send the last NOTIFY, close the connections and stop the thread (from a loop)."""
        running = self._take()
        if running is None:
            return
        atexit.unregister(self.close)  # nothing left to close at exit; the bridge may go
        closing = asyncio.run_coroutine_threadsafe(_close_store(running), running.loop)
        try:
            await asyncio.wrap_future(closing)
        finally:
            await asyncio.to_thread(running.stop.__exit__, None, None, None)

    def close(self, timeout: float = _EXIT_TIMEOUT) -> None:
        """:meth:`aclose` from synchronous code (interpreter exit), each wait bounded."""
        running = self._take()
        if running is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(_close_store(running), running.loop).result(timeout)
        except Exception as exc:  # the process is leaving: what is left goes with it
            logger.warning("closing the synchronous enqueue thread failed (%s)", type(exc).__name__)
        # The portal's exit joins its thread without a bound; a helper thread takes that wait.
        stopping = threading.Thread(
            target=running.stop.__exit__,
            args=(None, None, None),
            name="aster-forge-sync-enqueue-stop",
            daemon=True,
        )
        stopping.start()
        stopping.join(timeout)

    def _forget_after_fork(self) -> None:
        # The lock may have been held by a thread that does not exist in the child.
        self._lock = threading.Lock()
        if self._running is not None:
            _LEFT_TO_THE_PARENT.append(self._running)
            self._running = None


async def awaited(awaitable: Awaitable[T]) -> T:
    """``awaitable`` as a coroutine (what ``asyncio.run`` and ``run_coroutine_threadsafe`` take)."""
    return await awaitable


async def _call(
    call: Callable[[BackgroundTaskDbStore], Awaitable[T]],
    prepare: Callable[[AsyncEngine], Awaitable[None]] | None,
    running: _Running,
) -> T:
    if prepare is not None:
        await prepare(running.engine)
    return await call(running.store)


async def _close_store(running: _Running) -> None:
    # Calls scheduled before the close finish first (their callers are waiting).
    calls = [asyncio.wrap_future(call) for call in list(running.calls)]
    await asyncio.gather(*calls, return_exceptions=True)
    if running.on_close is not None:
        await running.on_close()
    running.let_go()
    await running.store.flush_notifications()
    await asyncio.sleep(0)  # the kept connection goes back to the pool in this turn
    await running.engine.dispose()


_BRIDGES: weakref.WeakSet[SyncBridge] = weakref.WeakSet()

#: Loops, engines and stores a forked child inherited: never used or closed there (their
#: sockets and epoll instance are the parent's), only kept from the garbage collector.
_LEFT_TO_THE_PARENT: list[_Running] = []


def _after_fork_in_child() -> None:
    for bridge in list(_BRIDGES):
        bridge._forget_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
