"""``enqueue_sync`` on every backend: one loop thread and pool for all synchronous callers."""

from __future__ import annotations

import asyncio
import multiprocessing
import sys
import threading
import warnings
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.pool import Pool

from aster_forge import EnqueueResult, Forge, ForgePayloadError, ForgeTask

_BRIDGE_THREAD = "aster-forge-sync-enqueue"


@pytest.fixture
async def forge(forge_url: str) -> AsyncIterator[Forge]:
    """A forge with one task, ``mail(int)``, its tables created; closed afterwards."""
    made = Forge(forge_url, create_tables=True)

    @made.task(name="mail")
    async def mail(payload: int) -> None:
        del payload

    await made.backend.create_tables()
    yield made
    await made.aclose()


@pytest.fixture
def mail(forge: Forge) -> ForgeTask:
    """The forge's ``mail`` task."""
    return forge.tasks[0]


@contextmanager
def _counting_connects() -> Iterator[list[object]]:
    """Every new database connection any pool opens meanwhile."""
    opened: list[object] = []

    def on_connect(dbapi_connection: object, _record: object) -> None:
        opened.append(dbapi_connection)

    event.listen(Pool, "connect", on_connect)
    try:
        yield opened
    finally:
        event.remove(Pool, "connect", on_connect)


def _bridge_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == _BRIDGE_THREAD]


async def _in_thread(call: Callable[[], Any]) -> Any:
    """``call()`` in a new thread with no event loop, as Django or Flask code runs."""
    return await asyncio.to_thread(call)


async def _stored_payloads(forge: Forge) -> list[str]:
    page = await forge.backend.task_store.list_tasks(limit=500)
    return sorted(record.payload_json for record in page.items)


async def test_sequential_sync_enqueues_reuse_one_connection(forge: Forge, mail: ForgeTask) -> None:
    with _counting_connects() as opened:
        results = await _in_thread(lambda: [mail.enqueue_sync(n) for n in range(20)])
    assert all(result.created for result in results)
    assert len(opened) == 1  # a new connection per call before the bridge
    assert await _stored_payloads(forge) == sorted(str(n) for n in range(20))


async def test_sync_enqueues_from_many_threads_each_land_once(
    forge: Forge, mail: ForgeTask
) -> None:
    def caller(first: int) -> list[EnqueueResult]:
        return [mail.enqueue_sync(n) for n in range(first, first + 25)]

    batches = await asyncio.gather(
        *(asyncio.to_thread(caller, first) for first in range(0, 200, 25))
    )
    ids = [result.record.id for batch in batches for result in batch]
    assert len(set(ids)) == 200
    assert await _stored_payloads(forge) == sorted(str(n) for n in range(200))


async def test_a_bad_payload_fails_in_the_calling_thread_and_writes_nothing(
    forge: Forge, mail: ForgeTask
) -> None:
    with pytest.raises(ForgePayloadError):
        await _in_thread(lambda: mail.enqueue_sync("not a number"))
    assert _bridge_threads() == []  # refused before any store call
    assert await _stored_payloads(forge) == []


async def test_enqueue_many_sync_writes_all_or_nothing(forge: Forge, mail: ForgeTask) -> None:
    results = await _in_thread(lambda: mail.enqueue_many_sync(range(5)))
    assert [result.created for result in results] == [True] * 5
    with pytest.raises(ForgePayloadError):
        await _in_thread(lambda: mail.enqueue_many_sync([5, "not a number", 6]))
    assert await _stored_payloads(forge) == sorted(str(n) for n in range(5))


async def test_aclose_stops_the_thread_and_a_later_call_starts_it_again(
    forge: Forge, mail: ForgeTask
) -> None:
    await _in_thread(lambda: mail.enqueue_sync(1))
    assert len(_bridge_threads()) == 1
    await forge.aclose()
    assert _bridge_threads() == []
    await _in_thread(lambda: mail.enqueue_sync(2))
    assert len(_bridge_threads()) == 1
    assert await _stored_payloads(forge) == ["1", "2"]
    await forge.aclose()
    assert _bridge_threads() == []


