"""The one race primitive: an awaitable, or a deadline on the injected clock, or a token.

Every "wait for X, unless the deadline passes or we are told to stop" in the library goes
through :func:`race`, so helper tasks are always named, cancelled and joined, and the
deadline is always measured on the clock the caller was given. Tasks that ignored their
cancellation and had to be left running are kept in one registry, :func:`abandoned_tasks`.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Awaitable, Coroutine
from typing import Any, Protocol, TypeVar

from ._clock import Clock, SystemClock

__all__ = [
    "RaceWinner",
    "abandon_task",
    "abandoned_tasks",
    "race",
    "shielded",
    "sleep_or_cancelled",
]

logger = logging.getLogger("aster_forge.runtime")

_T = TypeVar("_T")


class _TokenLike(Protocol):
    @property
    def cancelled(self) -> bool: ...

    async def wait(self) -> None: ...


class RaceWinner(enum.StrEnum):
    """Which side of a :func:`race` finished first."""

    DONE = "done"
    """The awaitable finished (result or exception)."""

    TOKEN = "token"
    """The token was cancelled first."""

    DEADLINE = "deadline"
    """The deadline passed first."""


# Kept: deadlines run on the injected Clock (ManualClock in tests), which asyncio.timeout
# cannot read (tests/runtime/test_race.py).
async def race(
    awaitable: Awaitable[Any] | None = None,
    *,
    seconds: float | None = None,
    clock: Clock | None = None,
    token: _TokenLike | None = None,
    cancel_loser: bool = False,
    name: str = "aster-forge:race",
) -> RaceWinner:
    """Wait for ``awaitable``, or ``seconds`` on ``clock``, or ``token``; whichever is first.

    A future or task passed in is left running when it loses (its owner decides what a
    lost race means for it and reads its result) unless ``cancel_loser`` is set. Any
    other awaitable runs in a task owned by the race. An owned or ``cancel_loser`` task
    that loses (or whose caller is cancelled) is cancelled and joined. Helper
    tasks never outlive the call. When several sides are ready at once the awaitable wins,
    then the token.

    Args:
        awaitable: What to wait for; ``None`` waits only for the deadline or the token.
        seconds: The deadline, in ``clock`` seconds from now; ``None`` means no deadline.
        clock: The clock that measures ``seconds`` (default :class:`SystemClock`).
        token: A cancellation token (anything with ``cancelled`` and ``await wait()``).
        cancel_loser: Cancel and join a future or task passed in when it does not win.
        name: The prefix of the helper tasks' names.

    Returns:
        The winner.

    Raises:
        ValueError: When there is nothing to wait for.
        Exception: Whatever the clock's ``sleep`` raised (a broken clock is a real error).
    """
    if awaitable is None and seconds is None and token is None:
        raise ValueError("race() needs an awaitable, a deadline or a token")
    future: asyncio.Future[Any] | None = None
    owned = cancel_loser
    if isinstance(awaitable, asyncio.Future):
        future = awaitable
    elif awaitable is not None:
        future = asyncio.create_task(_awaited(awaitable), name=name)
        owned = True
    if future is not None and future.done():
        return RaceWinner.DONE
    helpers: dict[asyncio.Future[Any], RaceWinner] = {}
    winner: RaceWinner | None = None
    try:
        if token is not None and token.cancelled:
            winner = RaceWinner.TOKEN
            return winner
        if seconds is not None:
            sleeper = asyncio.create_task(
                (clock or SystemClock()).sleep(seconds), name=f"{name}-deadline"
            )
            helpers[sleeper] = RaceWinner.DEADLINE
        if token is not None:
            helpers[asyncio.create_task(token.wait(), name=f"{name}-token")] = RaceWinner.TOKEN
        waiting = {*helpers, *((future,) if future is not None else ())}
        try:
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for helper in helpers:
                helper.cancel()
            # Join every helper so none outlives the call, even when we are cancelled.
            await asyncio.gather(*helpers, return_exceptions=True)
        winner = _winner(future, helpers)
        return winner
    finally:
        # Lost, cancelled, or the clock raised: what the race owns does not outlive it.
        if winner is not RaceWinner.DONE and owned and future is not None:
            future.cancel()
            await asyncio.gather(future, return_exceptions=True)


async def _awaited(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


def _winner(
    future: asyncio.Future[Any] | None, helpers: dict[asyncio.Future[Any], RaceWinner]
) -> RaceWinner:
    if future is not None and future.done():
        return RaceWinner.DONE
    for helper, side in sorted(helpers.items(), key=lambda item: item[1] is RaceWinner.DEADLINE):
        if helper.done() and not helper.cancelled():
            error = helper.exception()
            if error is not None:
                raise error
            return side
    return RaceWinner.DEADLINE  # pragma: no cover - asyncio.wait returned with nothing done


async def sleep_or_cancelled(clock: Clock, token: _TokenLike, seconds: float) -> bool:
    """Sleep ``seconds`` on ``clock`` unless ``token`` is cancelled first.

    Args:
        clock: The clock whose time the sleep is measured in.
        token: A cancellation token (anything with ``cancelled`` and ``await wait()``).
        seconds: The sleep duration; zero or negative yields once.

    Returns:
        ``True`` when the token was cancelled before or during the sleep, else ``False``.
    """
    await race(seconds=seconds, clock=clock, token=token, name="aster-forge:clock-sleep")
    return token.cancelled


# Kept: asyncio.shield lets the caller leave before the write ends, and anyio's shielded
# CancelScope does not hold off a native task.cancel().
async def shielded(
    awaitable: Coroutine[Any, Any, _T] | asyncio.Future[_T], *, name: str = "aster-forge:shielded"
) -> _T:
    """Finish ``awaitable`` even when the caller is cancelled (a write that must land).

    A coroutine runs in a task named ``name``. When the caller is cancelled the awaitable
    is still awaited to its end, its outcome is retrieved (never left unobserved), and
    the cancellation then propagates.

    Returns:
        The awaitable's result.
    """
    future = (
        awaitable
        if isinstance(awaitable, asyncio.Future)
        else asyncio.create_task(awaitable, name=name)
    )
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        if not future.done():
            await asyncio.wait({future})
        if not future.cancelled():
            future.exception()
        raise


# Tasks that ignored cancellation past their grace. Kept referenced here (never garbage
# collected mid-flight); their outcome is retrieved when they end, so nothing is dropped.
_ABANDONED: set[asyncio.Task[Any]] = set()


def abandon_task(task: asyncio.Task[Any]) -> None:
    """Leave ``task`` running after it ignored its cancellation, keeping it referenced.

    Its eventual outcome is retrieved (an error is logged, never raised) and it is
    forgotten once it ends.
    """
    _ABANDONED.add(task)
    task.add_done_callback(_forget_abandoned)


def abandoned_tasks() -> frozenset[asyncio.Task[Any]]:
    """Return the abandoned tasks that are still running (for diagnostics and tests).

    Inside a running event loop only that loop's tasks are returned; tasks whose loop was
    closed can never end and are forgotten.

    Returns:
        Every task passed to :func:`abandon_task` that has not ended yet.
    """
    try:
        loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    for task in [task for task in _ABANDONED if task.get_loop().is_closed()]:
        _ABANDONED.discard(task)
    return frozenset(
        task for task in _ABANDONED if not task.done() and (loop is None or task.get_loop() is loop)
    )


def _forget_abandoned(task: asyncio.Task[Any]) -> None:
    _ABANDONED.discard(task)
    if not task.cancelled() and task.exception() is not None:
        logger.warning(
            "abandoned task %s ended with an error",
            task.get_name(),
            extra={"abandoned_task": task.get_name()},
        )
