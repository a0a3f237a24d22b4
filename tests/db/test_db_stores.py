"""Backend specifics: server clock vs injected clock, stored time formats, DDL, Alembic, errors."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from alembic.migration import MigrationContext
from alembic.operations import Operations
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from aster_forge.db import (
    DatabaseOperationError,
    DatabaseUnavailableError,
    RuntimeLeaseDbStore,
    ScheduledTaskDbStore,
    alembic_create_runtime_leases,
    alembic_create_scheduled_tasks,
    alembic_drop_runtime_leases,
    alembic_drop_scheduled_tasks,
)
from aster_forge.db._tables import (
    create_runtime_leases_table,
    create_scheduled_tasks_namespace_name_unique_index,
    create_scheduled_tasks_next_run_index,
    create_scheduled_tasks_table,
)
from aster_forge.db._time import DatabaseBackend
from aster_forge.db.errors import UnsupportedDatabaseBackendError
from aster_forge.tasks import IntervalSchedule, ScheduledTaskOutcome
from aster_forge.testing import ManualClock

from ._support import create_tables, drop_tables

HOUR = timedelta(hours=1)
RAW_EXPIRY = sa.text("SELECT expires_at FROM runtime_leases")


@pytest.mark.postgres
@pytest.mark.mysql
@pytest.mark.parametrize("server", ["postgres", "mysql"])
async def test_server_clock_ignores_skewed_instance_clocks(
    server: str, request: pytest.FixtureRequest
) -> None:
    url = str(request.getfixturevalue("postgres_url" if server == "postgres" else "mysql_url"))
    engine = create_async_engine(url)
    try:
        await create_tables(engine)
        behind = ManualClock(datetime(2000, 1, 1, tzinfo=UTC))
        ahead = ManualClock(datetime(2090, 1, 1, tzinfo=UTC))
        store_a = RuntimeLeaseDbStore(engine, clock=behind)
        store_b = RuntimeLeaseDbStore(engine, clock=ahead)
        lease = await store_a.try_acquire("skew", "instance-a", timedelta(seconds=30))
        assert lease is not None
        # Expiry comes from the server's now(), not from either instance's clock.
        assert abs(lease.expires_at - (datetime.now(UTC) + timedelta(seconds=30))) < timedelta(
            seconds=10
        )
        assert await store_b.try_acquire("skew", "instance-b", timedelta(seconds=30)) is None
        await ahead.advance(timedelta(days=365))
        assert await store_b.try_acquire("skew", "instance-b", timedelta(seconds=30)) is None
        catalog_a = ScheduledTaskDbStore(engine, clock=behind)
        catalog_b = ScheduledTaskDbStore(engine, clock=ahead)
        await catalog_a.ensure_scheduled_task("ns", "job", IntervalSchedule(every=HOUR))
        claim = await catalog_a.claim_scheduled_task("ns", "job", "instance-a", HOUR)
        assert claim is not None
        assert await catalog_b.claim_scheduled_task("ns", "job", "instance-b", HOUR) is None
        assert await catalog_a.complete_scheduled_task(claim, ScheduledTaskOutcome.succeeded())
        # next_run_at = server now + 1 h: the far-ahead instance's clock does not make it due.
        assert await catalog_b.claim_scheduled_task("ns", "job", "instance-b", HOUR) is None
    finally:
        await drop_tables(engine)
        await engine.dispose()


async def test_sqlite_uses_the_injected_clock(tmp_path: object) -> None:
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path}/clock.db")
    try:
        await create_tables(engine)
        clock = ManualClock(datetime(2040, 6, 1, tzinfo=UTC))
        store = RuntimeLeaseDbStore(engine, clock=clock)
        lease = await store.try_acquire("l", "a", timedelta(seconds=30))
        assert lease is not None and lease.expires_at == datetime(2040, 6, 1, 0, 0, 30, tzinfo=UTC)
        await clock.advance(29)
        assert await store.try_acquire("l", "b", timedelta(seconds=30)) is None
        await clock.advance(1)
        assert await store.try_acquire("l", "b", timedelta(seconds=30)) is not None
    finally:
        await drop_tables(engine)
        await engine.dispose()


async def test_timestamps_are_stored_as_utc(engine: AsyncEngine, backend: str) -> None:
    await create_tables(engine)
    clock = ManualClock(datetime(2040, 6, 1, 12, 0, tzinfo=UTC))
    store = RuntimeLeaseDbStore(engine, clock=clock)
    lease = await store.try_acquire("utc", "owner", timedelta(seconds=1, microseconds=123456))
    assert lease is not None
    async with engine.connect() as conn:
        if backend == "postgres":
            column_type = (
                await conn.execute(
                    sa.text(
                        "SELECT data_type FROM information_schema.columns "
                        "WHERE table_name = 'runtime_leases' AND column_name = 'expires_at'"
                    )
                )
            ).scalar_one()
            assert column_type == "timestamp with time zone"
            raw = (await conn.execute(RAW_EXPIRY)).scalar_one()
            assert raw.tzinfo is not None and raw == lease.expires_at
        elif backend == "mysql":
            column_type = (
                await conn.execute(
                    sa.text(
                        "SELECT column_type FROM information_schema.columns WHERE "
                        "table_schema = DATABASE() AND table_name = 'runtime_leases' "
                        "AND column_name = 'expires_at'"
                    )
                )
            ).scalar_one()
            assert column_type == "datetime(6)"
            raw = (await conn.execute(RAW_EXPIRY)).scalar_one()
            # Naive UTC, microseconds kept, and agreeing with the server's UTC clock.
            assert raw.tzinfo is None and raw.replace(tzinfo=UTC) == lease.expires_at
            assert lease.expires_at.microsecond == raw.microsecond
            drift = abs(raw.replace(tzinfo=UTC) - datetime.now(UTC))
            assert drift < timedelta(seconds=30)
        else:
            raw = (await conn.execute(RAW_EXPIRY)).scalar_one()
            assert raw == "2040-06-01 12:00:01.123456"


async def test_ddl_functions_create_working_tables(engine: AsyncEngine, backend: str) -> None:
    async with engine.begin() as conn:
        await conn.execute(create_runtime_leases_table(DatabaseBackend.of(engine)))
        await conn.execute(create_scheduled_tasks_table(engine))
        await conn.execute(create_scheduled_tasks_namespace_name_unique_index())
        await conn.execute(create_scheduled_tasks_next_run_index())
        # if_not_exists makes a second run a no-op.
        await conn.execute(create_runtime_leases_table(backend, if_not_exists=True))
        await conn.execute(create_scheduled_tasks_table(backend, if_not_exists=True))
        await conn.execute(create_scheduled_tasks_next_run_index(if_not_exists=True))
        indexes = await conn.run_sync(
            lambda c: {i["name"]: i["unique"] for i in sa.inspect(c).get_indexes("scheduled_tasks")}
        )
    assert indexes["ux_scheduled_tasks_namespace_name"]
    assert not indexes["ix_scheduled_tasks_next_run_at"]
    assert await RuntimeLeaseDbStore(engine).try_acquire("l", "o", HOUR) is not None
    assert (
        await ScheduledTaskDbStore(engine).ensure_scheduled_task(
            "n", "j", IntervalSchedule(every=HOUR)
        )
    ).task_id > 0


async def test_alembic_helpers_upgrade_and_downgrade(engine: AsyncEngine) -> None:
    def upgrade(sync_conn: sa.Connection) -> list[str]:
        op = Operations(MigrationContext.configure(sync_conn))
        alembic_create_runtime_leases(op)
        alembic_create_scheduled_tasks(op)
        return sorted(sa.inspect(sync_conn).get_table_names())

    def downgrade(sync_conn: sa.Connection) -> list[str]:
        op = Operations(MigrationContext.configure(sync_conn))
        alembic_drop_scheduled_tasks(op)
        alembic_drop_runtime_leases(op)
        return sorted(sa.inspect(sync_conn).get_table_names())

    async with engine.begin() as conn:
        assert {"runtime_leases", "scheduled_tasks"} <= set(await conn.run_sync(upgrade))
    assert await RuntimeLeaseDbStore(engine).try_acquire("l", "o", HOUR) is not None
    async with engine.begin() as conn:
        assert not {"runtime_leases", "scheduled_tasks"} & set(await conn.run_sync(downgrade))


def test_alembic_offline_sql_uses_the_target_dialect() -> None:
    import io

    buffer = io.StringIO()
    context = MigrationContext.configure(
        dialect_name="postgresql", opts={"as_sql": True, "output_buffer": buffer}
    )
    alembic_create_scheduled_tasks(Operations(context))
    sql = buffer.getvalue()
    assert "CREATE TABLE scheduled_tasks" in sql and "TIMESTAMP WITH TIME ZONE" in sql
    assert "CREATE UNIQUE INDEX ux_scheduled_tasks_namespace_name" in sql


def test_unsupported_backends_are_rejected() -> None:
    for bad in ("oracle", "", None, 3):
        with pytest.raises(UnsupportedDatabaseBackendError):
            create_scheduled_tasks_table(bad)
    assert DatabaseBackend.of("postgres") is DatabaseBackend.POSTGRESQL
    assert DatabaseBackend.of("mariadb") is DatabaseBackend.MYSQL
    assert not DatabaseBackend.SQLITE.has_server_clock


async def test_missing_table_is_a_typed_error(engine: AsyncEngine) -> None:
    with pytest.raises(DatabaseOperationError) as caught:
        await RuntimeLeaseDbStore(engine).try_acquire("l", "o", HOUR)
    assert caught.value.operation == "acquire runtime lease"
    assert isinstance(caught.value.__cause__, sa.exc.DBAPIError)
    with pytest.raises(DatabaseOperationError):
        await ScheduledTaskDbStore(engine).claim_scheduled_task("n", "j", "o", HOUR)


async def test_unreachable_server_is_unavailable() -> None:
    engine = create_async_engine("postgresql+asyncpg://postgres@127.0.0.1:1/none")
    try:
        with pytest.raises(DatabaseUnavailableError) as caught:
            await RuntimeLeaseDbStore(engine).renew("l", "o", HOUR)
        assert isinstance(caught.value, ConnectionError)
    finally:
        await engine.dispose()


async def test_naive_datetimes_never_reach_the_database(engine: AsyncEngine) -> None:
    await create_tables(engine)
    store = RuntimeLeaseDbStore(engine, clock=_NaiveClock())
    if store.backend is DatabaseBackend.SQLITE:
        with pytest.raises(ValueError, match="aware"):
            await store.try_acquire("l", "o", HOUR)


class _NaiveClock(ManualClock):
    def now(self) -> datetime:
        return super().now().replace(tzinfo=None)
