"""A cooperative cancellation token shared by runtime components."""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Callable

__all__ = ["CancellationToken"]

logger = logging.getLogger("aster_forge.runtime")


# Kept: asyncio.Event has no child signals and no callbacks; executions hang off the
# worker's token and stop cooperatively (tests/runtime/test_cancellation_*.py).
class CancellationToken:
    """A one-shot, hierarchical cancellation signal.

    The token binds to no event loop at construction; waiters are created lazily on
    the loop that awaits :meth:`wait`. Cancelling a parent cancels every child token;
    cancelling a child leaves the parent untouched.

    Example:
        >>> token = CancellationToken()
        >>> child = token.child_token()
        >>> token.cancel()
        >>> child.cancelled
        True
    """

    __slots__ = ("__weakref__", "_callbacks", "_cancelled", "_children", "_waiters")

    def __init__(self) -> None:
        self._cancelled = False
        # Each created when first needed: most tokens (one per task execution) never
        # get a waiter or a child, and an empty container is one more object for the
        # garbage collector to track while the task runs.
        self._waiters: list[asyncio.Future[None]] | None = None
        self._callbacks: list[Callable[[], None]] | None = None
        self._children: weakref.WeakSet[CancellationToken] | None = None

    @property
    def cancelled(self) -> bool:
        """Whether :meth:`cancel` was called on this token or an ancestor."""
        return self._cancelled

    def cancel(self) -> None:
        """Cancel this token and every descendant; idempotent."""
        if self._cancelled:
            return
        self._cancelled = True
        waiters, self._waiters = self._waiters or (), None
        for waiter in waiters:
            if not waiter.done():
                # The waiter may belong to a loop that is closed; set_result is still safe
                # on a pending future.
                waiter.set_result(None)
        callbacks, self._callbacks = self._callbacks or [], None
        for callback in callbacks:
            try:
                callback()
            except Exception:
                logger.exception("a cancellation callback failed")
        for child in list(self._children or ()):
            child.cancel()

    def add_cancel_callback(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` when this token is cancelled (at once if it already is).

        The callback runs synchronously inside :meth:`cancel` (on the canceller's
        thread, normally the event loop's); an exception it raises is logged.
        """
        if self._cancelled:
            callback()
            return
        if self._callbacks is None:
            self._callbacks = []
        self._callbacks.append(callback)

    def remove_cancel_callback(self, callback: Callable[[], None]) -> None:
        """Forget ``callback`` (no-op when it was never added or already ran)."""
        if self._callbacks is not None and callback in self._callbacks:
            self._callbacks.remove(callback)

    def child_token(self) -> CancellationToken:
        """Return a new token that is cancelled whenever this one is.

        Returns:
            A child token; cancelling it does not cancel this token.
        """
        child = CancellationToken()
        if self._cancelled:
            child.cancel()
        else:
            if self._children is None:
                self._children = weakref.WeakSet()
            self._children.add(child)
        return child

    async def wait(self) -> None:
        """Wait until the token is cancelled (returns at once if it already is)."""
        if self._cancelled:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self._waiters is None:
            self._waiters = []
        self._waiters.append(waiter)
        try:
            await waiter
        finally:
            if self._waiters is not None and waiter in self._waiters:
                self._waiters.remove(waiter)

    async def sleep(self, seconds: float) -> bool:
        """Sleep for ``seconds`` unless the token is cancelled first.

        Args:
            seconds: How long to sleep on the running loop's clock.

        Returns:
            ``True`` when the token was cancelled (the sleep ended early), else ``False``.
        """
        if self._cancelled:
            return True
        try:
            async with asyncio.timeout(max(seconds, 0.0)):
                await self.wait()
        except TimeoutError:
            return self._cancelled
        return True

    def __repr__(self) -> str:
        return f"<CancellationToken cancelled={self._cancelled}>"
