"""The shop's background work, declared on a Forge."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from aster_forge import ClassifiedTaskError, Forge, TaskExecutionContext, TaskRetryClass

from .model import DATABASE_URL, Confirmation, Shop, metadata, open_shop, orders

forge = Forge(DATABASE_URL, name="shop", metadata=metadata, state=open_shop())
forge.lane("mail", concurrency=4)


@forge.task(lane="mail", max_attempts=5, steps=[("render", "Render"), ("send", "Send")])
async def send_confirmation(ctx: TaskExecutionContext, payload: Confirmation, shop: Shop) -> str:
    await ctx.step_active("render")
    body = f"Thank you for order #{payload.order_id}"
    await ctx.step_succeeded("render")
    await ctx.step_active("send")
    if payload.email.endswith("@invalid"):
        raise ClassifiedTaskError("mailbox does not exist", TaskRetryClass.PERMANENT)
    async with shop.engine.begin() as conn:
        await conn.execute(
            orders.update().where(orders.c.id == payload.order_id).values(confirmed=True)
        )
    await ctx.step_succeeded("send")
    return body


@forge.periodic(cron="*/5 * * * *")
async def expire_carts(ctx: TaskExecutionContext, shop: Shop) -> int:
    cutoff = datetime.now(UTC) - timedelta(days=1)
    async with shop.engine.begin() as conn:
        result = await conn.execute(
            sa.delete(orders).where(orders.c.confirmed.is_(False), orders.c.created_at < cutoff)
        )
    return int(result.rowcount or 0)
