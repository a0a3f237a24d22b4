"""The HTTP service of ``aster-forge worker --http``: uvicorn serving the forge's web app."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable, Generator
from typing import Any

import uvicorn

from ..runtime import CancellationToken, RuntimeComponentKind, RuntimeServiceComponent
from ._worker import HTTP_COMPONENT

__all__ = ["http_service"]


class _EmbeddedServer(uvicorn.Server):
    """uvicorn without its own signal handlers: ``AsterRuntime`` owns SIGINT/SIGTERM."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def http_service(
    app: Any, address: tuple[str, int] | socket.socket
) -> Callable[[CancellationToken], RuntimeServiceComponent[int]]:
    """``build(token)`` for ``RuntimeComponentWithShutdown``: uvicorn on ``address``
    (``(host, port)``, or a bound listening socket, closed when the service ends).

    A stop request sets uvicorn's ``should_exit``; the service returns ``0`` once
    uvicorn closed its connections.
    """

    if isinstance(address, socket.socket):
        sock: socket.socket | None = address
        host, port = "127.0.0.1", 0  # unused: uvicorn serves the given socket
    else:
        sock, (host, port) = None, address

    def build(token: CancellationToken) -> RuntimeServiceComponent[int]:
        server = _EmbeddedServer(
            uvicorn.Config(
                app,
                host=host,
                port=port,
                log_level="warning",
                # Through the process's logging (the worker's format), not uvicorn's own.
                log_config=None,
                access_log=False,
                lifespan="off",
                timeout_graceful_shutdown=5,
            )
        )

        async def serve() -> int:
            try:
                if not token.cancelled:
                    await server.serve(sockets=None if sock is None else [sock])
            finally:
                if sock is not None:
                    sock.close()
            return 0

        async def stop() -> None:
            server.should_exit = True

        return RuntimeServiceComponent(
            HTTP_COMPONENT, RuntimeComponentKind.HTTP, serve(), token, stop
        )

    return build
