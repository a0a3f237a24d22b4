"""One pooled connection kept checked out across a burst of back-to-back driver calls.

Checking a connection out of the SQLAlchemy pool and back in costs two greenlet
switches and the pool's bookkeeping per call, about as much client time as the
statement itself on a loopback server. A store that enqueues in a loop (a request
handler, a producer) keeps the connection it used for the next call and returns it
to the pool as soon as the event loop runs while no call is using it: a burst reuses
one connection, and an idle store holds none (nothing to close, nothing leaked).

A store may also linger: keep the connection for a while after its last call (a
web service's enqueues, one per request, with the loop busy in between), but only
while the pool could lend another connection at once. That is checked when the
linger starts and whenever it would be extended, so a product checkout that finds
the pool empty meanwhile waits at most one linger. The connection goes back once the
store has been idle that long (or at once, on
:meth:`~HeldDriverConnection.release_idle`, which the store calls when its engine is
disposed).

A busy worker sends a statement every millisecond or so with the loop running task
bodies in between; it asks to :meth:`~HeldDriverConnection.keep` the connection while
it has tasks in flight, and it goes back once the worker lets go. A kept connection the
server closed, or one left unused for five minutes (a NAT or a firewall may have dropped
it without a word), is discarded before the next call instead of failing it.

The connection goes back in a loop callback, synchronously, so it cannot do I/O:
nothing was begun on it (the pool's reset is a no-op) and it goes back only into a
queue pool with room for it. Otherwise it is terminated: when the pool is full (the
pool would close it anyway) or the engine was disposed meanwhile (the old pool must
not get it back: nothing would close it). Other pools, and pools with
``checkin``/``reset`` listeners (which may do I/O), get the per-call checkout.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from sqlalchemy.pool import Pool, PoolProxiedConnection, QueuePool

from ._engine import stale_reason
from ._pg_driver import reusable_after
from ._tasks_sql import TaskSql

__all__ = ["HeldDriverConnection", "hand_over"]


# Kept for speed, measured against a checkout per call: an asyncpg pool would also pay a
# reset round trip per release and split PostgreSQL off the engine the other stores share.
class HeldDriverConnection:
    """Lends a pooled connection for one driver-level call, reusing it within a burst.

    Args:
        sql: The store's :class:`TaskSql` (its engine's pool lends the connection).
        monotonic: The time source of the idle limits (seconds).
        linger: How long (seconds) an idle connection stays held after its last call
            while the pool has another to lend; 0 returns it once the loop ran.
    """

    def __init__(
        self,
        sql: TaskSql,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        linger: float = 0.0,
    ) -> None:
        self._sql = sql
        self._monotonic = monotonic
        self._linger = linger
        self._freed_at = 0.0
        self._held: PoolProxiedConnection | None = None
        self._pool: Pool | None = None
        self._busy = False
        self._release_scheduled = False
        self._kept = 0
        self._freed: asyncio.Event | None = None
        # The held connection's loop (asyncpg connections are bound to theirs): the idle
        # release is scheduled on it without asking asyncio for the running loop per call.
        self._loop: asyncio.AbstractEventLoop | None = None

    def keep(self) -> None:
        """Keep the held connection across idle loop turns until :meth:`let_go`."""
        self._kept += 1

    def let_go(self) -> None:
        """Undo one :meth:`keep`; the connection goes back once the loop is idle."""
        self._kept = max(self._kept - 1, 0)
        if not self._kept:
            self._schedule_release()

    def take(self) -> PoolProxiedConnection | None:
        """The held connection when it is free, marked busy (no await); else ``None``.

        The next call of a burst takes it here; ``None`` means :meth:`acquire`. End the
        call with :meth:`free` (or :meth:`release` with ``held=True``).
        """
        held = self._live_held()
        if held is None or self._busy or self._sql.pool is not self._pool:
            return None
        self._busy = True
        return held

    async def acquire(
        self, operation: str, *, queue: bool = False
    ) -> tuple[PoolProxiedConnection, bool]:
        """A connection for one call, and whether it is the held one (see :meth:`release`).

        Args:
            operation: What the connection is for (named in errors).
            queue: While the connection is kept and busy, wait for it rather than take
                another one from the pool (a worker's second success write goes out
                on its connection the moment the first returns).

        Raises:
            DatabaseOperationError: (or a subclass) when no connection can be had.
        """
        held = self._live_held()
        if held is not None and self._sql.pool is self._pool:
            if self._busy and self._kept and (queue or self._pool_is_out()):
                # Asked to queue, or every pooled connection is out and this one stays
                # ours: wait for it, not for the pool (it would not come back before
                # the keep ends).
                await self._wait_free(held)
            if self._held is held and not self._busy:
                self._busy = True
                return held, True
        connection = await self._sql.checkout(operation)
        pool = self._sql.pool
        if (
            self._held is None
            and isinstance(pool, QueuePool)
            and not (pool.dispatch.checkin or pool.dispatch.reset)
        ):
            self._held, self._pool, self._busy = connection, pool, True
            self._loop = asyncio.get_running_loop()
            return connection, True
        return connection, False

    def _live_held(self) -> PoolProxiedConnection | None:
        """The held connection, unless the server closed it or it sat unused too long.

        A kept connection is not checked out again, so the pool's checks (see
        :func:`~aster_forge.db.create_database_engine`) never see it: a socket asyncpg
        saw close, or ``MAX_IDLE`` seconds without a call, and the next call takes another.
        """
        held = self._held
        if held is None or self._busy:
            return held
        if stale_reason(held.driver_connection, self._monotonic() - self._freed_at) is None:
            return held
        self._held = None
        # Outside a greenlet, invalidating terminates the connection (no I/O to await).
        held.invalidate()
        return None

    def _pool_is_out(self) -> bool:
        pool = self._pool
        return isinstance(pool, QueuePool) and pool.checkedin() == 0

    async def _wait_free(self, held: PoolProxiedConnection) -> None:
        while self._busy and self._held is held:
            if self._freed is None:
                self._freed = asyncio.Event()  # made on the waiting loop, one per release
            await self._freed.wait()

    async def release(self, connection: PoolProxiedConnection, held: bool, *, broken: bool) -> None:
        """End the call: a broken connection is discarded, a held one kept for the burst.

        When another call waits for the held connection, it runs first: its statement
        goes out before this call's rows are processed (see :func:`hand_over`).
        """
        if not held:
            await self._sql.checkin(connection, invalidate=broken)
        elif broken:
            self._mark_free()
            self._held = None
            await self._sql.checkin(connection, invalidate=True)
        elif self.free():
            await hand_over()

    async def release_after(
        self, connection: PoolProxiedConnection, held: bool, exc: BaseException
    ) -> None:
        """End a call that raised ``exc``: the connection is reused only if the server answered.

        Any other failure (a cancellation, a timeout, a client-side error, a lost
        connection) leaves the session unknown: the connection is discarded. The
        release is shielded, so a second cancellation cannot leave it checked out.
        When ``exc`` is not an error (``GeneratorExit``: the coroutine is being closed,
        as when its event loop was closed under it) nothing may be awaited: the
        connection is terminated on the spot and forgotten.
        """
        if not isinstance(exc, Exception | asyncio.CancelledError):
            if held:
                self._mark_free()
                self._held = None
            # Outside a greenlet, invalidating terminates the connection without I/O to
            # await (SQLAlchemy logs a failure to terminate it: its loop may be closed).
            connection.invalidate()
            return
        broken = not reusable_after(exc)
        await asyncio.shield(self.release(connection, held, broken=broken))

    def free(self) -> bool:
        """End a call on the held connection that left it usable (the sync :meth:`release`).

        Returns:
            Whether another call waits for the connection: the caller then awaits
            :func:`hand_over` before processing its rows, so that call goes first.
        """
        waited = self._mark_free()
        if not self._kept:
            self._schedule_release()
        return waited

    def _mark_free(self) -> bool:
        self._busy = False
        self._freed_at = self._monotonic()
        freed = self._freed
        if freed is None:
            return False
        # Callers waiting for it re-check; the first to run takes it.
        freed.set()
        self._freed = None
        return True

    def _schedule_release(self) -> None:
        if not self._release_scheduled and self._held is not None and self._loop is not None:
            self._release_scheduled = True
            if self._linger > 0 and self._pool_can_lend():
                self._loop.call_later(self._linger, self._release_lingering)
            else:
                self._loop.call_soon(self._release_idle)

    def _pool_can_lend(self) -> bool:
        """Whether the pool could hand out another connection now, without waiting."""
        pool = self._pool
        if not isinstance(pool, QueuePool):
            return False
        if pool.checkedin() > 0:
            return True
        # No public accessor: QueuePool's own limit on connections beyond its size.
        limit: int = getattr(pool, "_max_overflow", 0)
        return limit < 0 or pool.overflow() < limit

    def _release_lingering(self) -> None:
        self._release_scheduled = False
        if self._held is None or self._busy or self._kept or self._loop is None:
            return  # gone, in use (that call schedules the release again), or kept
        idle = self._monotonic() - self._freed_at
        if idle < self._linger and self._pool_can_lend():
            self._release_scheduled = True  # used since: one timer per linger, not per call
            self._loop.call_later(self._linger - idle, self._release_lingering)
            return
        self._release_idle()

    def release_idle(self) -> None:
        """Return the held connection now if no call is using it (on a dispose)."""
        if not self._kept:
            self._release_idle()

    def _release_idle(self) -> None:
        self._release_scheduled = False
        connection = self._held
        if connection is None or self._busy or self._kept:
            return  # in use (that call schedules the release again), or kept
        self._held = None
        pool = self._pool
        if (
            pool is self._sql.pool
            and isinstance(pool, QueuePool)
            and pool.checkedin() < pool.size()
        ):
            connection.close()  # into the pool's queue: no I/O
        else:
            # Outside a greenlet, invalidating terminates the connection (no I/O to await).
            connection.invalidate()


async def hand_over() -> None:
    """One loop turn, in which the call that waited for the connection sends its statement.

    Without it the waiting call ran only after this call's caller had processed its rows
    (a worker: decoded the claimed tasks, started them and recorded the successes): at
    concurrency 50 a quarter of each cycle, with the database idle. The statement of this
    call has returned, so a cancellation arriving in this turn must not lose its rows: it
    is delivered at the caller's next ``await`` instead.
    """
    try:
        await asyncio.sleep(0)
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is None:
            raise
        # Still cancelled, one request as before; raised at the next suspension.
        task.uncancel()
        task.cancel()
