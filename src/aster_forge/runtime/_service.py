"""ServiceLifecycle: signal -> cancel -> stop -> await service -> after-stop."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

from ._cancellation import CancellationToken
from ._isolation import OutcomeKind, run_isolated
from ._signals import TerminationSignal, TerminationSignalHandler, _default_force_exit

__all__ = ["ServiceLifecycle"]

T = TypeVar("T")

logger = logging.getLogger("aster_forge.runtime")


class ServiceLifecycle(Generic[T]):
    """The entrypoint flow shared by services that are not (yet) built with AsterRuntime.

    :meth:`run` installs the termination signal handler; a signal (or cancelling
    ``token``) cancels the token and runs ``stop``; the service is awaited; the signal
    listener is cancelled and joined; ``after_stop`` runs; then the service's result is
    returned. If the service raised, its original exception is re-raised after
    ``after_stop`` ran (and kept when ``after_stop`` raises too).

    Example:
        >>> async def serve(token: CancellationToken) -> int:
        ...     await token.wait()
        ...     return 0
        >>> token = CancellationToken()
        >>> lifecycle = ServiceLifecycle(serve(token), token)
        >>> # exit_code = await lifecycle.run(stop_server, close_database)
        >>> lifecycle.close()
    """

    def __init__(
        self,
        service: Awaitable[T],
        token: CancellationToken,
        *,
        install_signal_handler: bool = True,
        force_exit: Callable[[TerminationSignal], None] = _default_force_exit,
    ) -> None:
        self._service = service
        self._token = token
        self._install = install_signal_handler
        self._force_exit = force_exit
        self._used = False

    def close(self) -> None:
        """Discard an un-run service awaitable (closes a coroutine so it never warns)."""
        if not self._used:
            self._used = True
            close = getattr(self._service, "close", None)
            if callable(close):
                close()

    async def run(
        self,
        stop: Callable[[], Awaitable[Any]],
        after_stop: Callable[[], Awaitable[Any]],
    ) -> T:
        """Run the service to completion, then the after-stop callback.

        Args:
            stop: Stops the service after a termination signal (or token cancellation).
            after_stop: Product cleanup run after the service ended.

        Returns:
            The service's own result.

        Raises:
            BaseException: The service's original exception (after ``after_stop`` ran), or
                ``after_stop``'s exception when only it failed.
            RuntimeError: ``run`` was called twice.
        """
        if self._used:
            raise RuntimeError("ServiceLifecycle.run() can only be called once")
        self._used = True
        service = self._service
        listener = TerminationSignalHandler(self._token, stop, force_exit=self._force_exit)
        listener_started = False

        async def await_service() -> T:
            return await service

        try:
            if self._install:
                listener.install()
            listener.start()
            listener_started = True
            outcome = await run_isolated("service", await_service)
        except asyncio.CancelledError:
            self._token.cancel()
            raise
        finally:
            # The listener only stops the service: cancel and join it before cleanup.
            if listener_started:
                await listener.stop_listening()
        # The service ended on its own or after stop: cancel its token before cleanup.
        self._token.cancel()
        try:
            after = await run_isolated("after_stop", after_stop)
        finally:
            if listener_started:
                await listener.close()
        if outcome.kind is OutcomeKind.OK:
            if after.kind is OutcomeKind.OK:
                return outcome.value  # type: ignore[return-value]  # OK carries the value
            raise _error_of(after)
        if after.kind is not OutcomeKind.OK:
            logger.error(
                "after-stop callback failed too; re-raising the service's exception",
                extra={"after_stop": after.kind.value},
            )
        raise _error_of(outcome)


def _error_of(outcome: Any) -> BaseException:
    error = outcome.error
    if isinstance(error, BaseException):
        return error
    # Timed out / cancelled outcomes cannot happen without a timeout or token; keep typed.
    return asyncio.CancelledError()  # pragma: no cover
