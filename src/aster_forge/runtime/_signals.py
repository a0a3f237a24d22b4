"""Termination signals: wait for SIGINT/SIGTERM (Ctrl+C elsewhere) and stop on them."""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import os
import signal
import sys
import threading
from collections.abc import Awaitable, Callable
from types import FrameType
from typing import Any

from ._cancellation import CancellationToken
from .errors import RuntimeSignalError

__all__ = [
    "TerminationSignal",
    "TerminationSignalHandler",
    "spawn_termination_signal_handler",
    "wait_for_termination_signal",
]

logger = logging.getLogger("aster_forge.runtime")

_Handler = Callable[[int, FrameType | None], Any] | int | None


class TerminationSignal(enum.StrEnum):
    """A termination signal that was received."""

    SIGINT = "SIGINT"
    SIGTERM = "SIGTERM"
    CTRL_C = "Ctrl+C"

    @property
    def signum(self) -> int:
        """The signal number (``CTRL_C`` maps to SIGINT)."""
        return int(signal.SIGTERM) if self is TerminationSignal.SIGTERM else int(signal.SIGINT)

    @property
    def exit_code(self) -> int:
        """The conventional exit status of a process killed by this signal (128 + signum)."""
        return 128 + self.signum


def _default_force_exit(received: TerminationSignal) -> None:
    # A second signal during shutdown means "stop now": skip remaining cleanup.
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(received.exit_code)


class _SignalInstallation:
    """Installs SIGINT/SIGTERM handlers on the running loop and restores the previous ones."""

    def __init__(
        self,
        callback: Callable[[TerminationSignal], None],
        *,
        on_repeat: Callable[[TerminationSignal], None] | None = None,
    ) -> None:
        self._callback = callback
        self._on_repeat = on_repeat
        self._loop: asyncio.AbstractEventLoop | None = None
        self._previous: dict[int, _Handler] = {}
        self._received = 0

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeSignalError(
                "termination signal handlers can only be installed from the main thread"
            )
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError as exc:
            raise RuntimeSignalError("termination signal handlers need a running loop") from exc
        self._loop = loop
        if os.name == "posix":
            labels = {
                int(signal.SIGINT): TerminationSignal.SIGINT,
                int(signal.SIGTERM): TerminationSignal.SIGTERM,
            }

            # A Python-level handler (not loop.add_signal_handler) runs in the main thread
            # between bytecodes even while a task body blocks the loop, so a repeated
            # signal still forces exit; the first one is handed to the loop as usual.
            def handler(signum: int, _frame: FrameType | None) -> None:
                self._received += 1
                label = labels[signum]
                if self._received > 1 and self._on_repeat is not None:
                    self._on_repeat(label)
                    return
                loop.call_soon_threadsafe(self._callback, label)

            try:
                for signum in labels:
                    self._previous[signum] = signal.getsignal(signum)
                    signal.signal(signum, handler)
            except (OSError, RuntimeError, ValueError) as exc:
                self.restore()
                raise RuntimeSignalError(
                    f"cannot install termination signal handlers: {exc}"
                ) from exc
            return
        self._install_fallback(loop)  # pragma: no cover - non-POSIX platforms

    def _install_fallback(self, loop: asyncio.AbstractEventLoop) -> None:  # pragma: no cover
        def handler(_signum: int, _frame: FrameType | None) -> None:
            loop.call_soon_threadsafe(self._callback, TerminationSignal.CTRL_C)

        self._previous[signal.SIGINT] = signal.getsignal(signal.SIGINT)
        signal.signal(signal.SIGINT, handler)

    def restore(self) -> None:
        self._loop = None
        for signum, previous in self._previous.items():
            signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
        self._previous.clear()


async def wait_for_termination_signal() -> TerminationSignal:
    """Wait for SIGINT or SIGTERM (POSIX) or Ctrl+C (elsewhere) and return which arrived.

    The previous handlers are restored before this returns (or when it is cancelled).

    Returns:
        The signal received.

    Raises:
        RuntimeSignalError: Not called from the main thread, or installation failed.
    """
    loop = asyncio.get_running_loop()
    received: asyncio.Future[TerminationSignal] = loop.create_future()

    def on_signal(label: TerminationSignal) -> None:
        if not received.done():
            received.set_result(label)

    installation = _SignalInstallation(on_signal)
    installation.install()
    try:
        label = await received
    finally:
        installation.restore()
    logger.info("received termination signal %s", label.value, extra={"signal": label.value})
    return label


