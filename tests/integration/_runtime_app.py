"""A small service for the AsterRuntime end-to-end test (run with ``python -m``).

Components: a background-task group (spawned from the runtime's shutdown token) whose
worker writes a heartbeat row every 50 ms and a final ``stopped`` row when told to
stop, and the database component that disposes the engine after the group stopped.
Prints ``ready`` once the worker wrote, then, after SIGTERM, the shutdown report as
one JSON line.
"""

from __future__ import annotations

import asyncio
import enum
import json
import sys

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from aster_forge.db import database_component_after
from aster_forge.runtime import AsterRuntime, CancellationToken
from aster_forge.tasks import (
    BACKGROUND_TASKS_COMPONENT,
    BackgroundTasks,
    RuntimeTaskCatalog,
    RuntimeTaskDefinition,
    background_task_component_with_definitions_from_shutdown,
)

metadata = sa.MetaData()
events = sa.Table(
    "it_runtime_events",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("event", sa.String(32), nullable=False),
)


class SystemTask(enum.Enum):
    HEARTBEAT = "heartbeat"


CATALOG = RuntimeTaskCatalog(
    SystemTask,
    [RuntimeTaskDefinition(SystemTask.HEARTBEAT, "heartbeat", "Heartbeat", "runtime.heartbeat")],
)


async def heartbeat(engine: AsyncEngine, token: CancellationToken, ready: asyncio.Event) -> None:
    while not token.cancelled:
        async with engine.begin() as conn:
            await conn.execute(events.insert().values(event="beat"))
        ready.set()
        await token.sleep(0.05)
    # The shutdown-time write: it only succeeds if the engine is still open.
    async with engine.begin() as conn:
        await conn.execute(events.insert().values(event="stopped"))


async def main(url: str) -> None:
    engine = create_async_engine(url)
    ready = asyncio.Event()

    def spawn(token: CancellationToken) -> BackgroundTasks:
        group = BackgroundTasks(token)
        group.spawn("heartbeat", lambda t: heartbeat(engine, t, ready))
        return group

    runtime = AsterRuntime(
        components=[
            database_component_after(engine, [BACKGROUND_TASKS_COMPONENT]),
            background_task_component_with_definitions_from_shutdown(CATALOG.definitions(), spawn),
        ]
    )
    run = asyncio.create_task(runtime.run())
    await ready.wait()
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    await run
    report = runtime.last_shutdown_report
    assert report is not None
    phases = [[p.component, p.name, p.status.kind.value] for p in report.phases]
    sys.stdout.write(json.dumps({"phases": phases}) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