def _child_enqueues(forge: Forge, task: ForgeTask) -> None:
    task.enqueue_sync(2)


async def test_a_forked_child_enqueues_on_its_own_thread_and_connections(
    forge: Forge, mail: ForgeTask
) -> None:
    # The child inherits the parent's bridge with no thread behind it, and sockets the
    # parent still uses: it must start its own, never wait on (or write to) the parent's.
    await _in_thread(lambda: mail.enqueue_sync(1))
    context = multiprocessing.get_context("fork")
    with warnings.catch_warnings():
        # Python 3.12+ warns that forking a process with threads may deadlock.
        warnings.simplefilter("ignore", DeprecationWarning)
        child = context.Process(target=_child_enqueues, args=(forge, mail))
        child.start()
    await asyncio.to_thread(child.join, 30)
    if child.is_alive():
        child.kill()
    assert child.exitcode == 0
    await _in_thread(lambda: mail.enqueue_sync(3))  # the parent's bridge still works
    assert await _stored_payloads(forge) == ["1", "2", "3"]


_SCRIPT = """
import sys
from aster_forge import Forge

forge = Forge(sys.argv[1])

@forge.task(name="mail")
async def mail(payload: int) -> None:
    del payload

print(mail.enqueue_sync(7).created)
"""


async def test_a_script_that_never_closes_the_forge_exits_cleanly(
    forge: Forge, forge_url: str
) -> None:
    # The thread is closed at interpreter exit: no traceback, no unclosed-connection noise.
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-W",
        "error",
        "-c",
        _SCRIPT,
        forge_url,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 30)
    assert (process.returncode, out.decode().strip(), err.decode()) == (0, "True", "")
    assert await _stored_payloads(forge) == ["7"]


_STUBBORN_SCRIPT = """
import asyncio, sys, threading, time
from sqlalchemy.ext.asyncio import create_async_engine
from aster_forge.db import BackgroundTaskDbStore
from aster_forge.forge._sync_bridge import SyncBridge

def open_store():
    engine = create_async_engine(sys.argv[1])
    return engine, BackgroundTaskDbStore(engine)

async def stubborn(store):
    started.set()
    while True:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            pass  # a call that will not stop: the close must not wait for it forever

started = threading.Event()
bridge = SyncBridge(open_store)
threading.Thread(target=bridge.run, args=(stubborn,), daemon=True).start()
started.wait()
began = time.monotonic()
bridge.close(timeout=0.5)
print(round(time.monotonic() - began, 1))
"""


async def test_closing_at_exit_is_bounded_when_a_call_ignores_its_cancellation(
    tmp_path: Path,
) -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _STUBBORN_SCRIPT,
        f"sqlite+aiosqlite:///{tmp_path / 'tasks.db'}",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), 30)
    finally:
        if process.returncode is None:  # hung: end it rather than leave it behind
            process.kill()
            await process.wait()
    assert process.returncode == 0, err.decode()
    # Half a second for the last writes, half a second for the thread.
    assert float(out.decode()) < 2.0
    assert "closing the synchronous enqueue thread failed (TimeoutError)" in err.decode()


async def test_closing_while_threads_enqueue_hangs_no_call_and_loses_none(
    forge: Forge, mail: ForgeTask
) -> None:
    # Calls on the loop when the close comes finish first; later ones start a new thread.
    def caller(first: int) -> list[EnqueueResult]:
        return [mail.enqueue_sync(n) for n in range(first, first + 50)]

    callers = [asyncio.to_thread(caller, first) for first in range(0, 200, 50)]
    closes = 0
    gathered = asyncio.gather(*callers)
    while not gathered.done():
        await forge.aclose()
        closes += 1
        await asyncio.sleep(0)
    ids = [result.record.id for batch in await gathered for result in batch]
    assert len(set(ids)) == 200 and closes >= 1
    assert await _stored_payloads(forge) == sorted(str(n) for n in range(200))
