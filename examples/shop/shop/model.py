"""The shop's own tables, payloads and database (business code, no aster-forge)."""

from __future__ import annotations

import os
from dataclasses import dataclass

import sqlalchemy as sa
from fastapi import HTTPException
from pydantic import BaseModel, Field
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

DATABASE_URL = os.environ.get("SHOP_DATABASE_URL", "sqlite+aiosqlite:///./shop.db")

metadata = sa.MetaData()
orders = sa.Table(
    "orders",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("email", sa.String(200), nullable=False),
    sa.Column("items", sa.Integer, nullable=False),
    sa.Column("confirmed", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now()),
)


class OrderIn(BaseModel):
    email: str = Field(max_length=200)
    items: int = Field(gt=0, le=100)


class Confirmation(BaseModel):
    order_id: int
    email: str


class PaymentDeclined(HTTPException):
    def __init__(self) -> None:
        super().__init__(402, "payment declined")


def authorize_payment(order: OrderIn) -> None:
    """The payment provider (simulated): it declines the test domain ``declined.invalid``."""
    if order.email.endswith("@declined.invalid"):
        raise PaymentDeclined


@dataclass(frozen=True)
class Shop:
    """What the task bodies need: the shop's engine."""

    engine: AsyncEngine


def open_shop() -> Shop:
    return Shop(create_async_engine(DATABASE_URL))
