"""A tiny product on the Forge, run by ``aster-forge worker tests.forge._product:forge``."""

from __future__ import annotations

import os
from datetime import timedelta

from aster_forge import Forge
from aster_forge.forge import ForgeWorkerSettings
from aster_forge.tasks import DispatchPollConfig

URL_ENV = "FORGE_PRODUCT_URL"
"""The database URL the worker process reads (not ``ASTER_FORGE_*``: the CLI env drops those)."""


POLL_ENV = "FORGE_PRODUCT_POLL_SECONDS"
"""The idle poll interval of the worker (the benchmark sets 10 s: only NOTIFY is fast)."""


def build_forge(url: str, *, poll_seconds: float = 0.2) -> Forge:
    """The product's forge: one lane, one task."""
    poll = timedelta(seconds=poll_seconds)
    forge = Forge(
        url,
        name="product",
        settings=ForgeWorkerSettings(
            poll=DispatchPollConfig(base_interval=poll, max_interval=poll)
        ),
    )
    forge.lane("mail", concurrency=2)

    @forge.task(lane="mail", name="shout")
    async def shout(payload: str) -> str:
        return payload.upper()

    return forge


forge = build_forge(
    os.environ.get(URL_ENV, "memory://"), poll_seconds=float(os.environ.get(POLL_ENV, "0.2"))
)
