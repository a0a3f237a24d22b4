"""The shop's HTTP API (FastAPI); the dashboard is mounted under ``/ops``."""

from __future__ import annotations

import os

from fastapi import FastAPI, Header

from .model import Confirmation, OrderIn, authorize_payment, orders
from .tasks import forge, send_confirmation

app = FastAPI(lifespan=forge.lifespan)
# Without SHOP_ADMIN_TOKEN, only a browser on this machine may retry, cancel or read payloads.
app.mount("/ops", forge.asgi_app(admin_token=os.environ.get("SHOP_ADMIN_TOKEN")))


@app.post("/orders", status_code=202)
async def place_order(order: OrderIn, idempotency_key: str | None = Header(None)) -> dict[str, int]:
    # The order and its confirmation mail commit together, or neither does.
    async with forge.state.engine.begin() as conn:
        inserted = await conn.execute(orders.insert().values(email=order.email, items=order.items))
        order_id = int(inserted.inserted_primary_key[0])
        task = await send_confirmation.enqueue(
            Confirmation(order_id=order_id, email=order.email),
            dedupe_key=f"order:{idempotency_key}" if idempotency_key else None,
            connection=conn,
        )
        if not task.created:  # the same Idempotency-Key again: the first order stands
            await conn.rollback()
            order_id = Confirmation.model_validate_json(task.record.payload_json).order_id
            return {"order_id": order_id, "task_id": task.task_id}
        authorize_payment(order)  # declined: the order and its mail roll back
    return {"order_id": order_id, "task_id": task.task_id}
