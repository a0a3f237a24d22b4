"""Schemathesis against ``/api/openapi.json``: the admin API answers what its document says.

A live server (uvicorn, SQLite task store, scheduled catalog, components, health) is
fuzzed from the document: every documented parameter and limit is exercised, and
every answer is checked against the documented status codes and response schemas.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from sqlalchemy.ext.asyncio import create_async_engine
from starlette.types import ASGIApp

from aster_forge.db import BackgroundTaskDbStore, create_background_tasks_table
from aster_forge.runtime import (
    RuntimeComponentKind,
    RuntimeComponentRegistry,
)
from aster_forge.tasks import IntervalSchedule
from aster_forge.testing import InMemoryScheduledTaskStore
from aster_forge.web import AdminSources, admin_app
from tests.web._browser import serve
from tests.web._support import healthy_registry, seed_tasks


@pytest.fixture(scope="module")
def api_schema(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    path: Path = tmp_path_factory.mktemp("openapi") / "tasks.db"
    holder: dict[str, Any] = {}

    def make_app() -> ASGIApp:
        engine = create_async_engine(f"sqlite+aiosqlite:///{path}")
        holder["engine"] = engine
        holder["store"] = store = BackgroundTaskDbStore(engine)
        holder["scheduled"] = scheduled = InMemoryScheduledTaskStore()
        components = RuntimeComponentRegistry()
        components.component("database", RuntimeComponentKind.DATABASE)
        components.component("tasks", RuntimeComponentKind.TASKS, depends_on=["database"])
        return admin_app(
            AdminSources(
                task_store=store,
                scheduled_store=scheduled,
                components=components,
                health=healthy_registry(),
                lanes=["media", "maintenance"],
            )
        )

    with serve(make_app) as (base, loop):

        async def prepare() -> None:
            await create_background_tasks_table(holder["engine"])
            await seed_tasks(holder["store"])
            await holder["scheduled"].ensure_scheduled_task(
                "reports", "nightly", IntervalSchedule(every=timedelta(hours=1))
            )

        asyncio.run_coroutine_threadsafe(prepare(), loop).result(30)
        loaded = schemathesis.openapi.from_url(base + "/api/openapi.json")
        # Both valid requests (must be accepted) and invalid ones (must be refused 4xx).
        loaded.config.generation.update(modes=list(schemathesis.GenerationMode))
        yield loaded
        asyncio.run_coroutine_threadsafe(holder["engine"].dispose(), loop).result(30)


schema = schemathesis.pytest.from_fixture("api_schema")


@pytest.mark.slow
@schema.parametrize()
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
def test_admin_api_matches_its_openapi_document(case: Any) -> None:
    case.call_and_validate()
