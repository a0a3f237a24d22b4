"""Helpers for the HTTP tests: an httpx client on an ASGI app, stores with sample rows."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta

import httpx
from starlette.types import ASGIApp

from aster_forge import BackgroundTaskRecord
from aster_forge.runtime import (
    HealthCheckOptions,
    HealthCheckRegistry,
    HealthCheckScopes,
    HealthComponentReport,
)
from aster_forge.tasks import BackgroundTaskStore, NewTask, TaskLease
from aster_forge.tasks._steps import TaskStepInfo, TaskStepStatus, serialize_task_steps_json

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
LEASE_TTL = timedelta(seconds=30)


@asynccontextmanager
async def client(app: ASGIApp) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client talking to ``app`` in-process (same event loop)."""
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
        yield c


def three_steps(done: int) -> str:
    """A fetch -> transform -> publish step list with ``done`` steps succeeded."""
    keys = ["fetch", "transform", "publish"]
    steps = []
    for index, key in enumerate(keys):
        if index < done:
            status = TaskStepStatus.SUCCEEDED
        elif index == done:
            status = TaskStepStatus.ACTIVE
        else:
            status = TaskStepStatus.PENDING
        steps.append(TaskStepInfo(key=key, title=key.title(), status=status))
    return serialize_task_steps_json(steps)


async def claim_one(
    store: BackgroundTaskStore, lane: str
) -> tuple[BackgroundTaskRecord, TaskLease]:
    """Claim exactly one due task of ``lane`` and return it with its lease."""
    claimed = await store.claim_due_for_lane(lane, 1, "test-worker", LEASE_TTL)
    assert len(claimed) == 1
    record = claimed[0]
    assert record.processing_token is not None and record.lease_expires_at is not None
    return record, TaskLease(record.id, record.processing_token, record.lease_expires_at)


SEEDED_TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/srv/app/publish.py", line 40, in publish\n'
    "    raise PublishError(reply.status)\n"
    "PublishError: publish failed: 500\n"
)
"""The traceback stored with each seeded failure."""


async def seed_tasks(store: BackgroundTaskStore) -> dict[str, int]:
    """Create one task per interesting status; return their ids by name.

    ``pending`` (media), ``running`` (media, claimed), ``succeeded`` (maintenance),
    ``failed`` (maintenance, manual retry allowed), ``failed_final`` (maintenance,
    manual retry not allowed).
    """
    ids: dict[str, int] = {}
    for name, lane in [
        ("succeeded", "maintenance"),
        ("failed", "maintenance"),
        ("failed_final", "maintenance"),
    ]:
        result = await store.enqueue(
            NewTask(kind=f"{name}_kind", lane=lane, steps_json=three_steps(0), max_attempts=1)
        )
        ids[name] = result.record.id
        record, lease = await claim_one(store, lane)
        assert record.id == result.record.id
        if name == "succeeded":
            assert await store.mark_task_succeeded(lease, '{"ok": true}', three_steps(3))
        else:
            assert await store.mark_task_failed(
                lease,
                error="publish failed: 500",
                steps_json=three_steps(2),
                manual_retry=name == "failed",
                traceback=SEEDED_TRACEBACK,
            )
    ids["running"] = (
        await store.enqueue(NewTask(kind="render", lane="media", steps_json=three_steps(1)))
    ).record.id
    record, _ = await claim_one(store, "media")
    assert record.id == ids["running"]
    ids["pending"] = (
        await store.enqueue(NewTask(kind="render", lane="media", payload_json='{"n": 1}'))
    ).record.id
    return ids


def healthy_registry() -> HealthCheckRegistry:
    """A health registry with one healthy readiness/diagnostics check, ``database``."""
    registry = HealthCheckRegistry()

    async def database() -> HealthComponentReport:
        return HealthComponentReport.healthy("database", "ping ok")

    registry.register_with_options(
        "database",
        HealthCheckOptions.required(timedelta(seconds=1)).with_scopes(
            HealthCheckScopes.readiness_and_diagnostics()
        ),
        database,
    )
    return registry
