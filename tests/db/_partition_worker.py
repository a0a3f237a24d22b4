"""A Forge worker in another process (``python -m tests.db._partition_worker URL LIMIT``).

Serves the lane ``tenants`` (4 slots in this process; at most ``LIMIT`` tasks of one
partition across every instance, or no partition limit when ``LIMIT`` is 0) whose
task ``visit`` sleeps 40 ms. Leases last one second, so a killed instance's tasks
come back within about that. Prints ``ready`` once its worker runs, then runs until
killed.
"""

from __future__ import annotations

import asyncio
import sys
from datetime import timedelta

from aster_forge import Forge, ForgeWorkerSettings
from aster_forge.tasks import DispatchPollConfig

LANE = "tenants"
KIND = "visit"
LEASE = timedelta(seconds=1)


def build(url: str, limit: int) -> Forge:
    """The forge of one instance (``limit`` 0: no partition limit)."""
    poll = DispatchPollConfig(
        base_interval=timedelta(milliseconds=20), max_interval=timedelta(milliseconds=50)
    )
    forge = Forge(
        url,
        create_tables=False,
        retention=None,
        settings=ForgeWorkerSettings(poll=poll, task_lease_ttl=LEASE),
    )
    lane = forge.lane(LANE, concurrency=4, partition_limit=limit or None)

    @forge.task(name=KIND, lane=lane)
    async def visit() -> None:
        await asyncio.sleep(0.04)

    return forge


async def main(url: str, limit: int) -> None:
    forge = build(url, limit)
    async with forge.running():
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
