"""Workflows through the Forge API on memory, SQLite, PostgreSQL and MariaDB: typed
dependency results, failure policy, batch callbacks, cancel and awaiting the end."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest
from pydantic import BaseModel

from aster_forge import (
    ClassifiedTaskError,
    Forge,
    ForgeTask,
    ForgeTaskFailedError,
    TaskExecutionContext,
    TaskRetryClass,
    TaskStatus,
)
from aster_forge.tasks.errors import TaskEnqueueValueError


class Part(BaseModel):
    index: int


class Total(BaseModel):
    parts: list[int]
    outcomes: list[str]


@dataclass
class Flow:
    forge: Forge
    square: ForgeTask
    total: ForgeTask
    tally: ForgeTask
    ran: list[str]


async def _flow(url: str) -> Flow:
    forge = Forge(url, create_tables=True)
    ran: list[str] = []

    @forge.task(max_attempts=1)
    async def square(payload: Part) -> Part:
        ran.append(f"square {payload.index}")
        if payload.index < 0:
            raise ClassifiedTaskError("negative part", TaskRetryClass.PERMANENT)
        return Part(index=payload.index**2)

    @forge.task
    async def total(ctx: TaskExecutionContext) -> Total:
        ran.append("total")
        parts = await forge.dependency_results(ctx)
        assert all(isinstance(part, Part) for part in parts), "typed by square's return"
        return Total(parts=[part.index for part in parts], outcomes=[])

    @forge.task
    async def tally(ctx: TaskExecutionContext) -> Total:
        ran.append("tally")
        records = await forge.dependency_records(ctx)
        return Total(parts=[], outcomes=[record.status.value for record in records])

    await forge.migrate()
    return Flow(forge, square, total, tally, ran)


async def test_a_fan_out_and_fan_in_passes_typed_results(forge_at: str) -> None:
    flow = await _flow(forge_at)
    parts = [flow.square.step(Part(index=i)) for i in range(1, 4)]
    end = flow.total.step(after=parts)
    made = await flow.forge.workflow([end])
    assert set(made) == {*parts, end}, "the steps it waits for are written too"
    assert (await flow.forge.get_task(made[end].task_id)).status is TaskStatus.PENDING  # type: ignore[union-attr]
    drained = await flow.forge.drain()
    assert drained.succeeded == 4
    assert flow.ran[-1] == "total"
    assert await flow.forge.result(made[end]) == Total(parts=[1, 4, 9], outcomes=[])
    await flow.forge.aclose()


async def test_a_failed_step_cancels_what_waits_and_a_callback_runs_anyway(
    forge_at: str,
) -> None:
    flow = await _flow(forge_at)
    good, bad = flow.square.step(Part(index=2)), flow.square.step(Part(index=-1))
    end = flow.total.step(after=[good, bad])
    callback = flow.tally.step(after=[good, bad, end], run_anyway=True)
    made = await flow.forge.workflow([end, callback])
    await flow.forge.drain()
    assert "total" not in flow.ran
    with pytest.raises(ForgeTaskFailedError, match="cancelled"):
        await flow.forge.result(made[end])
    outcome = await flow.forge.result(made[callback])
    assert outcome == Total(parts=[], outcomes=["succeeded", "failed", "cancelled"])
    await flow.forge.aclose()


async def test_cancelling_a_workflow_and_awaiting_from_sync_code(forge_at: str) -> None:
    flow = await _flow(forge_at)
    first = flow.square.step(Part(index=1))
    end = flow.total.step(after=[first])
    made = await flow.forge.workflow([end])
    assert await flow.forge.cancel_workflow(made) == 1, "the dependent went with its dependency"
    assert (await flow.forge.drain()).succeeded == 0
    statuses = {(await flow.forge.get_task(r.task_id)).status for r in made.values()}  # type: ignore[union-attr]
    assert statuses == {TaskStatus.CANCELLED}

    again = await flow.forge.workflow([flow.total.step(after=[flow.square.step(Part(index=3))])])
    await flow.forge.drain()
    [last] = [r for step, r in again.items() if step.task is flow.total]
    got = await asyncio.to_thread(flow.forge.result_sync, last, timeout=10)
    assert got == Total(parts=[9], outcomes=[])
    await flow.forge.aclose()


async def test_a_step_refuses_run_anyway_outside_its_dependencies(forge_at: str) -> None:
    flow = await _flow(forge_at)
    stranger = flow.square.step(Part(index=1))
    with pytest.raises(TaskEnqueueValueError, match="not in after"):
        flow.total.step(after=[], run_anyway=[stranger])
    await flow.forge.aclose()
