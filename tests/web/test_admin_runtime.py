"""Admin API: components and graph, reports, scheduled catalog, runtime leases, lanes."""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from aster_forge.db import (
    RuntimeLeaseDbStore,
    ScheduledTaskDbStore,
    runtime_leases_table,
    scheduled_tasks_table,
)
from aster_forge.runtime import RuntimeComponentKind, RuntimeComponentRegistry
from aster_forge.tasks import (
    ClaimedTaskExecutionConfig,
    ClaimedTaskOutcome,
    DispatchStatsRecorder,
    IntervalSchedule,
    NewTask,
    ScheduledTaskOutcome,
    ScheduledTaskStore,
    TaskLaneConfig,
    TaskWorker,
)
from aster_forge.testing import (
    InMemoryRuntimeLeaseStore,
    InMemoryScheduledTaskStore,
    InMemoryTaskStore,
    ManualClock,
)
from aster_forge.web import AdminSources, RuntimeLeaseTableReader, admin_app
from aster_forge.web._leases import RuntimeLeaseSource

from ._support import client

T0 = datetime(2030, 1, 1, tzinfo=UTC)


def product_registry(log: list[str]) -> RuntimeComponentRegistry:
    """The seed's example graph, registered in a scrambled order."""
    registry = RuntimeComponentRegistry()

    async def record(name: str) -> None:
        log.append(name)

    def phase(name: str) -> Any:
        return lambda: record(name)

    database, audit, mail = (
        RuntimeComponentKind.DATABASE,
        RuntimeComponentKind.AUDIT,
        RuntimeComponentKind.MAIL,
    )
    registry.component(
        "database", database, depends_on=["background_tasks", "mail_outbox", "audit_manager"]
    )
    registry.component_startup("database", database, "connect", phase("connect"))
    registry.component_shutdown(
        "database", database, "database", None, phase("database"), timeout=timedelta(seconds=5)
    )
    registry.component_shutdown(
        "audit_manager", audit, "audit_manager", ["audit_logs"], phase("audit_manager")
    )
    registry.component_shutdown(
        "audit_logs", audit, "audit_logs", ["mail_outbox"], phase("audit_logs")
    )
    registry.component_shutdown(
        "mail_outbox", mail, "mail_outbox", ["background_tasks"], phase("mail_outbox")
    )
    tasks = RuntimeComponentKind.TASKS
    registry.component_startup("background_tasks", tasks, "warm", phase("warm"), optional=True)
    registry.component_shutdown(
        "background_tasks", tasks, "background_tasks", None, phase("background_tasks")
    )
    return registry


async def test_components_and_dependency_graph() -> None:
    registry = product_registry([])
    async with client(admin_app(AdminSources(components=registry))) as http:
        body = (await http.get("/api/components")).json()
    assert body["valid"] is True and body["error"] is None
    assert body["shutdown_order"] == [
        "background_tasks",
        "mail_outbox",
        "audit_logs",
        "audit_manager",
        "database",
    ]
    assert body["startup_order"] == list(reversed(body["shutdown_order"]))
    levels = {c["name"]: c["level"] for c in body["components"]}
    assert levels == {
        "background_tasks": 0,
        "mail_outbox": 1,
        "audit_logs": 2,
        "audit_manager": 3,
        "database": 4,
    }
    assert {"from": "database", "to": "mail_outbox"} in body["edges"]
    assert len(body["edges"]) == 6
    database = next(c for c in body["components"] if c["name"] == "database")
    assert database["kind"] == "database"
    assert database["startup_phases"] == [{"phase": "connect", "policy": "required"}]
    assert database["shutdown_phases"] == [{"phase": "database", "timeout_seconds": 5.0}]


async def test_an_invalid_graph_is_reported_not_raised() -> None:
    registry = RuntimeComponentRegistry()
    registry.component("a", RuntimeComponentKind.OTHER, depends_on=["b"])
    registry.component("b", RuntimeComponentKind.OTHER, depends_on=["a"])
    registry.component("c", RuntimeComponentKind.OTHER, depends_on=["ghost"])
    async with client(admin_app(AdminSources(components=registry))) as http:
        body = (await http.get("/api/components")).json()
    assert body["valid"] is False
    assert body["error"]["missing"] == [{"component": "c", "dependency": "ghost"}]
    assert set(body["error"]["cycle"]) == {"a", "b"}
    assert body["shutdown_order"] == []


