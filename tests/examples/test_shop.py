"""examples/shop end to end on PostgreSQL: Alembic migration as generated, uvicorn serving
the FastAPI app with the workers in its lifespan, the dashboard under /ops behind the
admin token from the environment, each order and its mail committed together."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from ..cli._support import cli_env, free_port
from ..conftest import drop_all_tables

SHOP = Path(__file__).resolve().parents[2] / "examples" / "shop"
ADMIN = {"Authorization": "Bearer shop-admin-token"}

pytestmark = pytest.mark.postgres


@pytest.fixture
async def shop_url(postgres_url: str) -> AsyncIterator[str]:
    """An empty PostgreSQL database for the shop (every table dropped before and after)."""
    engine = create_async_engine(postgres_url)
    try:
        await drop_all_tables(engine)
        yield postgres_url
        await drop_all_tables(engine)
    finally:
        await engine.dispose()


async def _until_finished(client: httpx.AsyncClient, task_id: int) -> dict[str, Any]:
    for _ in range(400):
        shown = (await client.get(f"/ops/api/tasks/{task_id}", headers=ADMIN)).json()
        if shown["status"] in {"succeeded", "failed"}:
            return dict(shown)
        await asyncio.sleep(0.025)
    raise AssertionError(f"task {task_id} did not finish")


async def _alembic(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "alembic", *args],
        cwd=SHOP,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def test_the_shop_runs_end_to_end(shop_url: str, tmp_path: Path) -> None:
    env = cli_env(SHOP_DATABASE_URL=shop_url, SHOP_ADMIN_TOKEN="shop-admin-token")
    migrated = await _alembic(env, "upgrade", "head")
    assert migrated.returncode == 0, migrated.stderr
    # The migration as generated still matches forge.metadata (fails when a table or
    # column was added to the stores after it was generated).
    checked = await _alembic(env, "check")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    port = free_port()
    log = (tmp_path / "uvicorn.log").open("w+")
    server = subprocess.Popen(  # noqa: ASYNC220 - started once, waited in a thread
        [sys.executable, "-m", "uvicorn", "shop.app:app", "--port", str(port)],
        cwd=SHOP,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:
            for _ in range(400):
                try:
                    if (await client.get("/ops/readyz")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.05)
            headers = {"Idempotency-Key": "checkout-1"}
            order = {"email": "ada@example.com", "items": 2}
            first = (await client.post("/orders", json=order, headers=headers)).json()
            again = (await client.post("/orders", json=order, headers=headers)).json()
            assert again == first  # the dedupe key held; the replayed order rolled back
            bad = (await client.post("/orders", json={"email": "x@invalid", "items": 1})).json()
            rejected = await client.post("/orders", json={"email": "a@b.c", "items": 0})
            assert rejected.status_code == 422
            # The payment is declined after the enqueue: the order and its mail roll back.
            declined = await client.post(
                "/orders", json={"email": "d@declined.invalid", "items": 1}
            )
            assert declined.status_code == 402, declined.text
            # The admin API takes the token from SHOP_ADMIN_TOKEN; the probes stay open.
            anonymous = await client.get(f"/ops/api/tasks/{first['task_id']}")
            assert anonymous.status_code == 401
            done = await _until_finished(client, first["task_id"])
            failed = await _until_finished(client, bad["task_id"])
            assert done["status"] == "succeeded", done
            assert [step["status"] for step in done["steps"]] == ["succeeded", "succeeded"]
            assert failed["status"] == "failed" and failed["last_error"] == "mailbox does not exist"
            scheduled = (await client.get("/ops/api/scheduled", headers=ADMIN)).json()
            assert [row["name"] for row in scheduled["items"]] == ["expire_carts"]
            page = await client.get("/ops/")
            assert page.status_code == 200 and "<html" in page.text.lower()
    finally:
        server.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(server.wait, 30)
        log.seek(0)
        output = log.read()
        log.close()
    # uvicorn re-raises the SIGTERM it handled once it shut down gracefully.
    assert code in (0, -signal.SIGTERM), output
    assert "Application shutdown complete" in output, output
    engine = create_async_engine(shop_url)
    try:
        async with engine.connect() as conn:
            rows = (await conn.execute(sa.text("SELECT id, confirmed FROM orders"))).all()
            mails = (
                await conn.execute(
                    sa.text("SELECT payload_json FROM background_tasks WHERE lane = 'mail'")
                )
            ).scalars()
            orders_mailed = sorted(json.loads(payload)["order_id"] for payload in mails)
    finally:
        await engine.dispose()
    confirmed = {row.id: row.confirmed for row in rows}
    # Exactly the two committed orders, each with its one mail: the replayed and the
    # declined orders left neither a row nor a task.
    assert confirmed == {first["order_id"]: True, bad["order_id"]: False}
    assert orders_mailed == sorted(confirmed)
