"""Forge declarations, their errors, body signatures and drain() on the in-memory forge."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from aster_forge import (
    ClassifiedTaskError,
    Forge,
    ForgeDeclarationError,
    ForgePayloadError,
    ForgeStateError,
    TaskExecutionContext,
    TaskRetryClass,
    TaskStatus,
)
from aster_forge.runtime.errors import AsterRuntimeStartupError
from aster_forge.tasks import ClaimedTaskOutcome, CronSchedule, IntervalSchedule
from aster_forge.testing import InMemoryTaskStore

from ._bodies import Shop, Thumbnail, ThumbnailResult


def _memory() -> Forge:
    return Forge("memory://")


async def _noop(payload: Thumbnail) -> None:
    return None


def test_a_lane_declared_twice_is_an_error() -> None:
    forge = _memory()
    assert forge.lane("media", concurrency=4) == "media"
    with pytest.raises(ForgeDeclarationError, match="lane 'media' is declared twice"):
        forge.lane("media", concurrency=2)
    with pytest.raises(ForgeDeclarationError, match="concurrency"):
        forge.lane("cpu", concurrency=0)


@pytest.mark.parametrize("bad", [0, -2, True, 1.5, "2"])
def test_a_bad_cluster_limit_is_an_error(bad: object) -> None:
    forge = _memory()
    with pytest.raises(ForgeDeclarationError, match="lane 'cpu': cluster_limit must be None or"):
        forge.lane("cpu", concurrency=2, cluster_limit=bad)  # type: ignore[arg-type]
    forge.lane("io", concurrency=8, cluster_limit=3)
    forge.lane("plain", concurrency=8)
    assert forge.lane_cluster_limits == {"io": 3}


@pytest.mark.parametrize("bad", [0, -2, True, 1.5, "2"])
def test_a_bad_partition_limit_is_an_error(bad: object) -> None:
    forge = _memory()
    with pytest.raises(ForgeDeclarationError, match="lane 'cpu': partition_limit must be None or"):
        forge.lane("cpu", concurrency=2, partition_limit=bad)  # type: ignore[arg-type]
    forge.lane("tenants", concurrency=8, partition_limit=1)
    forge.lane("plain", concurrency=8)
    assert forge.lane_partition_limits == {"tenants": 1}


@pytest.mark.parametrize(
    "bad",
    [5, (0, timedelta(seconds=1)), (True, timedelta(seconds=1)), (2, 1.0), (2, timedelta(0))],
)
def test_a_bad_rate_limit_is_an_error(bad: object) -> None:
    forge = _memory()
    with pytest.raises(ForgeDeclarationError, match="lane 'api': rate_limit"):
        forge.lane("api", concurrency=2, rate_limit=bad)  # type: ignore[arg-type]
    assert "api" not in forge.lanes
    forge.lane("metered", concurrency=8, rate_limit=(10, timedelta(minutes=1)))
    forge.lane("plain", concurrency=8)
    assert forge.lane_rate_limits == {"metered": (10, timedelta(minutes=1))}


@pytest.mark.parametrize("bad", [5, (0, timedelta(seconds=1)), (2, timedelta(0))])
def test_a_bad_partition_rate_limit_is_an_error(bad: object) -> None:
    forge = _memory()
    with pytest.raises(ForgeDeclarationError, match="lane 'api': partition_rate_limit"):
        forge.lane("api", concurrency=2, partition_rate_limit=bad)  # type: ignore[arg-type]
    assert "api" not in forge.lanes
    forge.lane("tenants", concurrency=8, partition_rate_limit=(3, timedelta(seconds=1)))
    assert forge.lane_partition_rate_limits == {"tenants": (3, timedelta(seconds=1))}
    assert forge.lane_rate_limits == {}


def test_a_task_name_declared_twice_is_an_error() -> None:
    forge = _memory()
    forge.task(name="thumbnail")(_noop)

    async def renamed(payload: Thumbnail) -> None:
        return None

    with pytest.raises(ForgeDeclarationError, match="task 'thumbnail' is declared twice"):
        forge.task(name="thumbnail")(renamed)


def test_a_task_on_an_undeclared_lane_is_an_error() -> None:
    forge = _memory()
    with pytest.raises(ForgeDeclarationError, match="lane 'media' is not declared"):
        forge.task(lane="media")(_noop)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_attempts": 0}, "max_attempts"),
        ({"timeout": timedelta(0)}, "timeout"),
        ({"steps": [("load", "Load"), ("load", "Again")]}, "step key is declared twice"),
        ({"name": " spaced"}, "task name"),
        ({"steps": [("load", "Load", "extra")]}, r"steps are \(key, title\) pairs"),
    ],
)
def test_bad_task_options_are_errors(options: dict[str, object], message: str) -> None:
    with pytest.raises(ForgeDeclarationError, match=message):
        _memory().task(**options)(_noop)  # type: ignore[call-overload]


def test_body_signatures_the_forge_cannot_read_are_errors() -> None:
    forge = _memory()

    async def untyped(ctx: TaskExecutionContext, payload):  # type: ignore[no-untyped-def]
        return None

    async def keyword(*, payload: Thumbnail) -> None:
        return None

    async def four(ctx: TaskExecutionContext, a: int, b: int, c: int) -> None:
        return None

    async def two_without_ctx(a: int, b: int) -> None:
        return None

    async def three_without_ctx(a: int, b: int, c: Shop) -> None:
        return None

    with pytest.raises(ForgeDeclarationError, match="needs a type annotation"):
        forge.task(untyped)
    with pytest.raises(ForgeDeclarationError, match="positional"):
        forge.task(keyword)
    with pytest.raises(ForgeDeclarationError, match="at most"):
        forge.task(four)
    with pytest.raises(
        ForgeDeclarationError,
        match=r"a body with 2 parameters is \(ctx, payload\), but its first parameter 'a' is "
        r"annotated int; annotate it 'a: TaskExecutionContext'",
    ):
        forge.task(two_without_ctx)
    with pytest.raises(ForgeDeclarationError, match=r"3 parameters is \(ctx, payload, state\)"):
        forge.task(three_without_ctx)
    assert forge.tasks == ()


def test_bodies_that_are_not_functions_or_whose_annotations_do_not_resolve_are_errors() -> None:
    forge = _memory()

    async def unresolvable(payload: NoSuchType) -> None:  # type: ignore[name-defined]  # noqa: F821
        return None

    with pytest.raises(ForgeDeclarationError, match="the body is not callable"):
        forge.task(name="not_a_function")(42)  # type: ignore[arg-type]
    with pytest.raises(ForgeDeclarationError, match="cannot resolve its annotations"):
        forge.task(unresolvable)
    assert forge.tasks == ()


def test_resources_and_health_check_declaration_errors() -> None:
    forge = _memory()
    with pytest.raises(ForgeDeclarationError, match="async generator function"):
        forge.resources(42)  # type: ignore[arg-type]

    @forge.resources
    async def resources() -> AsyncIterator[Shop]:
        yield Shop(prefix="p")

    with pytest.raises(ForgeDeclarationError, match="resources are declared twice"):
        forge.resources(resources)

    async def check(state: object) -> None:
        return None

    with pytest.raises(ForgeDeclarationError, match="timeout must be positive"):
        forge.health_check("cache", timeout=timedelta(0))(check)
    forge.health_check("cache")(check)
    with pytest.raises(ForgeDeclarationError, match="health check 'cache' is declared twice"):
        forge.health_check("cache")(check)
    assert [declared.name for declared in forge.health_checks] == ["cache"]


def test_a_forge_without_tasks_has_no_registry() -> None:
    with pytest.raises(ForgeStateError, match="declares no task"):
        _ = _memory().registry


def test_periodic_declaration_errors() -> None:
    forge = _memory()

    async def job() -> None:
        return None

    with pytest.raises(ForgeDeclarationError, match="exactly one of every= or cron="):
        forge.periodic()(job)
    with pytest.raises(ForgeDeclarationError, match="positive timedelta"):
        forge.periodic(every=timedelta(0))(job)
    with pytest.raises(ForgeDeclarationError, match="invalid cron expression"):
        forge.periodic(cron="61 * * * *")(job)
    with pytest.raises(ForgeDeclarationError, match="Mars/Olympus"):
        forge.periodic(cron="*/5 * * * *", timezone="Mars/Olympus")(job)
    with pytest.raises(ForgeDeclarationError, match="timezone= applies to cron="):
        forge.periodic(every=timedelta(minutes=5), timezone="Europe/Paris")(job)
    with pytest.raises(ForgeDeclarationError, match="exactly one"):
        forge.periodic(every=timedelta(minutes=5), cron="*/5 * * * *")(job)
    assert forge.tasks == ()  # nothing half-declared

    async def payload_and_state(ctx: TaskExecutionContext, payload: Thumbnail, state: Shop) -> None:
        return None

    with pytest.raises(ForgeDeclarationError, match="scheduled_at: datetime"):
        forge.periodic(every=timedelta(minutes=5))(payload_and_state)


async def test_declarations_freeze_once_the_forge_is_used() -> None:
    forge = _memory()
    task = forge.task(_noop)
    await task.enqueue(Thumbnail(file_id=1))
    with pytest.raises(ForgeStateError, match="already in use"):
        forge.lane("late")


async def test_wire_names_default_to_the_function_and_name_pins_them() -> None:
    forge = _memory()
    default = forge.task(_noop)

    async def renamed_function(payload: Thumbnail) -> None:
        return None

    pinned = forge.task(name="thumbnail.v1")(renamed_function)
    assert (default.name, pinned.name) == ("_noop", "thumbnail.v1")
    result = await pinned.enqueue({"file_id": 5})
    assert result.record.kind == "thumbnail.v1"
    assert result.record.lane == "default"


async def test_a_payload_that_fails_validation_names_task_and_field_and_writes_nothing() -> None:
    forge = _memory()
    task = forge.task(name="thumbnail")(_noop)

    @forge.task
    async def ratio(payload: float) -> None:
        return None

    with pytest.raises(ForgePayloadError) as caught:
        await task.enqueue({"file_id": "not-a-number", "width": 99999})
    error = caught.value
    assert error.task == "thumbnail"
    assert set(error.fields) == {"file_id", "width"}
    assert "'thumbnail'" in str(error) and "file_id" in str(error)
    assert "not-a-number" not in str(error)  # never the value
    with pytest.raises(ForgePayloadError):
        await task.enqueue_many([{"file_id": 1}, {"file_id": "bad"}])
    with pytest.raises(ForgePayloadError, match="'ratio'"):
        await ratio.enqueue(float("nan"))  # JSON cannot carry it: never stored as null
    with pytest.raises(ForgePayloadError, match="'thumbnail'") as not_a_payload:
        await task.enqueue(object())
    assert not_a_payload.value.fields == ("<root>",)
    store = forge.backend.task_store
    assert isinstance(store, InMemoryTaskStore)
    assert store.all_tasks() == []


async def test_a_payload_that_validates_but_does_not_encode_is_a_payload_error() -> None:
    forge = _memory()

    class Opaque:
        def __repr__(self) -> str:
            return "Opaque(secret-value)"

    @forge.task
    async def anything(payload: dict[str, Any]) -> None:
        return None

    # An Any field accepts the object; only the JSON encoding refuses it.
    with pytest.raises(ForgePayloadError) as caught:
        await anything.enqueue({"blob": Opaque()})
    error = caught.value
    assert error.task == "anything"
    assert error.fields == ()
    assert "'anything'" in str(error) and "does not encode as JSON" in str(error)
    assert "secret-value" not in str(error)  # never the value, nor in the chain
    chained = error.__cause__
    assert chained is not None and "secret-value" not in str(chained)
    assert chained.__cause__ is None
    with pytest.raises(ForgePayloadError):
        await anything.enqueue_many([{"ok": 1}, {"blob": Opaque()}])
    store = forge.backend.task_store
    assert isinstance(store, InMemoryTaskStore)
    assert store.all_tasks() == []


async def test_every_body_shape_runs_with_its_arguments() -> None:
    shop = Shop(prefix="thumbs")
    forge = Forge("memory://", state=shop)
    forge.lane("media", concurrency=2)
    seen: list[str] = []

    @forge.task
    async def nothing() -> None:
        seen.append("nothing")

    @forge.task
    async def payload_only(payload: Thumbnail) -> int:
        return payload.file_id

    @forge.task
    async def ctx_only(ctx: TaskExecutionContext) -> int:
        return ctx.attempt

    @forge.task(lane="media", steps=[("render", "Render")])
    async def with_state(
        ctx: TaskExecutionContext, payload: Thumbnail, state: Shop
    ) -> ThumbnailResult:
        await ctx.step_active("render")
        state.seen.append(payload.file_id)
        await ctx.step_succeeded("render")
        return ThumbnailResult(path=f"{state.prefix}/{payload.file_id}-{payload.width}.png")

    @forge.task
    def plain_def(payload: Thumbnail) -> str:
        return threading.current_thread().name

    await nothing.enqueue()
    await payload_only.enqueue(Thumbnail(file_id=7))
    await ctx_only.enqueue()
    made = await with_state.enqueue(Thumbnail(file_id=3, width=32))
    await plain_def.enqueue({"file_id": 1})
    drained = await forge.drain()
    assert drained.succeeded == 5 and len(drained) == 5
    results = {item.task: item.result_json for item in drained}
    assert results == {
        "nothing": None,
        "payload_only": "7",
        "ctx_only": "1",
        "with_state": '{"path":"thumbs/3-32.png"}',
        "plain_def": results["plain_def"],
    }
    assert results["plain_def"] != f'"{threading.current_thread().name}"'  # ran in a thread
    assert seen == ["nothing"] and shop.seen == [3]
    record = await forge.backend.task_store.get_task(made.record.id)
    assert record is not None and record.steps_json is not None
    assert '"status":"succeeded"' in record.steps_json.replace(" ", "")
    assert await forge.drain() == type(drained)(())  # nothing due any more


async def test_a_context_annotated_any_or_not_at_all_is_the_context_by_position() -> None:
    forge = Forge("memory://", state=Shop(prefix="shop"))

    @forge.task
    async def any_ctx(ctx: Any, payload: int, state: Shop) -> str:
        return f"{state.prefix}-{payload}-{ctx.attempt}"

    @forge.task
    async def bare_ctx(context, payload: int) -> int:  # type: ignore[no-untyped-def]
        return int(context.attempt) + payload

    @forge.task
    async def any_payload(payload: Any) -> Any:
        return payload

    await any_ctx.enqueue(1)
    await bare_ctx.enqueue(10)
    await any_payload.enqueue({"a": 1})
    drained = await forge.drain()
    assert {item.task: item.result_json for item in drained} == {
        "any_ctx": '"shop-1-1"',
        "bare_ctx": "11",
        "any_payload": '{"a":1}',
    }
    assert drained.succeeded == 3


async def test_drain_opens_the_declared_resources_and_closes_them_after() -> None:
    forge = _memory()
    events: list[str] = []

    @forge.resources
    async def resources() -> AsyncIterator[Shop]:
        events.append("open")
        yield Shop(prefix="from-resources")
        events.append("close")

    @forge.task
    async def use(ctx: TaskExecutionContext, payload: int, state: Shop) -> str:
        events.append("run")
        return state.prefix

    await use.enqueue(1)
    drained = await forge.drain()
    assert [item.result_json for item in drained] == ['"from-resources"']
    assert events == ["open", "run", "close"]
    assert forge.state_or_none is None  # closed with the drain
    given = Shop(prefix="given")
    forge.state = given  # state= (or a running worker's resources) is used as it is
    await use.enqueue(2)
    assert [item.result_json for item in await forge.drain()] == ['"given"']
    assert events == ["open", "run", "close", "run"] and forge.state is given


async def test_drain_reports_failures_retries_and_timeouts() -> None:
    forge = _memory()
    never = asyncio.Event()

    @forge.task(max_attempts=1)
    async def permanent(payload: int) -> None:
        raise ClassifiedTaskError("source file is gone", TaskRetryClass.PERMANENT)

    @forge.task(max_attempts=3)
    async def flaky(payload: int) -> None:
        raise ConnectionError("upstream down")

    @forge.task(max_attempts=2, timeout=timedelta(milliseconds=20))
    async def slow(payload: int) -> None:
        await never.wait()

    for task in (permanent, flaky, slow):
        await task.enqueue(1)
    drained = await forge.drain()
    outcomes = {item.task: (item.outcome, item.error) for item in drained}
    assert outcomes["permanent"] == (ClaimedTaskOutcome.FAILED, "source file is gone")
    assert outcomes["flaky"][0] is ClaimedTaskOutcome.RETRIED
    assert outcomes["slow"][0] is ClaimedTaskOutcome.RETRIED
    assert "TimeoutError" in (outcomes["slow"][1] or "")
    assert (drained.failed, drained.retried, drained.succeeded) == (1, 2, 0)
    assert [item.task for item in drained.of("flaky")] == ["flaky"]
    rows = {row.kind: row for row in forge.backend.task_store.all_tasks()}  # type: ignore[attr-defined]
    assert rows["permanent"].status is TaskStatus.FAILED
    assert rows["flaky"].status is TaskStatus.PENDING and rows["flaky"].attempt == 1


def test_enqueue_sync_works_from_a_thread_without_a_loop() -> None:
    forge = _memory()
    task = forge.task(_noop)
    results: list[object] = []
    thread = threading.Thread(
        target=lambda: results.append(task.enqueue_sync({"file_id": 4}, dedupe_key="k-4"))
    )
    thread.start()
    thread.join()
    again = task.enqueue_sync({"file_id": 4}, dedupe_key="k-4")
    (first,) = results
    assert first.created and not again.created  # type: ignore[attr-defined]
    assert first.record.id == again.record.id  # type: ignore[attr-defined]


async def test_enqueue_sync_inside_an_event_loop_is_a_typed_error() -> None:
    task = _memory().task(_noop)
    with pytest.raises(ForgeStateError, match="await enqueue"):
        task.enqueue_sync({"file_id": 1})


async def test_resources_open_before_the_workers_and_close_after() -> None:
    forge = _memory()
    events: list[str] = []
    ran = asyncio.Event()

    @forge.resources
    async def resources() -> AsyncIterator[Shop]:
        events.append("open")
        yield Shop(prefix="from-resources")
        events.append("close")

    @forge.task
    async def use(ctx: TaskExecutionContext, payload: Thumbnail, state: Shop) -> str:
        ran.set()
        return state.prefix

    with pytest.raises(ForgeStateError, match=r"forge\.state is not set"):
        _ = forge.state
    async with forge.running():
        assert forge.state.prefix == "from-resources"
        made = await use.enqueue({"file_id": 1})
        await ran.wait()
    assert events == ["open", "close"]
    assert forge.state_or_none is None
    record = await forge.backend.task_store.get_task(made.record.id)
    assert record is not None and record.result_json == '"from-resources"'


async def test_cancelling_the_host_during_startup_closes_the_resources_and_leaves_no_task() -> None:
    forge = _memory()
    forge.task(_noop)
    opening = asyncio.Event()
    closed: list[str] = []

    @forge.resources
    async def resources() -> AsyncIterator[Shop]:
        opening.set()
        try:
            await asyncio.Event().wait()  # a resource that never answers
            yield Shop(prefix="never")
        finally:
            closed.append("cleanup")

    async def host() -> None:
        async with forge.running():
            raise AssertionError("startup cannot have finished")

    hosting = asyncio.create_task(host(), name="host")
    await opening.wait()
    hosting.cancel()
    # The bound only keeps a broken shutdown from hanging the suite.
    done, _ = await asyncio.wait({hosting}, timeout=10)
    assert done == {hosting} and hosting.cancelled()
    assert closed == ["cleanup"]
    mine = [t for t in asyncio.all_tasks() if t.get_name().startswith("aster-forge:")]
    assert mine == []
    assert forge.state_or_none is None


async def test_a_periodic_job_is_a_task_with_a_schedule_taking_time_or_state() -> None:
    forge = Forge("memory://", state=Shop(prefix="shop"))
    seen: list[object] = []

    @forge.periodic(every=timedelta(minutes=5))
    async def cleanup(ctx: TaskExecutionContext, scheduled_at: datetime) -> None:
        seen.append(scheduled_at)

    @forge.periodic(cron="0 * * * *", timezone="Europe/Paris", name="report.hourly")
    async def report(ctx: TaskExecutionContext, shop: Shop) -> str:
        return shop.prefix

    assert cleanup.name == "cleanup"
    assert cleanup.schedule == IntervalSchedule(timedelta(minutes=5))
    assert forge.periodics == (cleanup, report) and report.task in forge.tasks
    assert report.schedule == CronSchedule("0 * * * *", timezone="Europe/Paris")
    at = datetime(2026, 12, 1, 10, 5, tzinfo=UTC)
    await cleanup.task.enqueue(at)
    await report.task.enqueue()  # run a job now, outside its schedule
    drained = await forge.drain()
    assert seen == [at] and drained.of("report.hourly")[0].result_json == '"shop"'


async def test_a_failed_startup_surfaces_from_running_instead_of_hanging(tmp_path: Path) -> None:
    # Opening the resources fails in the startup phase. (A SQLite file in a missing
    # directory fails there too, but aiosqlite's connection thread then outlives the
    # test's loop and reports "Event loop is closed" into a later test.)
    forge = Forge(f"sqlite:///{tmp_path / 'app.db'}")
    forge.task(_noop)

    pool_up = False

    @forge.resources
    async def resources() -> AsyncIterator[None]:
        if not pool_up:
            raise RuntimeError("the product's pool is down")
        yield

    with pytest.raises(AsterRuntimeStartupError):
        async with forge.running():
            raise AssertionError("the body must not run when startup failed")
    assert forge.current_dispatcher() is None
    await forge.aclose()
