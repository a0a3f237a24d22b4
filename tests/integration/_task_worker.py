"""A dispatch worker process for the multi-process task tests.

``python -m tests.integration._task_worker URL MODE LEASE_TTL_SECONDS``; MODE is
``run`` (execute tasks) or ``hang`` (bodies block forever, to be SIGKILLed). Each body
inserts one row into ``task_executions`` (unique on ``task_n``); a duplicate execution
is counted, never hidden. The worker prints ``ready`` once listening, stops when a line
arrives on stdin, then prints a JSON summary: per-lane max concurrency and duplicates.
"""

from __future__ import annotations

import asyncio
import enum
import json
import os
import sys
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta

import sqlalchemy as sa
from pydantic import BaseModel
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from aster_forge import TaskExecutionContext
from aster_forge.db import BackgroundTaskDbStore
from aster_forge.db._tasks_notify import BackgroundTaskNotificationListener
from aster_forge.runtime import CancellationToken
from aster_forge.tasks import (
    ClaimedTaskExecutionConfig,
    DispatchPollConfig,
    TaskLaneConfig,
    TaskRegistry,
    TaskSpec,
    TaskWorker,
)


class Kind(enum.StrEnum):
    ONE = "kind-one"
    FOUR = "kind-four"
    EIGHT = "kind-eight"


class Lane(enum.StrEnum):
    ONE = "lane-one"
    FOUR = "lane-four"
    EIGHT = "lane-eight"


LIMITS = {Lane.ONE: 1, Lane.FOUR: 4, Lane.EIGHT: 8}
LANE_OF = {Kind.ONE: Lane.ONE, Kind.FOUR: Lane.FOUR, Kind.EIGHT: Lane.EIGHT}

EXECUTIONS_DDL = (
    "CREATE TABLE IF NOT EXISTS task_executions ("
    "task_n INTEGER PRIMARY KEY, lane TEXT NOT NULL, pid INTEGER NOT NULL, attempt INTEGER)"
)
STARTS_DDL = "CREATE TABLE IF NOT EXISTS task_starts (task_n INTEGER, pid INTEGER, token TEXT)"


class Work(BaseModel):
    n: int


@dataclass
class State:
    engine: AsyncEngine
    hang: bool
    running: Counter[str] = field(default_factory=Counter)
    max_running: Counter[str] = field(default_factory=Counter)
    duplicates: int = 0


def _body(kind: Kind):  # type: ignore[no-untyped-def]
    lane = LANE_OF[kind].value

    async def run(ctx: TaskExecutionContext, state: State, payload: Work) -> None:
        state.running[lane] += 1
        state.max_running[lane] = max(state.max_running[lane], state.running[lane])
        try:
            if state.hang:
                async with state.engine.begin() as conn:
                    await conn.execute(
                        sa.text("INSERT INTO task_starts VALUES (:n, :pid, :token)"),
                        {"n": payload.n, "pid": os.getpid(), "token": ctx.lease.processing_token},
                    )
                await asyncio.Event().wait()
            try:
                async with state.engine.begin() as conn:
                    await conn.execute(
                        sa.text("INSERT INTO task_executions VALUES (:n, :lane, :pid, :attempt)"),
                        {"n": payload.n, "lane": lane, "pid": os.getpid(), "attempt": ctx.attempt},
                    )
            except sa.exc.IntegrityError:
                state.duplicates += 1
        finally:
            state.running[lane] -= 1

    return run


def build_registry() -> TaskRegistry[State, Kind, Lane]:
    registry: TaskRegistry[State, Kind, Lane] = TaskRegistry(kind=Kind, lane=Lane, state=State)
    for kind in Kind:
        registry.register(TaskSpec(kind, Work, None, _body(kind)))
        registry.lane(LANE_OF[kind], [kind])
    return registry.validate()


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def main(url: str, mode: str, lease_ttl: float) -> None:
    # Durability is irrelevant here; without it the test measures fsync, not the store.
    engine = create_async_engine(
        url,
        pool_size=16,
        max_overflow=4,
        connect_args={"server_settings": {"synchronous_commit": "off"}},
    )
    store = BackgroundTaskDbStore(engine)
    token = CancellationToken()
    state = State(engine=engine, hang=mode == "hang")
    config = ClaimedTaskExecutionConfig(
        state=state,
        registry=build_registry(),
        lease_ttl=timedelta(seconds=lease_ttl),
        shutdown_token=token,
        shutdown_grace=timedelta(seconds=2),
    )
    poll = DispatchPollConfig(
        base_interval=timedelta(milliseconds=50), max_interval=timedelta(milliseconds=250)
    )
    worker = TaskWorker(
        store,
        lanes=[TaskLaneConfig(lane, limit) for lane, limit in LIMITS.items()],
        execution=config,
        poll=poll,
    )
    listener = BackgroundTaskNotificationListener(
        engine, store.notify_channel, lambda _lane: worker.wake()
    )
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.TaskGroup() as group:
            group.create_task(listener.run(token), name="task-listener")
            group.create_task(worker.run(token), name="worker")
            await listener.wait_connected()
            _say("ready")
            await loop.run_in_executor(None, sys.stdin.readline)
            token.cancel()
    finally:
        await engine.dispose()
    summary = {"max_running": dict(state.max_running), "duplicates": state.duplicates}
    _say(json.dumps(summary))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], float(sys.argv[3])))
