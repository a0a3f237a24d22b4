"""Suite 6, bad input at the edges of a running system: stored rows and the admin API.

Rows whose payload no longer decodes (the schema changed under them) fail permanently
with a message naming the field, and the worker keeps going. The admin API answers a
4xx with a JSON error for any query string or path it is given, never a 500, and never
changes a row when it refuses.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy.ext.asyncio import AsyncEngine

from aster_forge import TaskStatus
from aster_forge.db import BackgroundTaskDbStore, create_background_tasks_table
from aster_forge.runtime import CancellationToken
from aster_forge.tasks import DispatchPollConfig, NewTask, TaskWorker
from aster_forge.tasks._records import TaskFailureReason
from aster_forge.testing import InMemoryTaskStore
from aster_forge.web import AdminSources, admin_app

from ._fuzz import fuzz
from ._product import LANES, ChaosState, Kind, Lane, execution_config, new_task
from .report import ScenarioResult, record

FAST_POLL = DispatchPollConfig(
    base_interval=timedelta(milliseconds=20), max_interval=timedelta(milliseconds=50)
)


async def _wait_terminal(store: BackgroundTaskDbStore, ids: list[int], seconds: float) -> None:
    deadline = asyncio.get_running_loop().time() + seconds
    while True:
        rows = [await store.get_task(task_id) for task_id in ids]
        if all(row is not None and row.status.is_terminal for row in rows):
            return
        if asyncio.get_running_loop().time() > deadline:
            pending = [row.id for row in rows if row is not None and not row.status.is_terminal]
            raise AssertionError(f"tasks still not finished: {pending}")
        await asyncio.sleep(0.05)


async def test_rows_whose_payload_no_longer_decodes_fail_permanently(
    engine: AsyncEngine, backend: str
) -> None:
    await create_background_tasks_table(engine)
    store = BackgroundTaskDbStore(engine)
    good = [new_task(Kind.NOOP, seq) for seq in range(12)]
    good += [new_task(Kind.REPORT, 100 + seq) for seq in range(4)]
    # Rows written by an older version of the product: the schema changed under them.
    bad = {
        "wrong type": NewTask(kind=Kind.NOOP, lane=Lane.FAST, payload_json='{"seq": "seven"}'),
        "missing field": NewTask(kind=Kind.WORK, lane=Lane.FAST, payload_json='{"sleep_ms": 1}'),
        "not an object": NewTask(kind=Kind.NOOP, lane=Lane.FAST, payload_json="[1, 2]"),
        "unknown kind": NewTask(kind="chaos-removed", lane=Lane.FAST, payload_json="{}"),
        "bad steps": NewTask(
            kind=Kind.REPORT, lane=Lane.REPORTS, payload_json='{"seq": 1}', steps_json='{"x": 1}'
        ),
    }
    results = await store.enqueue_many([*good, *bad.values()])
    ids = [r.record.id for r in results]
    good_ids, bad_ids = ids[: len(good)], dict(zip(bad, ids[len(good) :], strict=True))
    # A broken row sorted first in its lane must not block the good ones behind it.
    state = ChaosState()
    token = CancellationToken()
    dispatcher = TaskWorker(store, lanes=LANES, execution=execution_config(state), poll=FAST_POLL)
    worker = asyncio.create_task(dispatcher.run(token), name="chaos:bad-rows")
    try:
        await _wait_terminal(store, ids, 30)
    finally:
        token.cancel()
        await worker
    for task_id in good_ids:
        row = await store.get_task(task_id)
        assert row is not None and row.status is TaskStatus.SUCCEEDED
    expectations = {
        "wrong type": "'seq'",
        "missing field": "'seq'",
        "not an object": "<root>",
        "unknown kind": "chaos-removed",
        "bad steps": "steps",
    }
    for name, task_id in bad_ids.items():
        row = await store.get_task(task_id)
        assert row is not None
        assert row.status is TaskStatus.FAILED, (name, row)
        assert row.attempt == 1, f"{name}: a permanent failure is not retried"
        assert row.failure_reason is TaskFailureReason.PRODUCT_ERROR
        assert row.last_error is not None and expectations[name] in row.last_error, (
            name,
            row.last_error,
        )
    assert sorted(state.done) == sorted([*range(12), *range(100, 104)])
    record(
        ScenarioResult(
            scenario=f"bad input: undecodable rows ({backend})",
            tasks=len(ids),
            faults=f"{len(bad)} rows with a changed schema",
            lost=0,
            duplicated=sum(1 for n in state.done.values() if n > 1),
            stuck=0,
            result="pass",
        )
    )


# -- the admin API ------------------------------------------------------------------------------

TOKEN = "chaos-admin-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}

query_values = st.one_of(
    st.text(max_size=30),
    st.integers(-(2**63), 2**63 - 1).map(str),
    st.sampled_from(["", "0", "-1", "1e3", "pending", "running", "NaN", "9" * 5000, "\x00"]),
)
query_strings = st.dictionaries(
    st.sampled_from(["status", "limit", "kind", "lane", "before_id", "force", "namespace", "x"]),
    query_values,
    max_size=5,
)
task_ids = st.one_of(
    st.integers(0, 2**63 - 1).map(str),
    st.integers(2**63, 2**80).map(str),
    st.sampled_from(["1", "-1", "abc", "1.5", "%00", "..%2F..%2Fetc"]),
)


@pytest.fixture
async def admin_client(engine: AsyncEngine) -> AsyncIterator[tuple[httpx.AsyncClient, Any]]:
    await create_background_tasks_table(engine)
    store = BackgroundTaskDbStore(engine)
    await store.enqueue_many([new_task(Kind.NOOP, seq) for seq in range(3)])
    app = admin_app(AdminSources(task_store=store, lanes=list(Lane)), admin_token=TOKEN)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
        yield client, store


async def _snapshot(store: BackgroundTaskDbStore) -> list[tuple[Any, ...]]:
    page = await store.list_tasks(limit=100)
    return [(r.id, r.status, r.attempt, r.processing_token) for r in page.items]


def _check_error_body(response: httpx.Response) -> None:
    assert response.status_code < 500, (response.status_code, response.text)
    if response.status_code in (400, 401, 409):
        body = response.json()
        assert isinstance(body, dict) and "error" in body


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
@fuzz()
@given(query=query_strings, task_id=task_ids)
async def test_admin_api_answers_4xx_for_any_query_or_path(
    admin_client: tuple[httpx.AsyncClient, Any], query: dict[str, str], task_id: str
) -> None:
    client, _ = admin_client
    for path in ("/api/tasks", f"/api/tasks/{task_id}", "/api/lanes", "/api/info"):
        response = await client.get(path, params=query, headers=AUTH)
        _check_error_body(response)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
@fuzz()
@given(query=query_strings, task_id=task_ids, body=st.binary(max_size=200))
async def test_admin_api_mutations_with_junk_never_crash_or_change_rows_without_a_token(
    admin_client: tuple[httpx.AsyncClient, Any], query: dict[str, str], task_id: str, body: bytes
) -> None:
    client, store = admin_client
    for action in ("retry", "cancel"):
        path = f"/api/tasks/{task_id}/{action}"
        before = await _snapshot(store)
        refused = await client.post(path, params=query, content=body)
        assert refused.status_code in (401, 404), refused.text
        wrong = await client.post(
            path, params=query, content=body, headers={"Authorization": "Bearer x"}
        )
        assert wrong.status_code in (401, 404), wrong.text
        assert await _snapshot(store) == before
        allowed = await client.post(path, params=query, content=body, headers=AUTH)
        assert allowed.status_code < 500, (path, allowed.text)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
async def test_admin_api_out_of_range_ids_are_client_errors(
    admin_client: tuple[httpx.AsyncClient, Any],
) -> None:
    client, _ = admin_client
    for raw in (str(2**70), str(2**63), "0", "-1", "abc", "1.5", "%C2%B2"):
        for method, path in (
            ("GET", f"/api/tasks/{raw}"),
            ("POST", f"/api/tasks/{raw}/retry"),
            ("POST", f"/api/tasks/{raw}/cancel"),
        ):
            response = await client.request(method, path, headers=AUTH)
            assert response.status_code == 404, (path, response.text)
            assert response.json()["error"] == "task_not_found", (path, response.text)
        listed = await client.get("/api/tasks", params={"before_id": raw}, headers=AUTH)
        assert listed.status_code == 400, (raw, listed.text)
        assert listed.json()["error"] == "bad_request"
    largest = str(2**63 - 1)
    assert (await client.get(f"/api/tasks/{largest}", headers=AUTH)).status_code == 404
    page = await client.get("/api/tasks", params={"before_id": largest}, headers=AUTH)
    assert page.status_code == 200 and len(page.json()["items"]) == 3


async def test_in_memory_store_admin_api_rejects_junk_filters() -> None:
    store = InMemoryTaskStore()
    await store.enqueue(new_task(Kind.NOOP, 1))
    app = admin_app(AdminSources(task_store=store))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
        for params in ({"status": "exploded"}, {"limit": "0"}, {"limit": "x"}, {"kind": " a"}):
            response = await client.get("/api/tasks", params=params)
            assert response.status_code == 400, (params, response.text)
            assert json.loads(response.text)["error"] == "bad_request"
        response = await client.post(
            "/api/tasks/1/cancel", headers={"Origin": "http://evil.example"}
        )
        assert response.status_code == 403
        row = await store.get_task(1)
        assert row is not None and row.status is TaskStatus.PENDING