class TerminationSignalHandler:
    """A running signal listener (see :func:`spawn_termination_signal_handler`).

    The first signal cancels the token; when the token is cancelled (by a signal or
    programmatically) the stop callback runs once. A second signal forces the
    process to exit with ``128 + signum``. :meth:`stop_listening` cancels and joins the
    stop callback but keeps the handlers (so a further signal still forces exit);
    :meth:`close` also restores the previous handlers.
    """

    def __init__(
        self,
        token: CancellationToken,
        stop: Callable[[], Awaitable[Any]],
        *,
        force_exit: Callable[[TerminationSignal], None] = _default_force_exit,
    ) -> None:
        self._token = token
        self._stop = stop
        self._force_exit = force_exit
        self._installation = _SignalInstallation(self._on_signal, on_repeat=self._on_repeat)
        self._stopper: asyncio.Task[None] | None = None
        self.signals_received = 0
        self.first_signal: TerminationSignal | None = None

    def install(self) -> None:
        """Install the SIGINT/SIGTERM handlers (main thread, running loop)."""
        self._installation.install()

    def start(self) -> None:
        """Start the task that runs the stop callback once the token is cancelled."""
        self._stopper = asyncio.create_task(
            self._stop_when_cancelled(), name="aster-forge:termination-stop"
        )

    def _on_signal(self, label: TerminationSignal) -> None:
        self.signals_received += 1
        if self.signals_received == 1:
            self.first_signal = label
            logger.warning(
                "received %s; shutting down (send it again to force exit)",
                label.value,
                extra={"signal": label.value},
            )
            self._token.cancel()
            return
        self._on_repeat(label, counted=True)

    def _on_repeat(self, label: TerminationSignal, *, counted: bool = False) -> None:
        # Called from the signal handler itself for a repeated signal (the loop may be
        # blocked by a task body), or from the loop callback when the count says so.
        if not counted:
            self.signals_received += 1
        logger.error(
            "received %s again; forcing exit",
            label.value,
            extra={"signal": label.value},
        )
        self._force_exit(label)

    async def _stop_when_cancelled(self) -> None:
        await self._token.wait()
        try:
            await self._stop()
        except Exception as exc:
            logger.error(
                "termination stop callback raised %s", type(exc).__name__, extra={"signal": None}
            )

    @property
    def stop_task(self) -> asyncio.Task[None] | None:
        """The task that runs the stop callback, or ``None`` before it started."""
        return self._stopper

    async def stop_listening(self) -> None:
        """Cancel and join the stop callback; the signal handlers stay installed."""
        stopper, self._stopper = self._stopper, None
        if stopper is not None:
            stopper.cancel()
            await asyncio.gather(stopper, return_exceptions=True)

    async def close(self) -> None:
        """Cancel and join the stop callback and restore the previous signal handlers."""
        try:
            await self.stop_listening()
        finally:
            self._installation.restore()


def spawn_termination_signal_handler(
    token: CancellationToken,
    stop: Callable[[], Awaitable[Any]],
    *,
    force_exit: Callable[[TerminationSignal], None] = _default_force_exit,
) -> TerminationSignalHandler:
    """Install SIGINT/SIGTERM handlers that cancel ``token`` and then run ``stop()``.

    Call from the main thread with a running loop. Close the returned handler when the
    service has ended (``await handler.close()``) to join the callback and restore the
    previous handlers. A second signal forces exit.

    Args:
        token: Cancelled on the first signal.
        stop: Stops the product's service (for example a server's graceful stop).
        force_exit: What a second signal does (default: ``os._exit(128 + signum)``).

    Returns:
        The running handler.

    Raises:
        RuntimeSignalError: Not on the main thread, no running loop, or install failed.
    """
    handler = TerminationSignalHandler(token, stop, force_exit=force_exit)
    handler.install()
    handler.start()
    return handler
