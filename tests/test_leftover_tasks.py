"""A test's leftover tasks are cancelled and awaited before its loop closes (conftest).

pytest-asyncio closes each test's loop with its pending tasks left as they are; a task
with a statement on the wire would then be collected in a later test, its connection
unclosed. The two tests run in file order: the second checks what the first left.
"""

from __future__ import annotations

import asyncio

_LEFT: list[asyncio.Task[None]] = []
_ENDED: list[str] = []


async def test_a_test_leaves_a_task_running() -> None:
    async def left_running() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await asyncio.sleep(0)  # its own cleanup awaits, as a shielded release does
            _ENDED.append("cleaned up")
            raise

    _LEFT.append(asyncio.create_task(left_running(), name="left running"))
    await asyncio.sleep(0)


def test_the_task_was_cancelled_and_awaited_before_its_loop_closed() -> None:
    [task] = _LEFT
    assert task.cancelled()
    assert _ENDED == ["cleaned up"]
