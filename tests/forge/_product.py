"""A tiny product on the Forge, run by ``aster-forge worker tests.forge._product:forge``."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from aster_forge import Forge, ForgeWorkerSettings, TaskExecutionContext
from aster_forge.db._url import normalize_database_url
from aster_forge.tasks import DispatchPollConfig

URL_ENV = "FORGE_PRODUCT_URL"
"""The database URL the worker process reads (not ``ASTER_FORGE_*``: the CLI env drops those)."""


POLL_ENV = "FORGE_PRODUCT_POLL_SECONDS"
"""The idle poll interval of the worker (the benchmark sets 10 s: only NOTIFY is fast)."""


CRON_ENV = "FORGE_PRODUCT_CRON"
"""Set to declare the ``tick`` job: every second, one row in ``ticks`` per execution."""

metadata = sa.MetaData()
ticks = sa.Table(
    "ticks",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("scheduled_at", sa.String(64), nullable=False),  # deliberately not unique
    sa.Column("pid", sa.Integer, nullable=False),
)


def build_forge(url: str, *, poll_seconds: float = 0.2, cron: bool = False) -> Forge:
    """The product's forge: one lane, one task, and with ``cron`` the ``tick`` job."""
    poll = timedelta(seconds=poll_seconds)
    forge = Forge(
        url,
        name="product",
        metadata=metadata,
        settings=ForgeWorkerSettings(
            poll=DispatchPollConfig(base_interval=poll, max_interval=poll)
        ),
    )
    forge.lane("mail", concurrency=2)

    @forge.task(lane="mail", name="shout")
    async def shout(payload: str) -> str:
        return payload.upper()

    if cron:

        @forge.resources
        async def engine() -> AsyncIterator[AsyncEngine]:
            product_engine = create_async_engine(normalize_database_url(url))
            yield product_engine
            await product_engine.dispose()

        @forge.periodic(cron="* * * * * *")
        async def tick(
            ctx: TaskExecutionContext, scheduled_at: datetime, engine: AsyncEngine
        ) -> None:
            async with engine.begin() as conn:
                await conn.execute(
                    ticks.insert().values(scheduled_at=scheduled_at.isoformat(), pid=os.getpid())
                )

    return forge


forge = build_forge(
    os.environ.get(URL_ENV, "memory://"),
    poll_seconds=float(os.environ.get(POLL_ENV, "0.2")),
    cron=bool(os.environ.get(CRON_ENV)),
)
