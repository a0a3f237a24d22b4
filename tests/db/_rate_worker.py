"""A Forge worker in another process (``python -m tests.db._rate_worker URL COUNT``).

Serves the lane ``metered`` (4 slots in this process; at most ``COUNT`` task starts
per ``PERIOD`` across every instance, or no rate limit when ``COUNT`` is 0) whose task
``call`` sleeps 20 ms. Leases last one second, so a killed instance's tasks come back
within about that. Prints ``ready`` once its worker runs, then runs until killed.
"""

from __future__ import annotations

import asyncio
import sys
from datetime import timedelta

from aster_forge import Forge, ForgeWorkerSettings
from aster_forge.tasks import DispatchPollConfig

LANE = "metered"
KIND = "call"
LEASE = timedelta(seconds=1)
PERIOD = timedelta(milliseconds=500)


def build(url: str, count: int) -> Forge:
    """The forge of one instance (``count`` 0: no rate limit)."""
    poll = DispatchPollConfig(
        base_interval=timedelta(milliseconds=20), max_interval=timedelta(milliseconds=50)
    )
    forge = Forge(
        url,
        create_tables=False,
        retention=None,
        settings=ForgeWorkerSettings(poll=poll, task_lease_ttl=LEASE),
    )
    lane = forge.lane(LANE, concurrency=4, rate_limit=(count, PERIOD) if count else None)

    @forge.task(name=KIND, lane=lane)
    async def call() -> None:
        await asyncio.sleep(0.02)

    return forge


async def main(url: str, count: int) -> None:
    forge = build(url, count)
    async with forge.running():
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
