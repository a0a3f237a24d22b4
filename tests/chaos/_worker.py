"""A chaos worker process: ``python -m tests.chaos._worker URL OWNER LOG [options]``.

Runs one dispatch worker on PostgreSQL until SIGTERM. Every task body records its run
in ``chaos_runs`` and applies a fenced, idempotent effect to ``chaos_effects`` (the
insert only happens while this claim's token still owns the row). Every fenced store
write is appended to LOG as a JSON line (operation, task, token, accepted) so the test
can prove that a paused worker's late writes were refused. Each connection names its
worker (``chaos.writer``), so the trigger log in the database says who wrote each row.

``--stale`` makes it the stale writer of ``_stall.py`` (SIGUSR1 opens its write gate);
``--hold`` makes its bodies wait for SIGUSR1 before their effect; ``--unbatched`` turns
off the batched success (one fenced statement per success; the one heartbeat engine
still renews every due lease in one statement).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from aster_forge import TaskExecutionContext
from aster_forge.runtime import CancellationToken
from aster_forge.runtime._phases import ShutdownCoordinator
from aster_forge.tasks import DispatchPollConfig, TaskLaneConfig, TaskWorker
from aster_forge.tasks.errors import TaskLeaseControlError

from ._product import LANES, REPORT_SEQ_BASE, ChaosState, Job, Lane, execution_config
from ._stall import WriteGate, stale_hook
from ._write_log import LoggingStore

__all__ = [
    "REPORT_SEQ_BASE",
    "SIDE_TABLES",
    "LoggingStore",
    "install_side_tables",
    "make_hook",
    "writer_settings",
]

SIDE_TABLES = """
CREATE TABLE IF NOT EXISTS chaos_runs (
    id BIGSERIAL PRIMARY KEY, task_id BIGINT NOT NULL, token TEXT NOT NULL,
    owner TEXT NOT NULL, lane TEXT NOT NULL,
    started TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(), finished TIMESTAMPTZ);
