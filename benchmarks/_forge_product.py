"""The product the Forge wake-up benchmark's worker process runs.

``aster-forge worker benchmarks._forge_product:forge``: one task that returns the wall
time its body started. The idle poll is 10 s, so a start within milliseconds can only
come from the PostgreSQL NOTIFY listener the worker starts by default.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta

from aster_forge import Forge, ForgeWorkerSettings
from aster_forge.tasks import DispatchPollConfig

URL_ENV = "FORGE_BENCH_URL"
"""The database URL of the worker process."""

_POLL = timedelta(seconds=10)


def build_forge(url: str) -> Forge:
    """The benchmark's forge: one task, ``started(n) -> wall time``."""
    forge = Forge(
        url,
        name="forge-bench",
        settings=ForgeWorkerSettings(
            poll=DispatchPollConfig(base_interval=_POLL, max_interval=_POLL)
        ),
    )

    @forge.task(name="started")
    async def started(payload: int) -> float:
        return time.time()

    return forge


forge = build_forge(os.environ.get(URL_ENV, "memory://"))
