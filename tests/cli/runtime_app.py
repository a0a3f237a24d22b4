"""Factories for ``aster-forge run`` tests."""

from __future__ import annotations

import sys
from datetime import timedelta

from aster_forge.runtime import (
    AsterRuntime,
    CancellationToken,
    RuntimeComponentKind,
    RuntimeComponentRegistry,
    RuntimeComponentWithShutdown,
    RuntimeServiceComponent,
    runtime_component,
)


def _resource() -> object:
    def register(registry: RuntimeComponentRegistry) -> None:
        async def close() -> None:
            return None

        registry.component_shutdown(
            "resource",
            RuntimeComponentKind.OTHER,
            "resource_close",
            None,
            close,
            timeout=timedelta(seconds=5),
        )

    return runtime_component(register)


def _service(until_stopped: bool) -> object:
    def build(token: CancellationToken) -> RuntimeServiceComponent[int]:
        async def serve() -> int:
            sys.stdout.write("service started\n")
            sys.stdout.flush()
            if until_stopped:
                await token.wait()
            return 0

        return RuntimeServiceComponent("service", RuntimeComponentKind.HTTP, serve(), token)

    return RuntimeComponentWithShutdown(build)


def short_lived() -> AsterRuntime:
    """A runtime whose service returns at once."""
    return AsterRuntime(components=[_resource(), _service(False)])


def until_signal() -> AsterRuntime:
    """A runtime whose service runs until SIGINT/SIGTERM."""
    return AsterRuntime(components=[_resource(), _service(True)])


async def built_async() -> AsterRuntime:
    """An async factory."""
    return short_lived()


def not_a_runtime() -> int:
    """Returns the wrong type."""
    return 42


NOT_CALLABLE = 7
