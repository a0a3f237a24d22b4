"""The shop's HTTP API (FastAPI); the dashboard is mounted under ``/ops``."""

from __future__ import annotations

from fastapi import FastAPI, Header

from .model import Confirmation, OrderIn, orders
from .tasks import forge, send_confirmation

app = FastAPI(lifespan=forge.lifespan)
app.mount("/ops", forge.asgi_app())


@app.post("/orders", status_code=202)
async def place_order(order: OrderIn, idempotency_key: str | None = Header(None)) -> dict[str, int]:
    async with forge.state.engine.begin() as conn:
        inserted = await conn.execute(orders.insert().values(email=order.email, items=order.items))
    order_id = int(inserted.inserted_primary_key[0])
    task = await send_confirmation.enqueue(
        Confirmation(order_id=order_id, email=order.email),
        dedupe_key=f"order:{idempotency_key}" if idempotency_key else None,
    )
    return {"order_id": order_id, "task_id": task.task_id}