async def test_reports_before_and_after_startup_and_shutdown() -> None:
    log: list[str] = []
    registry = product_registry(log)
    async with client(admin_app(AdminSources(components=registry))) as http:
        empty = (await http.get("/api/reports")).json()
        await registry.startup()
        started = (await http.get("/api/reports")).json()
        await registry.shutdown()
        stopped = (await http.get("/api/reports")).json()
    assert empty == {"startup": None, "shutdown": None}
    assert started["startup"]["succeeded"] is True
    assert [(p["component"], p["name"]) for p in started["startup"]["phases"]] == [
        ("database", "connect"),
        ("background_tasks", "warm"),
    ]
    assert started["shutdown"] is None
    shutdown = stopped["shutdown"]
    assert [p["component"] for p in shutdown["phases"]] == [
        "background_tasks",
        "mail_outbox",
        "audit_logs",
        "audit_manager",
        "database",
    ]
    assert {p["status"] for p in shutdown["phases"]} == {"succeeded"}
    assert shutdown["has_failures"] is False
    assert log[-5:] == [p["name"] for p in shutdown["phases"]]


@pytest.fixture(params=["memory", "sqlite"])
async def scheduled_store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[ScheduledTaskStore, ManualClock]]:
    clock = ManualClock(T0)
    if request.param == "memory":
        yield InMemoryScheduledTaskStore(clock), clock
        return
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'catalog.db'}")
    metadata = sa.MetaData()
    scheduled_tasks_table(metadata)
    async with engine.begin() as conn:
        await conn.run_sync(metadata.create_all)
    try:
        yield ScheduledTaskDbStore(engine, clock=clock), clock
    finally:
        await engine.dispose()


async def test_scheduled_catalog_with_last_next_run_and_claim_owner(
    scheduled_store: tuple[ScheduledTaskStore, ManualClock],
) -> None:
    store, clock = scheduled_store
    minute = timedelta(minutes=1)
    await store.ensure_scheduled_task("demo", "cleanup", IntervalSchedule(every=minute))
    await store.ensure_scheduled_task("demo", "health", IntervalSchedule(every=minute))
    done = await store.claim_scheduled_task("demo", "health", "instance-a", minute)
    assert done is not None
    await clock.advance(timedelta(seconds=2))
    assert await store.complete_scheduled_task(
        done, ScheduledTaskOutcome.failed("probe down", timedelta(seconds=2))
    )
    running = await store.claim_scheduled_task("demo", "cleanup", "instance-b", minute)
    assert running is not None
    sources = AdminSources(scheduled_store=store, clock=clock)
    async with client(admin_app(sources)) as http:
        body = (await http.get("/api/scheduled")).json()
        other = (await http.get("/api/scheduled", params={"namespace": "other"})).json()
    items = {item["name"]: item for item in body["items"]}
    cleanup, health = items["cleanup"], items["health"]
    assert cleanup["claimed"] is True and cleanup["claimed_by"] == "instance-b"
    assert cleanup["last_run_status"] is None and cleanup["run_count"] == 0
    assert health["claimed"] is False
    assert health["last_run_status"] == "failed" and health["last_run_error"] == "probe down"
    assert health["last_run_duration_seconds"] == 2.0
    assert health["run_count"] == 1
    assert datetime.fromisoformat(health["next_run_at"]) == T0 + timedelta(seconds=62)
    assert health["due"] is False and health["interval_seconds"] == 60.0
    assert body["now"] == (T0 + timedelta(seconds=2)).isoformat()
    assert other["items"] == []


async def create_lease_table(engine: AsyncEngine) -> None:
    metadata = sa.MetaData()
    runtime_leases_table(metadata)
    async with engine.begin() as conn:
        await conn.run_sync(metadata.create_all)


async def test_runtime_leases_on_every_backend(engine: AsyncEngine, backend: str) -> None:
    await create_lease_table(engine)
    clock = ManualClock(datetime.now(UTC))
    store = RuntimeLeaseDbStore(engine, clock=clock)
    held = await store.try_acquire("demo.background_tasks", "instance-a", timedelta(minutes=5))
    assert held is not None
    forever = await store.try_acquire("demo.forever", "instance-c", timedelta.max)
    assert forever is not None and forever.never_expires
    # An expired row: written directly, in the past on any clock.
    past = datetime.now(UTC) - timedelta(hours=1)
    async with engine.begin() as conn:
        await conn.execute(
            runtime_leases_table(sa.MetaData())
            .insert()
            .values(
                lease_id="demo.old",
                owner_id="instance-b",
                expires_at=past,
                acquired_at=past,
                updated_at=past,
            )
        )
    reader = RuntimeLeaseTableReader(engine, clock=clock)
    async with client(admin_app(AdminSources(leases=reader))) as http:
        body = (await http.get("/api/leases")).json()
    items = {item["lease_id"]: item for item in body["items"]}
    assert list(items) == ["demo.background_tasks", "demo.forever", "demo.old"]
    assert items["demo.background_tasks"]["owner_id"] == "instance-a"
    assert items["demo.background_tasks"]["expired"] is False
    assert items["demo.forever"]["never_expires"] is True
    assert items["demo.old"]["expired"] is True
    assert datetime.fromisoformat(items["demo.background_tasks"]["expires_at"]) == held.expires_at
    assert repr(reader).startswith("<RuntimeLeaseTableReader backend=")
    # The lease store itself is a lease source and lists the same rows.
    assert isinstance(store, RuntimeLeaseSource)
    async with client(admin_app(AdminSources(leases=store, clock=clock))) as http:
        assert (await http.get("/api/leases")).json()["items"] == body["items"]


