"""Termination signals: labels, in-process handlers, real subprocesses."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
from pathlib import Path

import pytest

from aster_forge.runtime import CancellationToken, wait_for_termination_signal
from aster_forge.runtime._signals import TerminationSignal, spawn_termination_signal_handler
from aster_forge.runtime.errors import RuntimeSignalError

posix_only = pytest.mark.skipif(os.name != "posix", reason="POSIX signals")
APP = Path(__file__).with_name("signal_app.py")


def test_signal_labels() -> None:
    assert TerminationSignal.SIGINT.value == "SIGINT"
    assert TerminationSignal.SIGTERM.value == "SIGTERM"
    assert TerminationSignal.CTRL_C.value == "Ctrl+C"
    assert TerminationSignal.SIGTERM.exit_code == 128 + signal.SIGTERM
    assert TerminationSignal.CTRL_C.signum == signal.SIGINT


@posix_only
@pytest.mark.parametrize(
    ("signum", "expected"),
    [(signal.SIGINT, TerminationSignal.SIGINT), (signal.SIGTERM, TerminationSignal.SIGTERM)],
)
async def test_wait_for_termination_signal_returns_it_and_restores_handlers(
    signum: signal.Signals, expected: TerminationSignal
) -> None:
    before = signal.getsignal(signum)
    waiter = asyncio.create_task(wait_for_termination_signal())
    await asyncio.sleep(0)  # let it install (ordering by the loop, not by time)
    assert signal.getsignal(signum) is not before
    signal.raise_signal(signum)
    assert await waiter is expected
    assert signal.getsignal(signum) is before


@posix_only
async def test_cancelled_wait_restores_handlers() -> None:
    before = signal.getsignal(signal.SIGTERM)
    waiter = asyncio.create_task(wait_for_termination_signal())
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert signal.getsignal(signal.SIGTERM) is before


async def test_installing_from_a_non_main_thread_is_a_clear_error() -> None:
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            asyncio.run(wait_for_termination_signal())
        except BaseException as exc:  # collected for the assertion below
            errors.append(exc)

    def start_and_join() -> None:
        thread = threading.Thread(target=worker, name="not-main")
        thread.start()
        thread.join()

    await asyncio.to_thread(start_and_join)
    assert len(errors) == 1
    assert isinstance(errors[0], RuntimeSignalError)
    assert "main thread" in str(errors[0])


@posix_only
async def test_handler_cancels_token_runs_stop_once_and_second_signal_forces_exit() -> None:
    token = CancellationToken()
    stopped = asyncio.Event()
    forced: list[TerminationSignal] = []
    forced_event = asyncio.Event()
    before = signal.getsignal(signal.SIGINT)

    async def stop() -> None:
        stopped.set()

    def force_exit(label: TerminationSignal) -> None:
        forced.append(label)
        forced_event.set()

    handler = spawn_termination_signal_handler(token, stop, force_exit=force_exit)
    signal.raise_signal(signal.SIGTERM)
    await stopped.wait()
    assert token.cancelled
    assert handler.first_signal is TerminationSignal.SIGTERM
    await handler.stop_listening()  # callback joined, handlers still armed
    signal.raise_signal(signal.SIGINT)
    await forced_event.wait()
    assert forced == [TerminationSignal.SIGINT]
    await handler.close()
    assert signal.getsignal(signal.SIGINT) is before


@posix_only
async def test_programmatic_cancel_also_runs_stop() -> None:
    token = CancellationToken()
    stopped = asyncio.Event()

    async def stop() -> None:
        stopped.set()

    handler = spawn_termination_signal_handler(token, stop)
    token.cancel()
    await stopped.wait()
    assert handler.signals_received == 0
    await handler.close()


@posix_only
async def test_stop_callback_error_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    token = CancellationToken()

    async def stop() -> None:
        raise RuntimeError("secret detail")

    handler = spawn_termination_signal_handler(token, stop)
    token.cancel()
    task = handler.stop_task
    assert task is not None
    await asyncio.wait({task})
    await handler.close()
    assert "termination stop callback raised RuntimeError" in caplog.text
    assert "secret detail" not in caplog.text


async def _start_app(mode: str) -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(APP),
        mode,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    assert (await proc.stdout.readline()).strip() == b"READY"
    return proc


async def _read_until(proc: asyncio.subprocess.Process, marker: bytes) -> list[bytes]:
    assert proc.stdout is not None
    lines: list[bytes] = []
    while True:
        line = await proc.stdout.readline()
        assert line, f"process ended before printing {marker!r}: {lines!r}"
        lines.append(line.strip())
        if line.strip() == marker:
            return lines


@posix_only
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
async def test_subprocess_exits_zero_with_a_logged_shutdown_report(signum: int) -> None:
    proc = await _start_app("normal")
    proc.send_signal(signum)
    stdout, stderr = await proc.communicate()
    assert proc.returncode == 0, stderr.decode()
    assert stdout.split() == [b"STOP", b"CLOSE", b"db-handle"]
    log = stderr.decode()
    assert f"received {signal.Signals(signum).name}; shutting down" in log
    assert "shutdown phase database_close succeeded" in log
    assert "shutdown report: 1 phases, 0 failed" in log


@posix_only
async def test_subprocess_second_sigint_forces_exit() -> None:
    proc = await _start_app("hang")
    proc.send_signal(signal.SIGINT)
    await _read_until(proc, b"SHUTTING")  # stuck in the database shutdown phase
    proc.send_signal(signal.SIGINT)
    _, stderr = await proc.communicate()
    assert proc.returncode == 128 + signal.SIGINT
    assert "received SIGINT again; forcing exit" in stderr.decode()


@posix_only
async def test_a_second_sigterm_forces_exit_while_a_body_blocks_the_loop() -> None:
    proc = await _start_app("block")
    await _read_until(proc, b"BLOCKING")  # the loop is stuck in time.sleep from here on
    # Signals of one kind sent back to back coalesce into one, so repeat until the process
    # is gone (each attempt waits on its exit); a handler that needs the loop never exits.
    for _ in range(40):
        proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(asyncio.shield(proc.wait()), timeout=0.5)
            break
        except TimeoutError:
            continue
    else:
        proc.kill()
    _, stderr = await asyncio.wait_for(proc.communicate(), timeout=10)
    assert proc.returncode == 128 + signal.SIGTERM
    assert "received SIGTERM again; forcing exit" in stderr.decode()
