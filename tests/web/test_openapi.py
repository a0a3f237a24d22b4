"""/api/openapi.json: an OpenAPI 3.1 document whose paths match the served routes."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from jsonschema import Draft202012Validator  # type: ignore[import-untyped]
from starlette.routing import Route

from aster_forge.runtime import RuntimeComponentKind, RuntimeComponentRegistry
from aster_forge.tasks import (
    ClaimedTaskOutcome,
    DispatchStatsRecorder,
    IntervalSchedule,
    NewTask,
    TaskDependency,
)
from aster_forge.testing import InMemoryRuntimeLeaseStore, InMemoryScheduledTaskStore, ManualClock
from aster_forge.web import AdminSources, admin_app
from aster_forge.web._openapi import openapi_document

from ._stores import AdminStore, backend_fixture, database_url_fixture, store_fixture  # noqa: F401
from ._support import AUTH, TOKEN, client, healthy_registry, seed_tasks


def refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [r for value in node.values() for r in refs(value)]
    if isinstance(node, list):
        return [r for value in node for r in refs(value)]
    return []


async def test_served_document_is_openapi_3_1_and_covers_every_route() -> None:
    app = admin_app(AdminSources(), dashboard=False)
    async with client(app) as http:
        document = (await http.get("/api/openapi.json")).json()
    assert document["openapi"] == "3.1.0"
    assert document["info"]["title"] == "aster-forge admin API"
    served = {
        (re.sub(r"\{(\w+):int\}", r"{\1}", route.path), method.lower())
        for route in app.routes
        if isinstance(route, Route)
        for method in route.methods or ()
        if method != "HEAD"
    }
    documented = {(path, method) for path, item in document["paths"].items() for method in item}
    assert documented == served
    for item in document["paths"].values():
        for operation in item.values():
            assert "200" in operation["responses"] and "401" in operation["responses"]
            path_params = [p for p in operation.get("parameters", []) if p["in"] == "path"]
            assert all(p["required"] is True for p in path_params)
    schemas = document["components"]["schemas"]
    for ref in refs(document):
        assert ref.startswith("#/components/schemas/")
        assert ref.rsplit("/", 1)[1] in schemas


async def test_security_scheme_only_with_a_token() -> None:
    async with client(admin_app(AdminSources(), admin_token=TOKEN)) as http:
        document = (await http.get("/api/openapi.json", headers=AUTH)).json()
    assert document["security"] == [{"bearer": []}]
    assert document["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    assert "security" not in openapi_document("x", auth=False)


def test_documents_do_not_share_mutable_state() -> None:
    first = openapi_document("a", auth=True)
    first["components"]["schemas"]["Task"]["properties"].clear()
    assert openapi_document("a", auth=False)["components"]["schemas"]["Task"]["properties"]


def test_validates_with_openapi_spec_validator() -> None:
    validator = pytest.importorskip("openapi_spec_validator")
    validator.validate(openapi_document("aster-forge", auth=True))
    validator.validate(openapi_document("aster-forge", auth=False))


async def test_every_answer_matches_its_documented_schema(store: AdminStore) -> None:
    # The response schemas are generated from models; this pins the serializers to them.
    ids = await seed_tasks(store)
    steps = await store.enqueue_workflow(
        [NewTask("fetch", "flow"), NewTask("join", "flow")], [TaskDependency(task=1, on=0)]
    )
    join = steps[1].task_id
    clock = ManualClock(datetime(2030, 1, 1, tzinfo=UTC))
    scheduled = InMemoryScheduledTaskStore(clock)
    await scheduled.ensure_scheduled_task(
        "reports", "nightly", IntervalSchedule(every=timedelta(hours=1))
    )
    leases = InMemoryRuntimeLeaseStore(clock)
    await leases.try_acquire("demo.singletons", "instance-a", timedelta(seconds=10))
    components = RuntimeComponentRegistry()
    components.component("database", RuntimeComponentKind.DATABASE)
    components.component("tasks", RuntimeComponentKind.TASKS, depends_on=["database"])
    stats = DispatchStatsRecorder(["media"])
    stats.record_outcome("media", ClaimedTaskOutcome.SUCCEEDED)
    sources = AdminSources(
        task_store=store,
        scheduled_store=scheduled,
        leases=leases,
        components=components,
        health=healthy_registry(),
        dispatch_stats=stats,
        lane_limits={"media": 2},
        lanes=["media", "maintenance"],
    )
    app = admin_app(sources, dashboard=False)
    calls = [
        ("get", "/api/info", "/api/info"),
        ("get", "/api/tasks?limit=2", "/api/tasks"),
        ("get", "/api/tasks/counts", "/api/tasks/counts"),
        ("get", "/api/overview", "/api/overview"),
        ("get", f"/api/tasks/{ids['failed']}", "/api/tasks/{task_id}"),
        ("post", f"/api/tasks/{ids['failed']}/retry", "/api/tasks/{task_id}/retry"),
        ("post", f"/api/tasks/{ids['running']}/cancel", "/api/tasks/{task_id}/cancel"),
        ("post", "/api/tasks/bulk/cancel", "/api/tasks/bulk/{action}"),
        ("get", f"/api/tasks/{join}/workflow", "/api/tasks/{task_id}/workflow"),
        ("post", f"/api/tasks/{join}/workflow/cancel", "/api/tasks/{task_id}/workflow/cancel"),
        ("get", "/api/lanes", "/api/lanes"),
        ("post", "/api/lanes/media/pause", "/api/lanes/{lane}/pause"),
        ("get", "/api/scheduled", "/api/scheduled"),
        ("get", "/api/leases", "/api/leases"),
        ("get", "/api/components", "/api/components"),
        ("get", "/api/reports", "/api/reports"),
        ("get", "/api/health", "/api/health"),
    ]
    async with client(app) as http:
        document = (await http.get("/api/openapi.json")).json()
        for method, url, path in calls:
            answer = await http.request(method.upper(), url, json={} if method == "post" else None)
            assert answer.status_code == 200, (url, answer.text)
            schema = document["paths"][path][method]["responses"]["200"]["content"][
                "application/json"
            ]["schema"]
            # The document is the root, so the answer's $refs resolve into its components.
            validator = Draft202012Validator(
                {**document, **schema}, format_checker=Draft202012Validator.FORMAT_CHECKER
            )
            errors = [error.message for error in validator.iter_errors(answer.json())]
            assert errors == [], (url, errors)
