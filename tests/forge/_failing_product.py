"""A product whose one task always fails, run by ``aster-forge worker`` in the log tests."""

from __future__ import annotations

import logging
import os
from datetime import timedelta

from aster_forge import Forge, ForgeWorkerSettings, TaskRetryPolicy
from aster_forge.tasks import DispatchPollConfig

from ._product import URL_ENV

_POLL = timedelta(milliseconds=50)
_AT_ONCE = TaskRetryPolicy(base_delay=timedelta(0), max_delay=timedelta(0), jitter=0.0)


def build_forge(url: str) -> Forge:
    """The product's forge: lane ``mail`` (3 at once), task ``send_invoice`` (2 attempts)."""
    forge = Forge(
        url,
        name="billing",
        settings=ForgeWorkerSettings(
            poll=DispatchPollConfig(base_interval=_POLL, max_interval=_POLL)
        ),
    )
    forge.lane("mail", concurrency=3)

    @forge.task(lane="mail", max_attempts=2, retry=_AT_ONCE)
    async def send_invoice(payload: int) -> None:
        logging.getLogger("billing.invoices").warning("sending the invoice")
        raise ConnectionRefusedError("smtp.example.com:25 refused the connection")

    return forge


forge = build_forge(os.environ.get(URL_ENV, "memory://"))
