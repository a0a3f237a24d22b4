"""Prove the CI path to every real database: connect, create, write, read, drop."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine


async def test_create_write_read_drop(engine: AsyncEngine, backend: str) -> None:
    metadata = sa.MetaData()
    table = sa.Table(
        "af_smoke",
        metadata,
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(64), nullable=False),
    )
    async with engine.begin() as conn:
        await conn.run_sync(metadata.create_all)
        await conn.execute(table.insert(), [{"name": "alpha"}, {"name": 'beta \' "quoted"'}])
    async with engine.connect() as conn:
        rows = (await conn.execute(sa.select(table.c.name).order_by(table.c.id))).scalars().all()
    assert rows == ["alpha", 'beta \' "quoted"']
    async with engine.begin() as conn:
        await conn.run_sync(metadata.drop_all)
    async with engine.connect() as conn:
        names = await conn.run_sync(lambda c: sa.inspect(c).get_table_names())
    assert "af_smoke" not in names
    assert (
        engine.dialect.name
        == {"sqlite": "sqlite", "postgres": "postgresql", "mysql": "mysql"}[backend]
    )
