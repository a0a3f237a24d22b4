"""The demo's HTTP service: the ``aster_forge.web`` app served by uvicorn as the runtime service.

Needs the ``web`` extra (starlette, uvicorn, prometheus_client).
"""

from __future__ import annotations

import contextlib
import errno
import socket
from collections.abc import Callable, Generator, Hashable, Mapping

import uvicorn
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette

from aster_forge.metrics import (
    DispatchStatsSource,
    PrometheusDispatchStatsCollector,
    PrometheusHealthMetricsRecorder,
)
from aster_forge.runtime import (
    CancellationToken,
    HealthCheckScope,
    RuntimeComponentKind,
    RuntimeServiceComponent,
)
from aster_forge.web import AdminSources, create_app

from .errors import DemoPortInUseError

__all__ = ["HTTP_COMPONENT", "bind_listen_socket", "build_web_app", "http_service"]

HTTP_COMPONENT = "http"
"""The name of the demo's service component."""


def bind_listen_socket(host: str, port: int) -> socket.socket:
    """Bind and listen on ``host:port`` now, so a busy port fails before anything starts.

    Raises:
        DemoPortInUseError: The address is taken or cannot be bound.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise DemoPortInUseError(f"{host}:{port} is already in use") from exc
        raise DemoPortInUseError(f"cannot listen on {host}:{port}: {exc.strerror}") from exc
    sock.set_inheritable(False)
    return sock


def build_web_app(
    sources: AdminSources,
    *,
    admin_token: str | None,
    stats: DispatchStatsSource | None = None,
    lane_limits: Mapping[Hashable, int] | None = None,
) -> Starlette:
    """The composed app: health endpoints, ``/metrics``, admin API and dashboard."""
    registry = CollectorRegistry()
    recorder = PrometheusHealthMetricsRecorder(registry)
    if stats is not None:
        PrometheusDispatchStatsCollector(stats, registry, lane_limits=lane_limits)
    return create_app(
        sources,
        metrics_registry=registry,
        health_recorder=recorder,
        scrape_health_scope=HealthCheckScope.READINESS,
        admin_token=admin_token,
    )


class _EmbeddedServer(uvicorn.Server):
    """uvicorn without its own signal handlers: ``AsterRuntime`` owns SIGINT/SIGTERM."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def http_service(
    app_factory: Callable[[], Starlette], sock: socket.socket
) -> Callable[[CancellationToken], RuntimeServiceComponent[int]]:
    """Return ``build(token)`` for ``runtime_component_with_shutdown``: uvicorn on ``sock``.

    The app is built when the service starts (after the runtime exists, so the admin
    API can show its components and reports). A stop request sets uvicorn's
    ``should_exit``; the service returns ``0`` once uvicorn has closed its connections.
    """

    def build(token: CancellationToken) -> RuntimeServiceComponent[int]:
        holder: list[_EmbeddedServer] = []

        async def serve() -> int:
            config = uvicorn.Config(
                app_factory(),
                log_level="warning",
                access_log=False,
                lifespan="off",
                timeout_graceful_shutdown=5,
            )
            server = _EmbeddedServer(config)
            holder.append(server)
            if token.cancelled:
                sock.close()
                return 0
            try:
                await server.serve(sockets=[sock])
            finally:
                sock.close()
            return 0

        async def stop() -> None:
            for server in holder:
                server.should_exit = True

        return RuntimeServiceComponent(
            HTTP_COMPONENT, RuntimeComponentKind.HTTP, serve(), token, stop
        )

    return build
