"""The relay: one module for the web process (``uvicorn relay.app:app``) and the
workers (``aster-forge worker relay.app:forge``), which declare the same forge."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx
import sqlalchemy as sa
from fastapi import FastAPI
from pydantic import BaseModel, Field
from sqlalchemy.ext.asyncio import create_async_engine

from aster_forge import Forge, ForgeWorkerSettings, TaskExecutionContext

DATABASE_URL = os.environ["RELAY_DATABASE_URL"]  # postgresql+asyncpg://...

# A 5 s lease (renewed every third while a body runs, however long it takes) brings a
# killed worker's deliveries back within seconds instead of the default 30.
forge = Forge(
    DATABASE_URL, name="relay", settings=ForgeWorkerSettings(task_lease_ttl=timedelta(seconds=5))
)
events = sa.Table(
    "events",
    forge.metadata,
    sa.Column("id", sa.String(200), primary_key=True),
    sa.Column("type", sa.String(100), nullable=False),
    sa.Column("data", sa.JSON, nullable=False),
    sa.Column("received_at", sa.DateTime(timezone=True), server_default=sa.func.now()),
)
# No unique key on event_id: a delivery recorded twice would show as a second row.
deliveries = sa.Table(
    "deliveries",
    forge.metadata,
    sa.Column("id", sa.BigInteger, primary_key=True),
    sa.Column("event_id", sa.String(200), nullable=False),
    sa.Column("task_id", sa.BigInteger, nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("status_code", sa.Integer, nullable=False),
    sa.Column("delivered_at", sa.DateTime(timezone=True), server_default=sa.func.now()),
)


class Event(BaseModel):
    id: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.:-]+$")
    type: str = Field(min_length=1, max_length=100)
    data: dict[str, Any] = Field(default_factory=dict)


class Accepted(BaseModel):
    task_id: int
    duplicate: bool  # the event id was seen before: its first delivery stands


@dataclass(frozen=True)
class Outbound:
    http: httpx.AsyncClient
    target: str  # the subscriber's URL


@forge.resources
async def outbound() -> AsyncIterator[Outbound]:  # opened by the workers, not the web process
    async with httpx.AsyncClient(timeout=10) as client:
        yield Outbound(client, os.environ["RELAY_TARGET_URL"])


@forge.task(max_attempts=10)
async def deliver(ctx: TaskExecutionContext, event: Event, out: Outbound) -> int:
    # Over HTTP at least once (a killed worker's delivery is sent again): the subscriber
    # drops repeats by the Idempotency-Key. An error answer or a timeout is retried.
    sent = await out.http.post(
        out.target, json=event.model_dump(), headers={"Idempotency-Key": event.id}
    )
    sent.raise_for_status()
    # Recorded exactly once: committed with the task's success, and only if this worker
    # still holds the task.
    async with ctx.transaction() as conn:
        recorded = await conn.execute(
            deliveries.insert()
            .values(
                event_id=event.id,
                task_id=ctx.task_id,
                attempt=ctx.attempt,
                status_code=sent.status_code,
            )
            .returning(deliveries.c.id)
        )
    return int(recorded.scalar_one())


engine = create_async_engine(DATABASE_URL)
app = FastAPI()  # no lifespan=: the workers run as `aster-forge worker relay.app:forge`
app.mount("/ops", forge.asgi_app(admin_token=os.environ.get("RELAY_ADMIN_TOKEN")))


@app.post("/events", status_code=202)
async def receive(event: Event) -> Accepted:
    # The event and its delivery commit together; a sender's retry of the same event id
    # finds the first delivery task and writes nothing.
    async with engine.begin() as conn:
        made = await deliver.enqueue(event, dedupe_key=f"event:{event.id}", connection=conn)
        if made.created:
            await conn.execute(
                events.insert().values(id=event.id, type=event.type, data=event.data)
            )
    return Accepted(task_id=made.task_id, duplicate=not made.created)
