"""A body's writes through ``ctx.transaction()`` commit with its success, fenced by the
claim, on SQLite, PostgreSQL and MariaDB: kept once on success, rolled back on a
failure, a lost lease or a missing database."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from aster_forge import (
    Forge,
    ForgeTaskFailedError,
    TaskExecutionContext,
    TaskRetryPolicy,
    TaskStatus,
)
from aster_forge.tasks import ClaimedTaskOutcome

_NO_BACKOFF = TaskRetryPolicy(base_delay=timedelta(0), max_delay=timedelta(0), jitter=0.0)


def _ledger(forge: Forge) -> sa.Table:
    return sa.Table(
        "ledger",
        forge.metadata,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("task_id", sa.BigInteger, nullable=False),
        sa.Column("amount", sa.Integer, nullable=False),
    )


async def _rows(forge: Forge, ledger: sa.Table) -> list[tuple[int, int]]:
    assert forge.url is not None
    engine = create_async_engine(forge.url)
    try:
        async with engine.connect() as conn:
            result = await conn.execute(sa.select(ledger.c.task_id, ledger.c.amount))
            return sorted((int(a), int(b)) for a, b in result.all())
    finally:
        await engine.dispose()


async def _steal_claim(forge: Forge, task_id: int) -> None:
    """What another worker's claim after a lease expiry commits: a new token."""
    assert forge.url is not None
    engine = create_async_engine(forge.url)
    try:
        async with engine.begin() as conn:
            table = forge.metadata.tables["background_tasks"]
            await conn.execute(
                sa.update(table)
                .where(table.c.id == task_id)
                .values(processing_token="another-worker", claimed_by="another-worker")
            )
    finally:
        await engine.dispose()


async def test_the_effect_and_the_success_commit_together(forge_url: str) -> None:
    forge = Forge(forge_url, create_tables=True)
    ledger = _ledger(forge)

    @forge.task
    async def charge(ctx: TaskExecutionContext, payload: int) -> str:
        async with ctx.transaction() as conn:
            await conn.execute(sa.insert(ledger).values(task_id=ctx.task_id, amount=payload))
        async with ctx.transaction() as again:  # the same transaction, not a second one
            assert again is conn
        return f"charged {payload}"

    await forge.migrate()
    made = await charge.enqueue(30)
    drained = await forge.drain()
    assert [t.outcome for t in drained] == [ClaimedTaskOutcome.SUCCEEDED]
    assert await forge.result(made) == "charged 30"
    assert await _rows(forge, ledger) == [(made.task_id, 30)]
    await forge.aclose()


async def test_a_failed_attempt_rolls_back_and_the_retry_writes_once(forge_url: str) -> None:
    forge = Forge(forge_url, create_tables=True)
    ledger = _ledger(forge)

    @forge.task(max_attempts=3, retry=_NO_BACKOFF)
    async def charge(ctx: TaskExecutionContext, payload: int) -> None:
        async with ctx.transaction() as conn:
            await conn.execute(sa.insert(ledger).values(task_id=ctx.task_id, amount=payload))
        if ctx.attempt == 1:
            raise RuntimeError("the payment provider timed out")

    await forge.migrate()
    made = await charge.enqueue(7)
    drained = await forge.drain()
    assert [t.outcome for t in drained] == [
        ClaimedTaskOutcome.RETRIED,
        ClaimedTaskOutcome.SUCCEEDED,
    ]
    assert await _rows(forge, ledger) == [(made.task_id, 7)]
    record = await forge.get_task(made.task_id)
    assert record is not None and record.status is TaskStatus.SUCCEEDED and record.attempt == 1
    await forge.aclose()


