"""``/metrics`` and the lanes API show each lane's cluster-wide limit beside what runs
against it."""

from __future__ import annotations

from datetime import timedelta

import httpx
from starlette.applications import Starlette
from starlette.routing import Mount

from aster_forge import Forge


def _samples(text: str) -> dict[str, float]:
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }


async def test_the_limit_and_the_running_count_are_shown() -> None:
    forge = Forge("memory://")
    forge.lane("billing", concurrency=4, cluster_limit=2)
    forge.lane("media", concurrency=4)

    @forge.task(lane="billing")
    async def charge(payload: int) -> int:
        return payload

    @forge.task(lane="media")
    async def render(payload: int) -> int:
        return payload

    try:
        await charge.enqueue_many([1, 2, 3])
        store = forge.backend.task_store
        claimed = await store.claim_due_for_lane(
            "billing", 3, "worker", timedelta(minutes=5), cluster_limit=2
        )
        assert len(claimed) == 2
        app = Starlette(routes=[Mount("/ops", forge.asgi_app())])
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            samples = _samples((await client.get("/ops/metrics")).text)
            lanes = (await client.get("/ops/api/lanes")).json()["items"]
    finally:
        await forge.aclose()
    assert samples['task_lane_cluster_limit{lane="billing"}'] == 2.0
    assert samples['task_queue_depth{lane="billing",status="running"}'] == 2.0
    assert samples['task_queue_depth{lane="billing",status="pending"}'] == 1.0
    assert not any(name.startswith('task_lane_cluster_limit{lane="media"') for name in samples)
    assert [(lane["lane"], lane["running"], lane["cluster_limit"]) for lane in lanes] == [
        ("billing", 2, 2),
        ("media", 0, None),
    ]


async def test_the_partition_limit_is_shown() -> None:
    forge = Forge("memory://")
    forge.lane("tenants", concurrency=4, partition_limit=1)
    forge.lane("media", concurrency=4)

    @forge.task(lane="tenants")
    async def visit(payload: int) -> int:
        return payload

    try:
        app = Starlette(routes=[Mount("/ops", forge.asgi_app())])
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            samples = _samples((await client.get("/ops/metrics")).text)
            lanes = (await client.get("/ops/api/lanes")).json()["items"]
    finally:
        await forge.aclose()
    assert samples['task_lane_partition_limit{lane="tenants"}'] == 1.0
    assert not any(name.startswith('task_lane_partition_limit{lane="media"') for name in samples)
    assert [(lane["lane"], lane["partition_limit"]) for lane in lanes] == [
        ("media", None),
        ("tenants", 1),
    ]


async def test_the_rate_limit_and_its_remaining_budget_are_shown() -> None:
    forge = Forge("memory://")
    # Windows are aligned to the epoch: a century-long one has no boundary to cross here.
    century = timedelta(days=36525)
    forge.lane("api", concurrency=4, rate_limit=(5, century))
    forge.lane("media", concurrency=4)

    @forge.task(lane="api")
    async def call(payload: int) -> int:
        return payload

    try:
        await call.enqueue_many([1, 2, 3])
        claimed = await forge.backend.task_store.claim_due_for_lane(
            "api", 4, "worker", timedelta(minutes=5), rate_limit=(5, century)
        )
        assert len(claimed) == 3
        app = Starlette(routes=[Mount("/ops", forge.asgi_app())])
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            samples = _samples((await client.get("/ops/metrics")).text)
            lanes = (await client.get("/ops/api/lanes")).json()["items"]
    finally:
        await forge.aclose()
    assert samples['task_lane_rate_limit{lane="api"}'] == 5.0
    assert samples['task_lane_rate_period_seconds{lane="api"}'] == century.total_seconds()
    assert samples['task_lane_rate_remaining{lane="api"}'] == 2.0
    assert not any(name.startswith('task_lane_rate_limit{lane="media"') for name in samples)
    rates = [(lane["lane"], lane["rate_limit"], lane["rate_remaining"]) for lane in lanes]
    assert rates == [
        ("api", {"count": 5, "period_seconds": century.total_seconds()}, 2),
        ("media", None, None),
    ]