CREATE TABLE IF NOT EXISTS chaos_effects (
    task_id BIGINT PRIMARY KEY, token TEXT NOT NULL, owner TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS chaos_redeliveries (
    id BIGSERIAL PRIMARY KEY, task_id BIGINT NOT NULL, token TEXT NOT NULL, owner TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS chaos_transitions (
    id BIGSERIAL PRIMARY KEY, task_id BIGINT NOT NULL, old_status TEXT, new_status TEXT,
    old_owner TEXT, new_owner TEXT, old_token TEXT, new_token TEXT,
    old_attempt INT, new_attempt INT, failure_reason TEXT,
    at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp());
CREATE OR REPLACE FUNCTION chaos_log_transition() RETURNS trigger AS $$
BEGIN
    IF NEW.status IS DISTINCT FROM OLD.status
       OR NEW.processing_token IS DISTINCT FROM OLD.processing_token THEN
        INSERT INTO chaos_transitions (task_id, old_status, new_status, old_owner, new_owner,
            old_token, new_token, old_attempt, new_attempt, failure_reason)
        VALUES (NEW.id, OLD.status, NEW.status, OLD.claimed_by, NEW.claimed_by,
            OLD.processing_token, NEW.processing_token, OLD.attempt, NEW.attempt,
            NEW.failure_reason);
    END IF;
    RETURN NEW;
END $$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS chaos_transitions_trigger ON background_tasks;
CREATE TRIGGER chaos_transitions_trigger AFTER UPDATE ON background_tasks
    FOR EACH ROW EXECUTE FUNCTION chaos_log_transition();
CREATE TABLE IF NOT EXISTS chaos_writes (
    id BIGSERIAL PRIMARY KEY, task_id BIGINT NOT NULL, writer TEXT, claimant TEXT,
    old_token TEXT, new_token TEXT, new_status TEXT, expired BOOLEAN NOT NULL,
    at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp());
CREATE OR REPLACE FUNCTION chaos_log_write() RETURNS trigger AS $$
BEGIN
    -- Every write to a claimed row, with the worker that sent it: only the claimant may
    -- write while the lease is live (a rescue or a new claim needs an expired lease).
    IF OLD.status = 'running' AND (NEW.status IS DISTINCT FROM OLD.status
       OR NEW.processing_token IS DISTINCT FROM OLD.processing_token
       OR NEW.lease_expires_at IS DISTINCT FROM OLD.lease_expires_at
       OR NEW.steps_json IS DISTINCT FROM OLD.steps_json) THEN
        INSERT INTO chaos_writes (task_id, writer, claimant, old_token, new_token,
            new_status, expired)
        VALUES (NEW.id, current_setting('chaos.writer', true), OLD.claimed_by,
            OLD.processing_token, NEW.processing_token, NEW.status,
            OLD.lease_expires_at <= now());
    END IF;
    RETURN NEW;
END $$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS chaos_writes_trigger ON background_tasks;
CREATE TRIGGER chaos_writes_trigger AFTER UPDATE ON background_tasks
    FOR EACH ROW EXECUTE FUNCTION chaos_log_write();
"""


def writer_settings(writer: str) -> dict[str, Any]:
    """``connect_args`` naming ``writer`` on every connection (read by the trigger)."""
    return {"server_settings": {"chaos.writer": writer, "application_name": writer}}


_RUN = sa.text(
    "INSERT INTO chaos_runs (task_id, token, owner, lane) VALUES (:id, :token, :owner, :lane) "
    "RETURNING id"
)
_FINISH = sa.text("UPDATE chaos_runs SET finished = clock_timestamp() WHERE id = :run")
# Fenced effect: only while this claim still owns the row; at most one per task.
_EFFECT = sa.text(
    "INSERT INTO chaos_effects (task_id, token, owner) "
    "SELECT :id, :token, :owner WHERE EXISTS (SELECT 1 FROM background_tasks "
    "WHERE id = :id AND processing_token = :token AND status = 'running' FOR SHARE) "
    "ON CONFLICT (task_id) DO NOTHING RETURNING task_id"
)
_OWNED = sa.text(
    "SELECT 1 FROM background_tasks WHERE id = :id AND processing_token = :token "
    "AND status = 'running'"
)
_REDELIVERED = sa.text(
    "INSERT INTO chaos_redeliveries (task_id, token, owner) VALUES (:id, :token, :owner)"
)


async def install_side_tables(engine: AsyncEngine) -> None:
    """Create the side tables and the transition trigger (idempotent)."""
    async with engine.begin() as conn:
        for statement in _statements(SIDE_TABLES):
            await conn.execute(sa.text(statement))


def _statements(script: str) -> list[str]:
    parts: list[str] = []
    buffer = ""
    for chunk in script.split(";"):
        buffer += chunk
        if buffer.count("$$") % 2 == 0:
            if buffer.strip():
                parts.append(buffer.strip())
            buffer = ""
        else:
            buffer += ";"
    return parts


def make_hook(
    engine: AsyncEngine, owner: str, log_fd: int, *, hold: asyncio.Event | None = None
) -> Any:
    """The task body: record the run, work, apply the fenced effect, finish the run.

    With ``hold``, each body waits for it after its work (before the effect).
    """

    async def hook(ctx: TaskExecutionContext, state: ChaosState, job: Job) -> None:
        lease = ctx.lease
        lane = "reports" if job.seq >= REPORT_SEQ_BASE else "fast"
        params = {"id": lease.task_id, "token": lease.processing_token, "owner": owner}
        async with engine.begin() as conn:
            run_id = (await conn.execute(_RUN, {**params, "lane": lane})).scalar_one()
        if ctx.steps:
            await ctx.step_active("collect")
        await asyncio.sleep(job.sleep_ms / 1000)
        if ctx.steps:
            try:
                await ctx.step_succeeded("collect")
            except TaskLeaseControlError:
                line = {"op": "step-refused", "task": lease.task_id, "ok": False}
                os.write(log_fd, (json.dumps(line) + "\n").encode())
                raise
        if hold is not None:
            await hold.wait()
        async with engine.begin() as conn:
            applied = (await conn.execute(_EFFECT, params)).first()
            if applied is None and (await conn.execute(_OWNED, params)).first() is not None:
                # Still ours, but an earlier claim (killed after its effect) applied it.
                await conn.execute(_REDELIVERED, params)
            await conn.execute(_FINISH, {"run": run_id})

    return hook


async def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("owner")
    parser.add_argument("log")
    parser.add_argument("--lease-ms", type=int, default=2000)
    parser.add_argument("--fast-limit", type=int, default=0, help="override the fast lane limit")
    parser.add_argument(
        "--budget-ms", type=int, default=0, help="stop through a ShutdownCoordinator phase"
    )
    parser.add_argument("--stale", action="store_true", help="hold writes (see _stall.py)")
    parser.add_argument("--hold", action="store_true", help="bodies wait for SIGUSR1")
    parser.add_argument("--unbatched", action="store_true", help="one statement per write")
    args = parser.parse_args(argv)
    engine = create_async_engine(
        args.url, pool_size=20, max_overflow=10, connect_args=writer_settings(args.owner)
    )
    log_fd = os.open(args.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    token = CancellationToken()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, token.cancel)
    gate: WriteGate | None = None
    if args.stale:
        gate = WriteGate(token)
        loop.add_signal_handler(signal.SIGUSR1, gate.open)
        hook = stale_hook(engine, args.owner, gate)
    else:
        hold = asyncio.Event() if args.hold else None
        if hold is not None:
            loop.add_signal_handler(signal.SIGUSR1, hold.set)
        hook = make_hook(engine, args.owner, log_fd, hold=hold)
    store = LoggingStore(engine, log_fd, gate)
    state = ChaosState(track_done=False, hook=hook)
    config = execution_config(
        state,
        lease_ttl=timedelta(milliseconds=args.lease_ms),
        shutdown_grace=timedelta(seconds=2),
    )
    lanes = LANES
    if args.fast_limit:
        lanes = [TaskLaneConfig(Lane.FAST, args.fast_limit), TaskLaneConfig(Lane.REPORTS, 3)]
    poll = DispatchPollConfig(
        base_interval=timedelta(milliseconds=50),
        max_interval=timedelta(milliseconds=200),
        error_max_interval=timedelta(seconds=1),
    )
    worker = TaskWorker(
        store,
        lanes=lanes,
        execution=config,
        poll=poll,
        owner=args.owner,
        batch_completions=not args.unbatched,
    )
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    if not args.budget_ms:
        try:
            await worker.run(token)
        finally:
            if gate is not None:
                await gate.join()
            os.close(log_fd)
            await engine.dispose()
        return 0
    # As a product's runtime would: the SIGTERM starts a time-boxed shutdown phase.
    stop = CancellationToken()
    loop.remove_signal_handler(signal.SIGTERM)
    loop.add_signal_handler(signal.SIGTERM, stop.cancel)
    running = asyncio.create_task(worker.run(token), name="chaos:worker")
    await stop.wait()

    async def stop_workers() -> None:
        token.cancel()
        await running

    coordinator = ShutdownCoordinator(grace=timedelta(milliseconds=200))
    coordinator.phase("background-tasks", timedelta(milliseconds=args.budget_ms), stop_workers)
    report = await coordinator.run()
    os.close(log_fd)
    await engine.dispose()
    phases = [
        {"name": p.name, "status": p.status.kind.value, "seconds": p.duration_seconds}
        for p in report.phases
    ]
    sys.stdout.write(json.dumps({"report": phases, "summary": report.summary()}) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main(sys.argv[1:])))
