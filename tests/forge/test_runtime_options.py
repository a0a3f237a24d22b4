"""What a product sets on the forge's runtime: its instance id (claim owner and scheduler
lease holder), per-task temp directories, an HTTP service on a socket it bound, and
health checks of its resources."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest

from aster_forge import (
    Forge,
    ForgeDeclarationError,
    ForgeWorkerSettings,
    TaskExecutionContext,
    TaskStatus,
)
from aster_forge.db import RuntimeLeaseDbStore
from aster_forge.runtime import (
    HealthCheckScope,
    HealthComponentReport,
    HealthStatus,
    SystemHealthReport,
)
from aster_forge.tasks import DispatchPollConfig

_POLL = DispatchPollConfig(
    base_interval=timedelta(milliseconds=20), max_interval=timedelta(milliseconds=100)
)


async def test_the_instance_id_claims_tasks_and_holds_the_scheduler_lease(
    forge_url: str, tmp_path: Path
) -> None:
    forge = Forge(
        forge_url,
        name="owned",
        create_tables=True,
        settings=ForgeWorkerSettings(poll=_POLL, temp_root=tmp_path),
    )
    fired = asyncio.Event()
    staged: list[Path] = []

    @forge.task
    async def stage(ctx: TaskExecutionContext, payload: str) -> str:
        path = await ctx.temp_dir() / "staged.txt"
        path.write_text(payload, encoding="utf-8")
        staged.append(path)
        return path.read_text(encoding="utf-8")

    @forge.periodic(every=timedelta(milliseconds=200))
    async def tick() -> None:
        fired.set()

    assert forge.instance_id == forge.instance_id and forge.instance_id.count(":") == 2
    engine = forge.backend.engine
    assert engine is not None
    async with forge.running():
        made = await stage.enqueue("hello")
        await asyncio.wait_for(fired.wait(), timeout=20)
        leases = (await RuntimeLeaseDbStore(engine).list_runtime_leases()).leases
        holders = {lease.lease_id: lease.owner_id for lease in leases}
        assert holders["owned.scheduler"] == forge.instance_id
        for _ in range(400):
            record = await forge.backend.task_store.get_task(made.record.id)
            if record is not None and record.status.is_terminal:
                break
            await asyncio.sleep(0.025)
    assert record is not None and record.status is TaskStatus.SUCCEEDED, record
    assert record.claimed_by == forge.instance_id
    assert record.result_json == '"hello"'
    # The body's temp dir lived under temp_root and was removed after the execution.
    (path,) = staged
    assert path.is_relative_to(tmp_path / "_runtime" / "tasks")
    assert not path.parent.exists()
    await forge.aclose()


async def test_the_runtime_serves_http_on_a_socket_the_product_bound() -> None:
    forge = Forge("memory://")

    @forge.task
    async def noop() -> None:
        return None

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    port = sock.getsockname()[1]
    runtime = forge.runtime(http=sock, install_signal_handlers=False)
    run = asyncio.create_task(runtime.run(), name="forge-http-runtime")
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            for _ in range(400):
                try:
                    ready = await client.get("/readyz")
                except httpx.ConnectError:  # uvicorn not serving yet
                    await asyncio.sleep(0.025)
                    continue
                if ready.status_code == 200:
                    break
                await asyncio.sleep(0.025)
            assert ready.status_code == 200, ready.text
            assert (await client.get("/api/tasks")).status_code == 200
    finally:
        runtime.request_stop()
        await run
    assert sock.fileno() == -1  # the service closed the socket it was given


async def test_resource_health_checks_run_with_the_forge_and_see_the_state() -> None:
    forge = Forge("memory://")
    broken = {"pool": False}

    @forge.resources
    async def resources() -> AsyncIterator[dict[str, bool]]:
        yield broken

    @forge.health_check("pool", required=True)
    async def pool(state: dict[str, bool] | None) -> HealthComponentReport:
        if state is None or state["pool"]:
            return HealthComponentReport.unhealthy("pool", "pool broken")
        return HealthComponentReport.healthy("pool", "pool ok")

    @forge.health_check("cache")
    async def cache(state: dict[str, bool] | None) -> HealthComponentReport:
        return HealthComponentReport.degraded("cache", "cold")

    @forge.task
    async def noop() -> None:
        return None

    with pytest.raises(ForgeDeclarationError, match="declared twice"):
        forge.health_check("pool")
    async with forge.running() as runtime:
        owners = {d.name: d.health_checks for d in runtime.descriptors()}
        assert set(owners["forge_resources"]) == {"pool", "cache"}
        ready = await forge.run_health(HealthCheckScope.READINESS)
        assert {c.name: c.status for c in ready.components}["pool"] is HealthStatus.HEALTHY
        assert "cache" not in {c.name for c in ready.components}  # diagnostics only
        broken["pool"] = True
        ready = await forge.run_health(HealthCheckScope.READINESS)
        assert ready.status() is HealthStatus.UNHEALTHY
        diagnostics = await forge.run_health(HealthCheckScope.DIAGNOSTICS)
        statuses = {c.name: c.status for c in diagnostics.components}
        assert statuses["cache"] is HealthStatus.DEGRADED


async def test_the_worker_reports_unhealthy_while_every_claim_fails() -> None:
    # A store the worker cannot claim from: readiness says so (and names no payload),
    # and says healthy again once a claim goes through.
    forge = Forge("memory://", settings=ForgeWorkerSettings(poll=_POLL))

    @forge.task
    async def noop() -> None:
        return None

    store = forge.backend.task_store
    healthy_claim = store.claim_due_for_lane
    failing = {"on": True}
    failed, claimed = asyncio.Event(), asyncio.Event()

    async def claim(*args: object, **kwargs: object) -> object:
        # The worker records the claim's outcome in the step that sees it return, before
        # a waiter woken by these events runs.
        if failing["on"]:
            failed.set()
            raise ConnectionError("db down")
        records = await healthy_claim(*args, **kwargs)  # type: ignore[arg-type]
        claimed.set()
        return records

    store.claim_due_for_lane = claim  # type: ignore[method-assign, assignment]
    async with forge.running():
        worker = forge.current_dispatcher()
        assert worker is not None
        async with asyncio.timeout(10):
            await failed.wait()

        def background(report: SystemHealthReport) -> tuple[HealthStatus, str]:
            (component,) = [c for c in report.components if c.name == "background_tasks"]
            return component.status, component.message

        ready = await forge.run_health(HealthCheckScope.READINESS)
        assert background(ready) == (HealthStatus.UNHEALTHY, "claims fail")
        failing["on"] = False
        worker.wake()
        async with asyncio.timeout(10):
            await claimed.wait()
        ready = await forge.run_health(HealthCheckScope.READINESS)
        assert background(ready) == (HealthStatus.HEALTHY, "dispatching")
