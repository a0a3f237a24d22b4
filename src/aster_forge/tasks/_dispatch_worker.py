"""The long-running dispatch worker: drain, wait for a wake-up or the poll, release on stop."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

from ..runtime import CancellationToken, Clock
from ._dispatch import (
    DispatchBackoff,
    DispatchPollConfig,
    DispatchWakeSignal,
    TaskDispatcher,
    drain_dispatcher,
)
from .protocols import DispatchTaskStore

__all__ = ["run_dispatch_worker"]

logger = logging.getLogger("aster_forge.tasks.dispatch")


async def run_dispatch_worker(
    store: DispatchTaskStore[Any, Any],
    dispatcher: TaskDispatcher[Any],
    shutdown_token: CancellationToken,
    *,
    wake: DispatchWakeSignal | None = None,
    poll: DispatchPollConfig | None = None,
    clock: Clock | None = None,
) -> None:
    """Run the dispatch loop until ``shutdown_token`` is cancelled.

    Each turn drains the dispatcher (claim round-robin until nothing is due or every
    lane is full), then waits for the first of: a wake-up (``wake.wake()``, for example
    from an enqueue or a PostgreSQL NOTIFY listener; a freed slot of a full lane), the
    poll interval, or shutdown. The interval is the base interval after work, grows on
    empty polls up to ``poll.max_interval`` and on store errors up to
    ``poll.error_max_interval``, and resets as soon as work is claimed. Wake-ups are only
    hints: polling always continues.

    On shutdown (or if this coroutine is cancelled) no more tasks are claimed, every
    in-flight context is cancelled, each task is released to pending without counting
    an attempt (fenced, shielded), and every execution is awaited before returning.

    Args:
        store: Claims, heartbeats and fenced writes.
        dispatcher: Lanes, limits, execution config and stats.
        shutdown_token: Cancel to stop the worker.
        wake: An extra wake signal (the dispatcher's own :attr:`TaskDispatcher.wake_signal`
            is always watched).
        poll: Poll timing (default :class:`DispatchPollConfig`).
        clock: The clock for poll waits (default: the execution config's clock).
    """
    clock = clock or dispatcher.execution.clock
    backoff = DispatchBackoff(poll or DispatchPollConfig())
    signals = [dispatcher.wake_signal]
    if wake is not None and wake is not dispatcher.wake_signal:
        signals.append(wake)
    try:
        while not shutdown_token.cancelled:
            try:
                result = await drain_dispatcher(store, dispatcher)
            except Exception as exc:
                delay = backoff.record_error()
                logger.warning(
                    "task dispatch claim failed (%s); retrying in %.2fs",
                    type(exc).__name__,
                    delay.total_seconds(),
                    exc_info=exc,
                    extra={"dispatch_owner": dispatcher.owner},
                )
            else:
                if result.total:
                    delay = backoff.record_work()
                elif result.saturated:
                    delay = backoff.record_busy()
                else:
                    delay = backoff.record_empty()
            if shutdown_token.is_cancelled():
                break
            await _wait(signals, shutdown_token, clock, delay.total_seconds())
    finally:
        await dispatcher.shutdown()


async def _wait(
    signals: list[DispatchWakeSignal],
    shutdown_token: CancellationToken,
    clock: Clock,
    seconds: float,
) -> None:
    if shutdown_token.cancelled or any(signal.pending for signal in signals):
        for signal in signals:
            # Consume pending wake-ups: the next drain serves them.
            if signal.pending:
                await signal.wait()
        return
    coroutines: list[tuple[str, Coroutine[Any, Any, None]]] = [
        ("aster-forge:dispatch-poll", clock.sleep(seconds)),
        ("aster-forge:dispatch-stop", shutdown_token.wait()),
    ]
    coroutines.extend(("aster-forge:dispatch-wake", signal.wait()) for signal in signals)
    waiters = [asyncio.create_task(coro, name=name) for name, coro in coroutines]
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)
