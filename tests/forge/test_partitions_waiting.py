"""The lanes API and ``/metrics`` count the partitions with due tasks waiting, on every
backend, and name the busiest; they show the lane's per-partition rate limit."""

from __future__ import annotations

from datetime import timedelta

import httpx
from starlette.applications import Starlette
from starlette.routing import Mount

from aster_forge import Forge, ForgeTask


def _samples(text: str) -> dict[str, float]:
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }


def _forge(url: str) -> tuple[Forge, ForgeTask]:
    forge = Forge(url)
    forge.lane(
        "tenants",
        concurrency=4,
        partition_limit=1,
        partition_rate_limit=(3, timedelta(seconds=1)),
    )
    forge.lane("media", concurrency=4)

    @forge.task(lane="tenants")
    async def visit(payload: int) -> int:
        return payload

    return forge, visit


async def _lanes_and_metrics(
    forge: Forge, visit: ForgeTask
) -> tuple[list[dict[str, object]], dict[str, float]]:
    """Enqueue partitioned work (one task claimed, one not yet due); read both views."""
    await forge.migrate()
    for partition, count in (("t-a", 3), ("t-b", 2), ("t-c", 1), ("t-d", 1)):
        await visit.enqueue_many(list(range(count)), partition=partition)
    await visit.enqueue(0, partition="t-e", delay=timedelta(hours=1))  # not due
    await visit.enqueue(0)  # no partition
    claimed = await forge.backend.task_store.claim_due_for_lane(
        "tenants", 1, "worker", timedelta(minutes=5), partition_limit=1
    )
    assert [r.partition_key for r in claimed] == ["t-a"]
    app = Starlette(routes=[Mount("/ops", forge.asgi_app())])
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        lanes = (await client.get("/ops/api/lanes")).json()["items"]
        samples = _samples((await client.get("/ops/metrics")).text)
    return lanes, samples


async def test_the_lanes_api_counts_and_names_the_partitions_waiting(forge_at: str) -> None:
    forge, visit = _forge(forge_at)
    try:
        lanes, _ = await _lanes_and_metrics(forge, visit)
    finally:
        await forge.aclose()
    waiting = {
        lane["lane"]: (lane["partitions_waiting"], lane["top_partitions_waiting"]) for lane in lanes
    }
    # t-a's claimed task and t-e's later one do not wait; ties go by partition.
    assert waiting == {
        "media": (0, []),
        "tenants": (
            4,
            [
                {"partition": "t-a", "due": 2},
                {"partition": "t-b", "due": 2},
                {"partition": "t-c", "due": 1},
            ],
        ),
    }


async def test_metrics_export_the_partitions_waiting_per_lane() -> None:
    forge, visit = _forge("memory://")
    try:
        _, samples = await _lanes_and_metrics(forge, visit)
    finally:
        await forge.aclose()
    assert samples['task_lane_partitions_waiting{lane="tenants"}'] == 4.0
    assert samples['task_lane_partitions_waiting{lane="media"}'] == 0.0
    assert samples['task_lane_partition_rate_limit{lane="tenants"}'] == 3.0
    assert samples['task_lane_partition_rate_period_seconds{lane="tenants"}'] == 1.0
    assert not any(
        name.startswith('task_lane_partition_rate_limit{lane="media"') for name in samples
    )


async def test_the_lanes_api_shows_the_partition_rate_limit() -> None:
    forge, visit = _forge("memory://")
    try:
        lanes, _ = await _lanes_and_metrics(forge, visit)
    finally:
        await forge.aclose()
    assert [(lane["lane"], lane["partition_rate_limit"]) for lane in lanes] == [
        ("media", None),
        ("tenants", {"count": 3, "period_seconds": 1.0}),
    ]
