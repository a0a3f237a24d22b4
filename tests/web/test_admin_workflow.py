"""The admin API's workflow view and cancel, on memory, SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

import pytest

from aster_forge import TaskStatus
from aster_forge.tasks import NewTask, TaskDependency
from aster_forge.tasks.errors import TaskInvalidValueError
from aster_forge.web import AdminSources, admin_app

from ._stores import AdminStore, backend_fixture, database_url_fixture, store_fixture  # noqa: F401
from ._support import claim_one, client


async def _diamond(store: AdminStore) -> list[int]:
    """fetch-a, fetch-b; join after both; report after join (run anyway) and fetch-a.

    fetch-a succeeds, fetch-b fails: join is cancelled, report is made due.
    """
    written = await store.enqueue_workflow(
        [
            NewTask("fetch", "wf", max_attempts=1),
            NewTask("fetch", "wf", max_attempts=1),
            NewTask("join", "wf"),
            NewTask("report", "wf"),
        ],
        [
            TaskDependency(task=2, on=0),
            TaskDependency(task=2, on=1),
            TaskDependency(task=3, on=2, run_anyway=True),
            TaskDependency(task=3, on=0),
        ],
    )
    ids = [result.task_id for result in written]
    _, lease = await claim_one(store, "wf")
    assert lease.task_id == ids[0]
    assert await store.mark_task_succeeded(lease, "1", None)
    _, lease = await claim_one(store, "wf")
    assert lease.task_id == ids[1]
    assert await store.mark_task_failed(lease, error="boom", steps_json=None, manual_retry=True)
    await store.settle_dependencies()
    return ids


async def test_workflow_shows_nodes_states_and_edges(store: AdminStore) -> None:
    lone = (await store.enqueue(NewTask("lone", "elsewhere"))).task_id
    a, b, join, report = await _diamond(store)
    async with client(admin_app(AdminSources(task_store=store))) as http:
        answer = await http.get(f"/api/tasks/{join}/workflow")
        single = (await http.get(f"/api/tasks/{lone}/workflow")).json()
        missing = await http.get("/api/tasks/999999/workflow")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["task_id"] == join
    assert [(n["id"], n["kind"], n["status"], n["waiting"]) for n in body["nodes"]] == [
        (a, "fetch", "succeeded", False),
        (b, "fetch", "failed", False),
        (join, "join", "cancelled", False),
        (report, "report", "pending", False),
    ]
    assert body["edges"] == [
        {"from": a, "to": join, "run_anyway": False},
        {"from": a, "to": report, "run_anyway": False},
        {"from": b, "to": join, "run_anyway": False},
        {"from": join, "to": report, "run_anyway": True},
    ]
    assert body["dependencies"] == [a, b] and body["dependents"] == [report]
    assert body["truncated"] is False and body["limit"] == 500
    assert [n["id"] for n in single["nodes"]] == [lone] and single["edges"] == []
    assert missing.status_code == 404 and missing.json()["error"] == "task_not_found"


async def test_a_waiting_step_reads_as_waiting(store: AdminStore) -> None:
    first, second = await store.enqueue_workflow(
        [NewTask("a", "wf"), NewTask("b", "wf")], [TaskDependency(task=1, on=0)]
    )
    graph = await store.workflow_graph(second.task_id)
    assert graph is not None
    assert [(n.id, n.status, n.waiting) for n in graph.nodes] == [
        (first.task_id, TaskStatus.PENDING, False),
        (second.task_id, TaskStatus.PENDING, True),
    ]


async def test_the_graph_is_bounded_nearest_first(store: AdminStore) -> None:
    written = await store.enqueue_workflow(
        [NewTask("member", "wf") for _ in range(6)] + [NewTask("join", "wf")],
        [TaskDependency(task=6, on=index) for index in range(6)],
    )
    ids = [result.task_id for result in written]
    graph = await store.workflow_graph(ids[6], limit=3)
    assert graph is not None and graph.truncated
    assert [node.id for node in graph.nodes] == [ids[0], ids[1], ids[6]]
    assert [(e.depends_on, e.task_id) for e in graph.edges] == [(ids[0], ids[6]), (ids[1], ids[6])]
    whole = await store.workflow_graph(ids[0])
    assert whole is not None and not whole.truncated and len(whole.nodes) == 7
    assert await store.workflow_graph(10**9) is None
    for bad in (0, 10_001):
        with pytest.raises(TaskInvalidValueError, match="workflow limit"):
            await store.workflow_graph(ids[0], limit=bad)


async def test_cancel_workflow_cancels_every_unfinished_node(store: AdminStore) -> None:
    other = (await store.enqueue(NewTask("other", "wf"))).task_id
    written = await store.enqueue_workflow(
        [NewTask("head", "wf"), NewTask("step", "wf"), NewTask("tail", "wf")],
        [TaskDependency(task=1, on=0), TaskDependency(task=2, on=1)],
    )
    head, step, tail = (result.task_id for result in written)
    _, lease = await claim_one(store, "wf")
    assert lease.task_id == other
    _, lease = await claim_one(store, "wf")
    assert lease.task_id == head
    async with client(admin_app(AdminSources(task_store=store))) as http:
        answer = await http.post(f"/api/tasks/{tail}/workflow/cancel")
    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        "task_id": tail,
        "cancelled": [step, tail],
        "cancel_requested": [head],
        "truncated": False,
    }
    statuses = {}
    for task_id in (head, step, tail, other):
        record = await store.get_task(task_id)
        assert record is not None
        statuses[task_id] = (record.status, record.cancel_requested)
    assert statuses == {
        head: (TaskStatus.RUNNING, True),
        step: (TaskStatus.CANCELLED, False),
        tail: (TaskStatus.CANCELLED, False),
        other: (TaskStatus.RUNNING, False),
    }


async def _finish(store: AdminStore, lane: str, *, fail: bool = False) -> int:
    _, lease = await claim_one(store, lane)
    if fail:
        assert await store.mark_task_failed(lease, error="boom", steps_json=None, manual_retry=True)
    else:
        assert await store.mark_task_succeeded(lease, "1", None)
    await store.settle_dependencies()
    return lease.task_id


async def _states(store: AdminStore, task_id: int) -> dict[int, str]:
    graph = await store.workflow_graph(task_id)
    assert graph is not None
    return {n.id: "waiting" if n.waiting else n.status.value for n in graph.nodes}


@pytest.mark.parametrize("bulk", [False, True], ids=["one", "bulk"])
async def test_retrying_a_failed_step_brings_back_what_its_failure_cancelled(
    store: AdminStore, bulk: bool
) -> None:
    written = await store.enqueue_workflow(
        [
            NewTask("a", "wf", max_attempts=1),
            NewTask("b", "wf"),
            NewTask("join", "wf"),  # after a and b
            NewTask("tail", "wf"),  # after join
            NewTask("c", "slow"),
            NewTask("callback", "cb"),  # after a (anyway) and c
            NewTask("f", "f", max_attempts=1),
            NewTask("x", "x"),  # after a and f
        ],
        [
            TaskDependency(task=2, on=0),
            TaskDependency(task=2, on=1),
            TaskDependency(task=3, on=2),
            TaskDependency(task=5, on=0, run_anyway=True),
            TaskDependency(task=5, on=4),
            TaskDependency(task=7, on=0),
            TaskDependency(task=7, on=6),
        ],
    )
    a, b, join, tail, c, callback, f, x = (result.task_id for result in written)
    assert await _finish(store, "wf", fail=True) == a
    assert await _finish(store, "wf") == b
    assert await _finish(store, "f", fail=True) == f
    assert await _states(store, a) == {
        a: "failed",
        b: "succeeded",
        join: "cancelled",
        tail: "cancelled",
        c: "pending",
        callback: "waiting",
        f: "failed",
        x: "cancelled",
    }

    async with client(admin_app(AdminSources(task_store=store))) as http:
        if bulk:
            answer = await http.post("/api/tasks/bulk/retry", json={"id": a})
            assert answer.status_code == 200 and answer.json()["changed"] == [a], answer.text
        else:
            answer = await http.post(f"/api/tasks/{a}/retry")
            assert answer.status_code == 200 and answer.json()["status"] == "pending"
    after_retry = await _states(store, a)
    # join and tail wait again; x stays cancelled (f still failed); finished b never reruns.
    assert after_retry == {
        a: "pending",
        b: "succeeded",
        join: "waiting",
        tail: "waiting",
        c: "pending",
        callback: "waiting",
        f: "failed",
        x: "cancelled",
    }
    joined = await store.get_task(join)
    assert joined is not None and joined.last_error is None and joined.finished_at is None

    # The callback counted a's failure already: it now waits for a's retry as well.
    assert await _finish(store, "slow") == c
    assert (await _states(store, a))[callback] == "waiting"
    assert await _finish(store, "wf") == a
    assert await _finish(store, "wf") == join
    assert await _finish(store, "cb") == callback
    assert await _finish(store, "wf") == tail
    final = await _states(store, a)
    assert final == {**final, join: "succeeded", tail: "succeeded", callback: "succeeded"}
    assert final[x] == "cancelled"
