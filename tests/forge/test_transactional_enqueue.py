"""A Forge task enqueued in the product's transaction exists if and only if it commits."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, create_async_engine

from aster_forge import Forge, ForgePayloadError, ForgeStateError, ForgeTask

_ORDERS = sa.Table(
    "orders", sa.MetaData(), sa.Column("id", sa.Integer, primary_key=True, autoincrement=False)
)


class _Rollback(Exception):
    """Raised inside a transaction to roll it back."""


@pytest.fixture
async def forge(forge_url: str) -> AsyncIterator[Forge]:
    """A forge with one task, ``ship(int)``, its tables created; closed afterwards."""
    made = Forge(forge_url, create_tables=True)

    @made.task(name="ship")
    async def ship(payload: int) -> None:
        del payload

    await made.backend.create_tables()
    yield made
    await made.aclose()


@pytest.fixture
def ship(forge: Forge) -> ForgeTask:
    """The forge's ``ship`` task."""
    return forge.tasks[0]


@pytest.fixture
async def product(forge: Forge, forge_url: str) -> AsyncIterator[AsyncEngine]:
    """The product's own engine on the forge's database, with its ``orders`` table."""
    engine = create_async_engine(forge_url)
    async with engine.begin() as conn:
        await conn.run_sync(_ORDERS.create)
    yield engine
    await engine.dispose()


async def _payloads(forge: Forge) -> list[str]:
    page = await forge.backend.task_store.list_tasks(limit=100)
    return sorted(record.payload_json for record in page.items)


async def _orders(engine: AsyncEngine) -> list[int]:
    async with engine.connect() as conn:
        return sorted((await conn.execute(sa.select(_ORDERS.c.id))).scalars())


async def test_a_committed_transaction_holds_its_order_and_its_task(
    forge: Forge, ship: ForgeTask, product: AsyncEngine
) -> None:
    async with product.begin() as conn:
        await conn.execute(_ORDERS.insert().values(id=1))
        result = await ship.enqueue(1, connection=conn)
    assert result.created
    assert await _orders(product) == [1]
    assert await _payloads(forge) == ["1"]


async def test_a_rolled_back_transaction_leaves_neither(
    forge: Forge, ship: ForgeTask, product: AsyncEngine
) -> None:
    with pytest.raises(_Rollback):
        async with product.begin() as conn:
            await conn.execute(_ORDERS.insert().values(id=2))
            await ship.enqueue_many([2, 3], connection=conn)
            raise _Rollback
    assert await _orders(product) == []
    assert await _payloads(forge) == []


async def test_an_orm_session_commits_the_task_with_its_rows(
    forge: Forge, ship: ForgeTask, product: AsyncEngine
) -> None:
    async with AsyncSession(product) as session, session.begin():
        await session.execute(_ORDERS.insert().values(id=4))
        await ship.enqueue(4, connection=session, dedupe_key="ship:4")
    assert await _orders(product) == [4]
    assert await _payloads(forge) == ["4"]


async def test_a_bad_payload_writes_nothing_and_leaves_the_transaction_usable(
    forge: Forge, ship: ForgeTask, product: AsyncEngine
) -> None:
    async with product.begin() as conn:
        await conn.execute(_ORDERS.insert().values(id=5))
        with pytest.raises(ForgePayloadError):
            await ship.enqueue("not a number", connection=conn)
    assert await _orders(product) == [5]
    assert await _payloads(forge) == []


async def test_an_in_memory_forge_refuses_a_connection_by_name() -> None:
    forge = Forge("memory://")

    @forge.task(name="ship")
    async def ship(payload: int) -> None:
        del payload

    engine = create_async_engine("sqlite+aiosqlite://")
    try:
        async with engine.connect() as conn:
            with pytest.raises(ForgeStateError, match=r"ship.*connection="):
                await ship.enqueue(1, connection=conn)
    finally:
        await engine.dispose()
    assert list((await forge.backend.task_store.list_tasks(limit=10)).items) == []
