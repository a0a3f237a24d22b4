"""A partitioned lane takes partitions in turn: one partition's 10,000 queued tasks do
not hold back another's 10, on every backend (and in memory).

The bodies record the order they start in. A control run without ``partition_limit``
shows the check can fail: there the small partition waits behind the big one.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from aster_forge import Forge, ForgeWorkerSettings
from aster_forge.tasks import DispatchPollConfig

BIG = 10_000
SMALL = 10
FIRST = 100


async def _first_starts(url: str, *, partition_limit: int | None) -> list[str]:
    """The partitions of the first :data:`FIRST` tasks to start, in start order."""
    poll = DispatchPollConfig(
        base_interval=timedelta(milliseconds=10), max_interval=timedelta(milliseconds=50)
    )
    forge = Forge(url, retention=None, settings=ForgeWorkerSettings(poll=poll))
    lane = forge.lane("tenants", concurrency=10, partition_limit=partition_limit)
    starts: list[str] = []
    enough = asyncio.Event()

    @forge.task(lane=lane)
    async def visit(payload: str) -> None:
        starts.append(payload)
        if len(starts) >= FIRST:
            enough.set()

    try:
        await forge.migrate()
        # The big partition first: by due time and id all its tasks come before.
        await visit.enqueue_many(["big"] * BIG, partition="big")
        await visit.enqueue_many(["small"] * SMALL, partition="small")
        async with forge.running():
            await asyncio.wait_for(enough.wait(), 120)
    finally:
        await forge.aclose()
    return starts[:FIRST]


async def test_the_small_partition_starts_within_the_first_hundred(forge_url: str) -> None:
    starts = await _first_starts(forge_url, partition_limit=SMALL)
    assert starts.count("small") == SMALL, f"{starts.count('small')} small of the first {FIRST}"


async def test_in_memory_too() -> None:
    starts = await _first_starts("memory://", partition_limit=SMALL)
    assert starts.count("small") == SMALL


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_without_partitions_the_small_one_waits(forge_url: str) -> None:
    starts = await _first_starts(forge_url, partition_limit=None)
    assert starts.count("small") == 0, "a lane without partition_limit claims in due order"
