"""CancellationToken.wait and sleep: they end when the token (or its parent) is cancelled."""

from __future__ import annotations

import asyncio

from aster_forge.runtime import CancellationToken


async def test_sleep_on_a_cancelled_token_returns_true_at_once() -> None:
    token = CancellationToken()
    token.cancel()
    assert await token.sleep(3600) is True
    await token.wait()  # returns at once too


async def test_sleep_that_runs_out_returns_false() -> None:
    token = CancellationToken()
    assert await token.sleep(0) is False
    assert await token.sleep(-1) is False  # a negative duration is no sleep
    assert not token.cancelled


async def test_sleep_ends_early_when_a_parent_cancels_and_leaves_no_waiter() -> None:
    parent = CancellationToken()
    child = parent.child_token()
    sleeping = asyncio.create_task(child.sleep(3600), name="sleeper")
    await asyncio.sleep(0)  # the sleeper is waiting on the token now
    assert not sleeping.done()
    parent.cancel()
    # Bounded only so a broken wake-up fails instead of hanging the suite.
    done, _ = await asyncio.wait({sleeping}, timeout=10)
    assert done == {sleeping} and sleeping.result() is True


async def test_a_cancelled_waiter_is_forgotten_by_the_token() -> None:
    token = CancellationToken()
    waiting = asyncio.create_task(token.wait(), name="waiter")
    await asyncio.sleep(0)
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    assert waiting.cancelled()
    assert not token._waiters  # a long-lived token does not pile up dead futures
    token.cancel()
