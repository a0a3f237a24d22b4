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
    assert limiter.take("a") is not None
    assert [limiter.take("a") for _ in range(3)] == [None, None, None]
    assert limiter.take("b") is not None  # lanes are independent
    await clock.advance(WINDOW)
    assert limiter.take("a") is not None  # a new window
    assert sender.sent == []  # nothing was inserted quietly


async def _quiet(limiter: NotifyLimiter, lane: str = "a") -> None:
    """One quiet insert of ``lane``, committed."""
    assert limiter.take(lane) is None
    limiter.inserted_quietly(lane)


async def test_quiet_inserts_nobody_announces_get_one_notify_a_window_later() -> None:
    clock, sender = ManualClock(), Sender()
    limiter = _limiter(sender, clock)
    assert limiter.take("a") is not None
    for _ in range(3):
        await _quiet(limiter)
    await clock.wait_for_sleepers()
    await clock.advance(WINDOW)
    assert sender.sent == []  # waiting one more window for an enqueue to carry it
    await clock.wait_for_sleepers()
    await clock.advance(WINDOW)
    await limiter.join()
    assert sender.sent == ["a"]  # one NOTIFY for the three quiet inserts
    # The trailing NOTIFY opened a window of its own.
    assert limiter.take("a") is None


async def test_an_enqueue_issued_after_the_quiet_commits_announces_them() -> None:
    clock, sender = ManualClock(), Sender()
    limiter = _limiter(sender, clock)
    first = limiter.take("a")
    assert first is not None
    limiter.carried("a", first)
    await _quiet(limiter)
    await _quiet(limiter)
    await clock.wait_for_sleepers()
    await clock.advance(WINDOW)
    ticket = limiter.take("a")  # the stream goes on past the window
    assert ticket is not None
    limiter.carried("a", ticket)
    await limiter.join()
    assert sender.sent == []  # no statement of its own


async def test_an_enqueue_issued_before_a_quiet_commit_does_not_announce_it() -> None:
    clock, sender = ManualClock(), Sender()
    limiter = _limiter(sender, clock)
    assert limiter.take("a") is not None
    await _quiet(limiter)
    await clock.wait_for_sleepers()
    await clock.advance(WINDOW)
    ticket = limiter.take("a")
    assert ticket is not None
    limiter.inserted_quietly("a")  # a concurrent quiet insert commits after it was sent
    limiter.carried("a", ticket)
    await clock.wait_for_sleepers()
    await clock.advance(WINDOW)
    await limiter.join()
    assert sender.sent == ["a"]


async def test_a_quiet_commit_right_after_a_notify_announced_the_others_is_announced() -> None:
    clock, sender = ManualClock(), Sender()
    limiter = _limiter(sender, clock)
    assert limiter.take("a") is not None
    await _quiet(limiter)  # arms the trailing NOTIFY
    await clock.wait_for_sleepers()
    await clock.advance(WINDOW)
    ticket = limiter.take("a")
    assert ticket is not None
    limiter.carried("a", ticket)  # announces that commit: the trailing wait is called off
    # In the same loop turn, before the called-off wait has run: this commit needs a
    # NOTIFY of its own, within two windows.
    await _quiet(limiter)
    for _ in range(2):
        await clock.advance(WINDOW)
    await limiter.join()
    assert sender.sent == ["a"]


async def test_a_quiet_commit_while_the_trailing_notify_is_on_the_wire_arms_another() -> None:
    clock, sender = ManualClock(), Sender()
    sender.release = asyncio.Event()
    limiter = _limiter(sender, clock)
    assert limiter.take("a") is not None
    await _quiet(limiter)
    await _past_both_windows(clock)
    await sender.started.wait()
    # This commit may land after the NOTIFY in flight was read: it needs its own.
    await _quiet(limiter)
    sender.release.set()
    await _past_both_windows(clock)
    await limiter.join()
    assert sender.sent == ["a", "a"]


async def test_join_waits_for_a_notify_being_sent() -> None:
    clock, sender = ManualClock(), Sender()
    sender.release = asyncio.Event()
    limiter = _limiter(sender, clock)
    limiter.take("a")
    await _quiet(limiter)
    await _past_both_windows(clock)
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
    await _quiet(limiter)
    with caplog.at_level(logging.WARNING, logger="aster_forge.db.notify"):
        await _past_both_windows(clock)
        await limiter.join()
    assert "trailing enqueue NOTIFY failed (ConnectionError)" in caplog.text
    sender.error = None
    await clock.advance(2 * WINDOW)
    assert limiter.take("a") is not None
    await _quiet(limiter)
    await _past_both_windows(clock)
    await limiter.join()
    assert sender.sent == ["a"]


async def _past_both_windows(clock: ManualClock) -> None:
    """Past the window and the one more window a trailing NOTIFY waits for a carrier."""
    for _ in range(2):
        await clock.wait_for_sleepers()
        await clock.advance(WINDOW)
