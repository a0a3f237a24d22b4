"""CancellationToken callbacks: run once on cancel, also through a parent, and removable."""

from __future__ import annotations

import logging

import pytest

from aster_forge.runtime import CancellationToken


def test_callback_runs_once_when_a_parent_cancels() -> None:
    parent = CancellationToken()
    child = parent.child_token()
    calls: list[str] = []
    child.add_cancel_callback(lambda: calls.append("child"))
    parent.add_cancel_callback(lambda: calls.append("parent"))
    parent.cancel()
    parent.cancel()
    assert calls == ["parent", "child"]


def test_callback_added_after_cancel_runs_at_once_and_removed_one_never_runs() -> None:
    token = CancellationToken()
    calls: list[int] = []

    def first() -> None:
        calls.append(1)

    token.add_cancel_callback(first)
    token.remove_cancel_callback(first)
    token.remove_cancel_callback(first)  # a second removal is a no-op
    token.cancel()
    assert calls == []
    token.add_cancel_callback(lambda: calls.append(2))
    assert calls == [2]


def test_a_failing_callback_is_logged_and_the_others_still_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    token = CancellationToken()
    calls: list[int] = []

    def broken() -> None:
        raise RuntimeError("boom")

    token.add_cancel_callback(broken)
    token.add_cancel_callback(lambda: calls.append(1))
    with caplog.at_level(logging.ERROR, logger="aster_forge.runtime"):
        token.cancel()
    assert calls == [1]
    assert token.cancelled
    assert [r.getMessage() for r in caplog.records] == ["a cancellation callback failed"]
