"""Running a forge inside another program: ``forge.lifespan`` and ``forge.running()``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from ..runtime import AsterRuntime
from ._worker import ForgeWorker

if TYPE_CHECKING:
    from ._app import Forge

__all__ = ["run_forge"]


@asynccontextmanager
async def run_forge(forge: Forge) -> AsyncIterator[AsterRuntime]:
    """Start the forge's runtime (workers, scheduler, listener), yield it, stop it on exit.

    Returns from ``__aenter__`` once startup finished and the workers run. The host
    program owns the signals (uvicorn does for a FastAPI app), so none are installed.

    Raises:
        AsterRuntimeStartupError: Startup failed (tables, resources, ...), after cleanup.
    """
    worker = ForgeWorker(forge)
    runtime = forge._build_runtime(worker, install_signal_handlers=False)
    running = asyncio.create_task(runtime.run(), name="aster-forge:forge-runtime")
    started = asyncio.create_task(worker.started.wait(), name="aster-forge:forge-started")
    try:
        await asyncio.wait({running, started}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        running.cancel()
        started.cancel()
        await asyncio.gather(running, started, return_exceptions=True)
        raise
    if not started.done():
        started.cancel()
        await asyncio.gather(started, return_exceptions=True)
        await running  # startup failed: raises the runtime's error
        raise RuntimeError("the forge runtime ended during startup")
    try:
        yield runtime
    finally:
        runtime.request_stop()
        await running
