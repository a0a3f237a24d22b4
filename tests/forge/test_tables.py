"""``forge.metadata`` holds every table the stores use, so ``create_all`` (what Alembic and
``aster-forge migrate`` run) gives a database the forge works on: lanes pause and resume,
periodic jobs are stored with their cron columns."""

from __future__ import annotations

import pytest
from sqlalchemy.ext.asyncio import create_async_engine

from aster_forge import Forge, ForgeDeclarationError, TaskExecutionContext, TaskStatus
from aster_forge.tasks import ClaimedTaskOutcome


async def test_create_all_from_forge_metadata_gives_every_table_the_stores_use(
    forge_url: str,
) -> None:
    forge = Forge(forge_url)
    forge.lane("media", concurrency=2)

    @forge.task(lane="media")
    async def render(payload: int) -> int:
        return payload

    @forge.task
    async def mail(payload: int) -> int:
        return payload

    @forge.periodic(cron="*/5 * * * *")
    async def sweep(ctx: TaskExecutionContext) -> None:
        ctx.ensure_active()

    assert set(forge.metadata.tables) == {
        "background_tasks",
        "background_tasks_deps",
        "background_tasks_lanes",
        "background_tasks_partition_rates",
        "runtime_leases",
        "scheduled_tasks",
    }
    assert "snooze_count" in forge.metadata.tables["background_tasks"].c
    scheduled = forge.metadata.tables["scheduled_tasks"].c
    assert {"cron_expression", "cron_timezone"} <= set(scheduled.keys())
    # A fresh database given only forge.metadata, the way a migration builds it.
    engine = create_async_engine(forge_url)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(forge.metadata.create_all)
    finally:
        await engine.dispose()
    try:
        paused = await forge.pause_lane("media")
        assert paused.paused and paused.lane == "media"
        rendered = await render.enqueue(1)
        mailed = await mail.enqueue(2)
        drained = await forge.drain()
        assert [item.task for item in drained] == ["mail"]  # the paused lane is not claimed
        store = forge.backend.task_store
        waiting = await store.get_task(rendered.record.id)
        assert waiting is not None and waiting.status is TaskStatus.PENDING
        states = {state.lane: state.paused for state in await forge.lane_states()}
        assert states == {"default": False, "media": True}
        assert not (await forge.resume_lane("media")).paused
        drained = await forge.drain()
        assert [(item.task, item.outcome) for item in drained] == [
            ("render", ClaimedTaskOutcome.SUCCEEDED)
        ]
        done = await store.get_task(mailed.record.id)
        assert done is not None and done.status is TaskStatus.SUCCEEDED
        # The periodic job's catalog row, cron columns included, is stored and read back.
        catalog = forge.backend.scheduled_store
        await catalog.ensure_scheduled_task("shop", "sweep", sweep.schedule)
        [row] = await catalog.list_scheduled_tasks("shop")
        assert row.cron_expression == "*/5 * * * *" and row.next_run_at.minute % 5 == 0
    finally:
        await forge.aclose()


async def test_pausing_an_undeclared_lane_is_a_typed_error() -> None:
    forge = Forge("memory://")

    @forge.task
    async def mail(payload: int) -> None:
        return None

    with pytest.raises(ForgeDeclarationError, match="lane 'media' is not declared"):
        await forge.pause_lane("media")