async def test_an_error_inside_the_block_rolls_back_at_once(forge_url: str) -> None:
    forge = Forge(forge_url, create_tables=True)
    ledger = _ledger(forge)

    @forge.task(max_attempts=1)
    async def charge(ctx: TaskExecutionContext, payload: int) -> None:
        try:
            async with ctx.transaction() as conn:
                await conn.execute(sa.insert(ledger).values(task_id=ctx.task_id, amount=1))
                raise ValueError("declined")
        except ValueError:
            pass
        # The failed block is gone; a new one starts clean and commits with the success.
        async with ctx.transaction() as conn:
            await conn.execute(sa.insert(ledger).values(task_id=ctx.task_id, amount=payload))

    await forge.migrate()
    made = await charge.enqueue(2)
    assert (await forge.drain()).succeeded == 1
    assert await _rows(forge, ledger) == [(made.task_id, 2)]
    await forge.aclose()


async def test_a_lost_lease_rolls_the_effect_back(forge_url: str) -> None:
    forge = Forge(forge_url, create_tables=True)
    ledger = _ledger(forge)

    @forge.task(max_attempts=1)
    async def charge(ctx: TaskExecutionContext, payload: int) -> None:
        # Another worker took the task over (this worker's lease had expired).
        await _steal_claim(forge, ctx.task_id)
        async with ctx.transaction() as conn:
            await conn.execute(sa.insert(ledger).values(task_id=ctx.task_id, amount=payload))

    await forge.migrate()
    made = await charge.enqueue(5)
    drained = await forge.drain()
    assert [t.outcome for t in drained] == [ClaimedTaskOutcome.LEASE_LOST]
    assert await _rows(forge, ledger) == []
    record = await forge.get_task(made.task_id)
    assert record is not None and record.status is TaskStatus.RUNNING
    assert record.processing_token == "another-worker", "the new owner's claim is untouched"
    await forge.aclose()


@pytest.mark.parametrize("backend", ["postgres", "mysql"], indirect=True)
async def test_a_takeover_while_the_transaction_is_open_rolls_it_back(forge_url: str) -> None:
    # SQLite cannot see this race: the transaction holds its only write lock throughout.
    forge = Forge(forge_url, create_tables=True)
    ledger = _ledger(forge)

    @forge.task(max_attempts=1)
    async def charge(ctx: TaskExecutionContext, payload: int) -> None:
        async with ctx.transaction() as conn:
            await conn.execute(sa.insert(ledger).values(task_id=ctx.task_id, amount=payload))
            await _steal_claim(forge, ctx.task_id)

    await forge.migrate()
    await charge.enqueue(9)
    drained = await forge.drain()
    assert [t.outcome for t in drained] == [ClaimedTaskOutcome.LEASE_LOST]
    assert await _rows(forge, ledger) == []
    await forge.aclose()


async def test_the_orm_session_joins_the_transaction(forge_url: str) -> None:
    forge = Forge(forge_url, create_tables=True)

    class Base(DeclarativeBase):
        metadata = forge.metadata

    class Entry(Base):
        __tablename__ = "orm_ledger"
        id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
        task_id: Mapped[int] = mapped_column(sa.BigInteger)

    table = forge.metadata.tables["orm_ledger"]

    @forge.task(max_attempts=2, retry=_NO_BACKOFF)
    async def record(ctx: TaskExecutionContext) -> None:
        async with ctx.session() as session:
            session.add(Entry(task_id=ctx.task_id))
            await session.commit()  # joins the task's transaction: only flushes
        if ctx.attempt == 1:
            raise RuntimeError("failed after the flush")

    await forge.migrate()
    made = await record.enqueue()
    assert (await forge.drain()).succeeded == 1
    assert forge.url is not None
    engine = create_async_engine(forge.url)
    try:
        async with engine.connect() as conn:
            ids = (await conn.execute(sa.select(table.c.task_id))).scalars().all()
    finally:
        await engine.dispose()
    assert ids == [made.task_id]
    await forge.aclose()


async def test_memory_forges_have_no_transaction() -> None:
    forge = Forge("memory://")

    @forge.task(max_attempts=1)
    async def charge(ctx: TaskExecutionContext) -> None:
        async with ctx.transaction():
            pass

    await forge.migrate()
    made = await charge.enqueue()
    assert (await forge.drain()).failed == 1
    with pytest.raises(ForgeTaskFailedError, match="TaskTransactionUnavailableError"):
        await forge.result(made)
