"""Adding the cron columns to a ``scheduled_tasks`` table made before cron schedules."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from alembic.migration import MigrationContext
from alembic.operations import Operations
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncEngine

from aster_forge.db import (
    SCHEDULED_TASKS_CRON_COLUMNS,
    ScheduledTaskDbStore,
    add_scheduled_tasks_cron_columns,
    alembic_add_scheduled_tasks_cron_columns,
    alembic_drop_scheduled_tasks_cron_columns,
    drop_scheduled_tasks_cron_columns,
    scheduled_tasks_table,
)
from aster_forge.tasks import CronSchedule, IntervalSchedule

HOUR = timedelta(hours=1)
WHEN = datetime(2030, 1, 1, tzinfo=UTC)


def _old_table() -> sa.Table:
    """``scheduled_tasks`` as the seed defined it: no cron columns."""
    current = scheduled_tasks_table(sa.MetaData())
    metadata = sa.MetaData()
    return sa.Table(
        current.name,
        metadata,
        *(c._copy() for c in current.columns if c.name not in SCHEDULED_TASKS_CRON_COLUMNS),
        *(sa.Index(i.name, *(c.name for c in i.columns), unique=i.unique) for i in current.indexes),
        **current.kwargs,
    )


def _op(sync_conn: sa.Connection) -> Operations:
    return Operations(MigrationContext.configure(sync_conn))


def _columns(sync_conn: sa.Connection) -> set[str]:
    return {c["name"] for c in sa.inspect(sync_conn).get_columns("scheduled_tasks")}


async def test_old_table_gains_cron_columns_and_keeps_its_rows(engine: AsyncEngine) -> None:
    old = _old_table()
    async with engine.begin() as conn:
        await conn.run_sync(old.metadata.create_all)
    store = ScheduledTaskDbStore(engine)
    before = await _ensure_on_old_table(engine, old)
    async with engine.begin() as conn:
        assert not set(SCHEDULED_TASKS_CRON_COLUMNS) & await conn.run_sync(_columns)
        await conn.run_sync(lambda c: alembic_add_scheduled_tasks_cron_columns(_op(c)))
        assert set(SCHEDULED_TASKS_CRON_COLUMNS) <= await conn.run_sync(_columns)
    legacy = await store.get_scheduled_task("shop", "legacy")
    assert legacy is not None and legacy.schedule == IntervalSchedule(every=HOUR)
    assert legacy.next_run_at == before and legacy.cron_expression is None
    cron = await store.ensure_scheduled_task("shop", "report", CronSchedule("0 6 * * 1-5"))
    assert cron.schedule_text == "0 6 * * 1-5 (UTC)"
    moved = await store.ensure_scheduled_task("shop", "legacy", CronSchedule("*/5 * * * *"))
    assert moved.cron_expression == "*/5 * * * *" and moved.task_id == legacy.task_id
    async with engine.begin() as conn:
        await conn.execute(sa.delete(old).where(old.c.name == "report"))
        await conn.execute(sa.delete(old).where(old.c.name == "legacy"))
        await conn.run_sync(lambda c: alembic_drop_scheduled_tasks_cron_columns(_op(c)))
        assert not set(SCHEDULED_TASKS_CRON_COLUMNS) & await conn.run_sync(_columns)
        await conn.run_sync(old.metadata.drop_all)


async def _ensure_on_old_table(engine: AsyncEngine, old: sa.Table) -> datetime:
    """Write an interval row the way a pre-cron version did (no cron columns exist yet)."""
    async with engine.begin() as conn:
        await conn.execute(
            old.insert().values(
                namespace="shop",
                name="legacy",
                interval_micros=int(HOUR.total_seconds() * 1_000_000),
                next_run_at=WHEN,
                run_count=0,
                created_at=WHEN,
                updated_at=WHEN,
            )
        )
    return WHEN


def test_cron_column_ddl_compiles_for_each_backend() -> None:
    dialects: list[Dialect] = [sqlite.dialect(), postgresql.dialect(), mysql.dialect()]  # type: ignore[no-untyped-call]
    for dialect in dialects:
        added = [str(s.compile(dialect=dialect)) for s in add_scheduled_tasks_cron_columns()]
        assert added == [
            "ALTER TABLE scheduled_tasks ADD COLUMN cron_expression VARCHAR(255)",
            "ALTER TABLE scheduled_tasks ADD COLUMN cron_timezone VARCHAR(64)",
        ]
        dropped = [str(s.compile(dialect=dialect)) for s in drop_scheduled_tasks_cron_columns()]
        assert dropped == [
            "ALTER TABLE scheduled_tasks DROP COLUMN cron_expression",
            "ALTER TABLE scheduled_tasks DROP COLUMN cron_timezone",
        ]
    buffer = io.StringIO()
    context = MigrationContext.configure(
        dialect_name="mysql", opts={"as_sql": True, "output_buffer": buffer}
    )
    alembic_add_scheduled_tasks_cron_columns(Operations(context))
    assert "ADD COLUMN cron_timezone VARCHAR(64)" in buffer.getvalue()
