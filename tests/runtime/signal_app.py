"""A tiny AsterRuntime product used by the signal tests (run as a subprocess).

Usage: ``python signal_app.py normal|hang|block``. Prints ``READY`` once the service runs;
``hang`` makes the database shutdown phase block so a second signal must force exit;
``block`` makes the service block the event loop itself (a body that never yields), so
neither signal can reach the loop and a second one must force exit from the handler.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time

from aster_forge.runtime import (
    AsterRuntime,
    CancellationToken,
    RuntimeComponentKind,
    RuntimeComponentWithShutdown,
    RuntimeServiceComponent,
    shutdown_resource_component_after,
)


def emit(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def serve(token: CancellationToken) -> int:
    emit("READY")
    await token.wait()
    return 0


async def serve_blocking(token: CancellationToken) -> int:
    emit("READY")
    emit("BLOCKING")
    time.sleep(120)  # noqa: ASYNC251 - the point: a body that blocks the loop
    await token.wait()
    return 0


def http_component(token: CancellationToken) -> RuntimeServiceComponent[int]:
    async def stop() -> None:
        emit("STOP")

    service = serve_blocking(token) if sys.argv[1] == "block" else serve(token)
    return RuntimeServiceComponent("http", RuntimeComponentKind.HTTP, service, token, stop)


async def main(mode: str) -> int:
    async def close_database(handle: str) -> None:
        emit(f"CLOSE {handle}")
        if mode == "hang":
            emit("SHUTTING")
            await asyncio.Event().wait()

    database = shutdown_resource_component_after(
        "database",
        RuntimeComponentKind.DATABASE,
        "database_close",
        ["http"],
        "db-handle",
        close_database,
    )
    runtime = AsterRuntime(components=[RuntimeComponentWithShutdown(http_component), database])
    result: int = await runtime.run()
    return result


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(message)s")
    sys.exit(asyncio.run(main(sys.argv[1])))
