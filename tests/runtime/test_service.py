"""ServiceLifecycle: stop on signal/token, after-stop, result and exception handling."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from aster_forge.runtime import CancellationToken, ServiceLifecycle


class ServiceCrashed(Exception):
    """The product service's own failure."""


class CleanupFailed(Exception):
    """The product after-stop's own failure."""


async def test_signal_cancels_token_runs_stop_then_after_stop_and_returns_result() -> None:
    if os.name != "posix":
        pytest.skip("POSIX signals")
    token = CancellationToken()
    events: list[str] = []
    serving = asyncio.Event()

    async def serve() -> str:
        serving.set()
        await token.wait()
        events.append("service saw cancel")
        return "served"

    async def stop() -> None:
        events.append("stop")

    async def after_stop() -> None:
        events.append("after_stop")

    before = signal.getsignal(signal.SIGTERM)
    run = asyncio.create_task(ServiceLifecycle(serve(), token).run(stop, after_stop))
    await serving.wait()
    signal.raise_signal(signal.SIGTERM)
    assert await run == "served"
    assert events[0] == "service saw cancel" or events[0] == "stop"
    assert set(events[:2]) == {"service saw cancel", "stop"}
    assert events[-1] == "after_stop"
    assert signal.getsignal(signal.SIGTERM) is before


async def test_service_ending_by_itself_cancels_token_and_skips_stop() -> None:
    token = CancellationToken()
    events: list[str] = []

    async def serve() -> int:
        return 7

    async def stop() -> None:
        events.append("stop")

    async def after_stop() -> None:
        events.append(f"after_stop token={token.cancelled}")

    lifecycle = ServiceLifecycle(serve(), token, install_signal_handler=False)
    assert await lifecycle.run(stop, after_stop) == 7
    assert events == ["after_stop token=True"]


async def test_service_exception_is_reraised_after_after_stop() -> None:
    token = CancellationToken()
    original = ServiceCrashed("boom")
    events: list[str] = []

    async def serve() -> int:
        raise original

    async def stop() -> None:
        events.append("stop")

    async def after_stop() -> None:
        events.append("after_stop")

    with pytest.raises(ServiceCrashed) as caught:
        await ServiceLifecycle(serve(), token, install_signal_handler=False).run(stop, after_stop)
    assert caught.value is original
    assert events == ["after_stop"]


async def test_when_both_fail_the_service_exception_wins() -> None:
    token = CancellationToken()

    async def serve() -> int:
        raise ServiceCrashed("service")

    async def stop() -> None:
        return None

    async def after_stop() -> None:
        raise CleanupFailed("cleanup")

    with pytest.raises(ServiceCrashed):
        await ServiceLifecycle(serve(), token, install_signal_handler=False).run(stop, after_stop)


async def test_after_stop_failure_alone_is_raised() -> None:
    token = CancellationToken()

    async def serve() -> int:
        return 1

    async def stop() -> None:
        return None

    async def after_stop() -> None:
        raise CleanupFailed("cleanup")

    with pytest.raises(CleanupFailed):
        await ServiceLifecycle(serve(), token, install_signal_handler=False).run(stop, after_stop)


async def test_programmatic_cancel_runs_stop_and_listener_is_joined() -> None:
    token = CancellationToken()
    stop_called = asyncio.Event()
    release = asyncio.Event()

    async def serve() -> str:
        await release.wait()
        return "done"

    async def stop() -> None:
        stop_called.set()
        release.set()

    async def after_stop() -> None:
        return None

    run = asyncio.create_task(
        ServiceLifecycle(serve(), token, install_signal_handler=False).run(stop, after_stop)
    )
    token.cancel()
    await stop_called.wait()
    assert await run == "done"


async def test_keyboard_interrupt_from_service_is_reraised_after_cleanup() -> None:
    token = CancellationToken()
    events: list[str] = []

    async def serve() -> int:
        raise KeyboardInterrupt

    async def stop() -> None:
        return None

    async def after_stop() -> None:
        events.append("after_stop")

    with pytest.raises(KeyboardInterrupt):
        await ServiceLifecycle(serve(), token, install_signal_handler=False).run(stop, after_stop)
    assert events == ["after_stop"]


async def test_cancelling_run_cancels_the_token() -> None:
    token = CancellationToken()
    serving = asyncio.Event()

    async def serve() -> int:
        serving.set()
        await asyncio.Event().wait()
        return 0

    async def noop() -> None:
        return None

    run = asyncio.create_task(
        ServiceLifecycle(serve(), token, install_signal_handler=False).run(noop, noop)
    )
    await serving.wait()
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert token.cancelled


async def test_run_twice_is_an_error_and_close_discards_unrun_service() -> None:
    token = CancellationToken()

    async def serve() -> int:
        return 0

    async def noop() -> None:
        return None

    lifecycle = ServiceLifecycle(serve(), token, install_signal_handler=False)
    await lifecycle.run(noop, noop)
    with pytest.raises(RuntimeError):
        await lifecycle.run(noop, noop)
    unused = ServiceLifecycle(serve(), token)
    unused.close()  # no "coroutine was never awaited" warning
