"""The enqueue NOTIFY limiter: one NOTIFY per lane per window, none left unsent.

Driven by a manual clock and a recording ``send``: no sleeps, no database.
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from aster_forge.db._notify_limiter import NotifyLimiter
from aster_forge.testing import ManualClock

WINDOW = 0.005


class Sender:
    """Records each trailing NOTIFY; optionally holds it until released."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.started = asyncio.Event()
        self.release: asyncio.Event | None = None
        self.error: Exception | None = None

    async def __call__(self, lane: str) -> None:
        self.started.set()
        if self.release is not None:
            await self.release.wait()
        if self.error is not None:
            raise self.error
        self.sent.append(lane)


def _limiter(sender: Sender, clock: ManualClock, window: float = WINDOW) -> NotifyLimiter:
    return NotifyLimiter(window, sender, clock)


async def test_the_first_enqueue_of_a_window_notifies_and_the_rest_insert_quietly() -> None:
    clock, sender = ManualClock(), Sender()
    limiter = _limiter(sender, clock)
    assert limiter.take("a") is True
    assert [limiter.take("a") for _ in range(3)] == [False, False, False]
    assert limiter.take("b") is True  # lanes are independent
    await clock.advance(WINDOW)
    assert limiter.take("a") is True  # a new window
    assert sender.sent == []  # nothing was inserted quietly


async def test_quiet_inserts_get_one_notify_after_the_window_not_before() -> None:
    clock, sender = ManualClock(), Sender()
    limiter = _limiter(sender, clock)
    assert limiter.take("a")
    for _ in range(3):
        assert not limiter.take("a")
        limiter.inserted_quietly("a")
    await clock.wait_for_sleepers()
    await clock.advance(WINDOW / 2)
    assert sender.sent == []
    await clock.advance(WINDOW / 2)
    await limiter.join()
    assert sender.sent == ["a"]  # one NOTIFY for the three quiet inserts
    # The trailing NOTIFY opened a window of its own.
    assert not limiter.take("a")


async def test_a_quiet_commit_while_the_trailing_notify_is_on_the_wire_arms_another() -> None:
    clock, sender = ManualClock(), Sender()
    sender.release = asyncio.Event()
    limiter = _limiter(sender, clock)
    assert limiter.take("a")
    assert not limiter.take("a")
    limiter.inserted_quietly("a")
    await clock.wait_for_sleepers()
    await clock.advance(WINDOW)
    await sender.started.wait()
    # This commit may land after the NOTIFY in flight was read: it needs its own.
    assert not limiter.take("a")
    limiter.inserted_quietly("a")
    sender.release.set()
    await clock.wait_for_sleepers()
    await clock.advance(WINDOW)
    await limiter.join()
    assert sender.sent == ["a", "a"]


async def test_join_waits_for_a_notify_being_sent() -> None:
    clock, sender = ManualClock(), Sender()
    sender.release = asyncio.Event()
    limiter = _limiter(sender, clock)
    limiter.take("a")
    limiter.inserted_quietly("a")
    await clock.wait_for_sleepers()
    await clock.advance(WINDOW)
    await sender.started.wait()
    joined = asyncio.create_task(limiter.join(), name="join")
    await asyncio.sleep(0)
    assert not joined.done()
    sender.release.set()
    await joined
    assert sender.sent == ["a"]


async def test_a_failed_trailing_notify_is_logged_and_the_next_window_still_works(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock, sender = ManualClock(), Sender()
    sender.error = ConnectionError("down")
    limiter = _limiter(sender, clock)
    limiter.take("a")
    limiter.inserted_quietly("a")
    await clock.wait_for_sleepers()
    with caplog.at_level(logging.WARNING, logger="aster_forge.db.notify"):
        await clock.advance(WINDOW)
        await limiter.join()
    assert "trailing enqueue NOTIFY failed (ConnectionError)" in caplog.text
    sender.error = None
    await clock.advance(WINDOW)
    assert limiter.take("a")
    assert not limiter.take("a")
    limiter.inserted_quietly("a")
    await clock.wait_for_sleepers()
    await clock.advance(WINDOW)
    await limiter.join()
    assert sender.sent == ["a"]