async def test_runtime_leases_from_an_in_memory_store() -> None:
    clock = ManualClock(T0)
    store = InMemoryRuntimeLeaseStore(clock)
    await store.try_acquire("demo.short", "instance-a", timedelta(seconds=10))
    await clock.advance(timedelta(seconds=5))
    renewed = await store.renew("demo.short", "instance-a", timedelta(seconds=10))
    await store.try_acquire("demo.gone", "instance-b", timedelta(seconds=1))
    await clock.advance(timedelta(seconds=2))
    assert renewed is not None
    async with client(admin_app(AdminSources(leases=store))) as http:
        body = (await http.get("/api/leases")).json()
    assert body["now"] == (T0 + timedelta(seconds=7)).isoformat()
    assert body["items"] == [
        {
            "lease_id": "demo.gone",
            "owner_id": "instance-b",
            "expires_at": (T0 + timedelta(seconds=6)).isoformat(),
            "expired": True,
            "never_expires": False,
            "acquired_at": (T0 + timedelta(seconds=5)).isoformat(),
            "updated_at": (T0 + timedelta(seconds=5)).isoformat(),
        },
        {
            "lease_id": "demo.short",
            "owner_id": "instance-a",
            "expires_at": renewed.expires_at.isoformat(),
            "expired": False,
            "never_expires": False,
            "acquired_at": T0.isoformat(),
            "updated_at": (T0 + timedelta(seconds=5)).isoformat(),
        },
    ]


class Lane(enum.StrEnum):
    MEDIA = "media"
    MAINTENANCE = "maintenance"
    FALLBACK = "fallback"


async def test_lanes_from_limits_stats_and_store_counts() -> None:
    clock = ManualClock(T0)
    store = InMemoryTaskStore(clock)
    for _ in range(3):
        await store.enqueue(NewTask(kind="render", lane=Lane.MEDIA))
    await store.enqueue(NewTask(kind="render", lane=Lane.MEDIA, delay=timedelta(hours=1)))
    await store.claim_due_for_lane(Lane.MEDIA, 1, "w", timedelta(seconds=30))
    await clock.advance(timedelta(seconds=4))
    stats = DispatchStatsRecorder([Lane.MEDIA])
    stats.record_claim(Lane.MEDIA, claimed=1, rescued=0, latency_seconds=0.01, queue_lag_seconds=0)
    stats.record_started(Lane.MEDIA)
    sources = AdminSources(
        task_store=store,
        dispatch_stats=stats,
        lane_limits={Lane.MEDIA: 2, Lane.MAINTENANCE: 1},
        lanes=[Lane.FALLBACK],
    )
    async with client(admin_app(sources)) as http:
        body = (await http.get("/api/lanes")).json()
    lanes = {item["lane"]: item for item in body["items"]}
    assert list(lanes) == ["fallback", "maintenance", "media"]
    media = lanes["media"]
    assert (media["limit"], media["in_flight"]) == (2, 1)
    assert (media["pending"], media["due"], media["running"]) == (3, 2, 1)
    assert media["queue_lag_seconds"] == 4.0
    assert media["stats"]["claimed"] == 1
    assert lanes["maintenance"]["limit"] == 1 and lanes["maintenance"]["in_flight"] is None
    assert lanes["fallback"]["pending"] == 0 and lanes["fallback"]["limit"] is None


async def test_lanes_from_a_dispatcher_factory() -> None:
    store = InMemoryTaskStore(ManualClock(T0))
    dispatcher: TaskWorker[None] = TaskWorker(
        store,
        lanes=[TaskLaneConfig(Lane.MEDIA, 2), TaskLaneConfig(Lane.FALLBACK, 4)],
        execution=ClaimedTaskExecutionConfig(state=None, specs={}),
    )
    dispatcher.stats.record_outcome(Lane.MEDIA, ClaimedTaskOutcome.SUCCEEDED)
    current: list[TaskWorker[None] | None] = [None]
    sources = AdminSources(task_store=store, dispatcher=lambda: current[0])
    async with client(admin_app(sources)) as http:
        standby = (await http.get("/api/lanes")).json()
        current[0] = dispatcher
        leader = (await http.get("/api/lanes")).json()
    assert standby["items"] == []
    lanes = {item["lane"]: item for item in leader["items"]}
    assert (lanes["media"]["limit"], lanes["media"]["in_flight"]) == (2, 0)
    assert lanes["media"]["stats"]["succeeded"] == 1
    assert lanes["fallback"]["limit"] == 4
