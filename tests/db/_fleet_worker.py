"""A Forge worker in another process: ``python -m tests.db._fleet_worker URL MODE VALUE``.

Serves one lane (4 slots in this process) whose task sleeps: ``MODE`` says which
cluster-wide setting the lane declares with ``VALUE`` (0: none) - ``cluster`` (lane
``capped``, ``cluster_limit``), ``partition`` (lane ``tenants``, ``partition_limit``),
``rate`` (lane ``metered``, ``rate_limit=(VALUE, PERIOD)``) or ``partition_rate`` (lane
``tenant_calls``, ``partition_rate_limit=(VALUE, PERIOD)``). Leases last one second,
so a killed instance's tasks come back within about that. Prints ``ready`` once its
worker runs, then runs until killed.
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from aster_forge import Forge, ForgeWorkerSettings
from aster_forge.tasks import DispatchPollConfig

LEASE = timedelta(seconds=1)
PERIOD = timedelta(milliseconds=500)


@dataclass(frozen=True, slots=True)
class Mode:
    """One lane shape: its name, its task's name and body time, and its setting."""

    lane: str
    kind: str
    nap: float
    setting: str

    def lane_options(self, value: int) -> dict[str, Any]:
        if not value:
            return {}
        if self.setting in ("rate_limit", "partition_rate_limit"):
            return {self.setting: (value, PERIOD)}
        return {self.setting: value}


MODES = {
    "cluster": Mode("capped", "nap", 0.04, "cluster_limit"),
    "partition": Mode("tenants", "visit", 0.04, "partition_limit"),
    "rate": Mode("metered", "call", 0.02, "rate_limit"),
    "partition_rate": Mode("tenant_calls", "tenant_call", 0.02, "partition_rate_limit"),
}


def build(url: str, mode: str, value: int) -> Forge:
    """The forge of one instance (``value`` 0: the lane without its setting)."""
    shape = MODES[mode]
    poll = DispatchPollConfig(
        base_interval=timedelta(milliseconds=20), max_interval=timedelta(milliseconds=50)
    )
    forge = Forge(
        url,
        create_tables=False,
        retention=None,
        settings=ForgeWorkerSettings(poll=poll, task_lease_ttl=LEASE),
    )
    lane = forge.lane(shape.lane, concurrency=4, **shape.lane_options(value))

    @forge.task(name=shape.kind, lane=lane)
    async def body() -> None:
        await asyncio.sleep(shape.nap)

    return forge


async def main(url: str, mode: str, value: int) -> None:
    forge = build(url, mode, value)
    async with forge.running():
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
