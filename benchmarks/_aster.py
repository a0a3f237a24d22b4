"""aster-forge under the benchmark scenarios (burn-down, latency, bulk enqueue, steps).

Every burn-down checks that each task ran exactly once (a per-process counter in the
body) and that every row ends ``succeeded``. Worker processes (scenario b) are this
module run as ``python -m benchmarks._aster --worker URL CONCURRENCY``.
"""

from __future__ import annotations

import asyncio
import enum
import json
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from aster_forge import TaskExecutionContext, TaskStatus
from aster_forge.db import BackgroundTaskDbStore, create_background_tasks_table
from aster_forge.db._tasks_notify import BackgroundTaskNotificationListener
from aster_forge.runtime import CancellationToken
from aster_forge.tasks import (
    ClaimedTaskExecutionConfig,
    DispatchPollConfig,
    NewTask,
    TaskLaneConfig,
    TaskRegistry,
    TaskSpec,
    TaskStepSpec,
    TaskWorker,
)

from ._common import make_engine, percentile

POLL = DispatchPollConfig(
    base_interval=timedelta(milliseconds=50), max_interval=timedelta(milliseconds=500)
)
ENQUEUE_CHUNK = 5000
#: The lane limit of an "uncapped" worker: more than any benchmark enqueues.
UNCAPPED = 1_000_000


class Kind(enum.StrEnum):
    NOOP = "noop"
    STEPS = "steps"


class Lane(enum.StrEnum):
    DEFAULT = "default"


STEPS = (TaskStepSpec("fetch", "Fetch"), TaskStepSpec("work", "Work"), TaskStepSpec("save", "Save"))


@dataclass
class State:
    """Per-process bookkeeping: which tasks this process executed, and when they started."""

    executed: Counter[int] = field(default_factory=Counter)
    started_at: dict[int, float] = field(default_factory=dict)
    expected: int = 0
    all_started: asyncio.Event | None = None


async def _noop(ctx: TaskExecutionContext, state: State, payload: int) -> None:
    state.executed[ctx.task_id] += 1
    state.started_at[payload] = time.perf_counter()
    if state.all_started is not None and len(state.started_at) >= state.expected:
        state.all_started.set()


async def _stepped(ctx: TaskExecutionContext, state: State, payload: int) -> None:
    state.executed[ctx.task_id] += 1
    for spec in STEPS:
        await ctx.step_succeeded(spec.key)


def registry() -> TaskRegistry[State, Kind, Lane]:
    """The benchmark's task registry: a no-op kind and a 3-step kind."""
    reg: TaskRegistry[State, Kind, Lane] = TaskRegistry(kind=Kind, lane=Lane, state=State)
    reg.register(TaskSpec(Kind.NOOP, int, None, _noop))
    reg.register(TaskSpec(Kind.STEPS, int, None, _stepped, steps=STEPS))
    reg.lane(Lane.DEFAULT, [Kind.NOOP, Kind.STEPS])
    return reg.validate()


REGISTRY = registry()

# asyncpg logs SQLAlchemy's own transaction statements; its events count them already.
_TRANSACTION_CONTROL = ("BEGIN", "START TRANSACTION", "COMMIT", "ROLLBACK")


class RoundTrips:
    """Counts statements sent (plus BEGIN/COMMIT of real transactions) on an engine.

    SQLAlchemy's cursor events see what runs through SQLAlchemy. On asyncpg, the
    statements the store sends on the driver connection itself (the enqueue, the claim,
    the batched success and renewal) are counted by asyncpg's query logger, which sees
    only those: SQLAlchemy runs its statements as prepared statements (not logged),
    and its BEGIN/COMMIT (logged) and ``executemany`` (logged) are left to its events.
    On SQLite the store sends its hot statements (the claim, the batched success, the
    transaction control) on the aiosqlite connection itself, past SQLAlchemy's events,
    so they are not counted there: the SQLite figure understates the round trips.
    """

    def __init__(self, engine: AsyncEngine) -> None:
        self.count = 0
        self._many: set[str] = set()
        sync = engine.sync_engine
        sa.event.listen(sync, "before_cursor_execute", self._statement)
        sa.event.listen(sync, "begin", self._transaction)
        sa.event.listen(sync, "commit", self._transaction)
        if engine.dialect.driver == "asyncpg":
            sa.event.listen(sync, "connect", self._log_driver_queries)

    def _statement(self, *args: Any) -> None:
        if args[-1]:  # executemany: asyncpg logs it too
            self._many.add(args[2])
        self.count += 1

    def _log_driver_queries(self, dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.driver_connection.add_query_logger(self._driver_query)

    def _driver_query(self, logged: Any) -> None:
        query = logged.query
        if query in self._many or query.lstrip().upper().startswith(_TRANSACTION_CONTROL):
            return
        self.count += 1

    def _transaction(self, conn: Any) -> None:
        if conn.get_execution_options().get("isolation_level") != "AUTOCOMMIT":
            self.count += 1


async def reset_table(url: str) -> None:
    """Drop and recreate ``background_tasks``."""
    engine = make_engine(url)
    try:
        async with engine.begin() as conn:
            await conn.execute(sa.text("DROP TABLE IF EXISTS background_tasks"))
        await create_background_tasks_table(engine)
    finally:
        await engine.dispose()


async def analyze(url: str) -> None:
    """``ANALYZE`` (statistics for the planner), for every system alike."""
    engine = make_engine(url)
    try:
        async with engine.begin() as conn:
            await conn.execute(sa.text("ANALYZE"))
    finally:
        await engine.dispose()


async def fill(url: str, count: int, kind: Kind = Kind.NOOP) -> tuple[list[int], float]:
    """Recreate the table and bulk-enqueue ``count`` due tasks; ``(ids, rows/s)``."""
    await reset_table(url)
    engine = make_engine(url)
    try:
        store = BackgroundTaskDbStore(engine, notify=False)
        steps = REGISTRY.spec_for(kind).initial_steps_json()
        ids: list[int] = []
        async with engine.connect():
            pass  # the pool is open before the timing, as the peers' connections are
        started = time.perf_counter()
        for start in range(0, count, ENQUEUE_CHUNK):
            batch = [
                NewTask(kind, Lane.DEFAULT, payload_json=str(n), steps_json=steps)
                for n in range(start, min(start + ENQUEUE_CHUNK, count))
            ]
            # The ids, as pgqueuer's enqueue returns them (no record is built).
            ids.extend(_task_id(result) for result in await store.enqueue_many(batch))
        elapsed = time.perf_counter() - started
    finally:
        await engine.dispose()
    await analyze(url)
    return ids, count / elapsed if elapsed > 0 else float("inf")


def _task_id(result: Any) -> int:
    """The enqueued task's id (``record.id`` on trees older than ``task_id``)."""
    task_id = getattr(result, "task_id", None)
    return int(result.record.id if task_id is None else task_id)


def task_worker(
    store: BackgroundTaskDbStore,
    state: State,
    concurrency: int,
    token: CancellationToken,
    *,
    uncapped: bool = False,
    **options: Any,
) -> TaskWorker[State]:
    """A one-lane task worker running the benchmark registry.

    ``concurrency`` is the lane's ``max_concurrency`` (a hard cap on running tasks); with
    ``uncapped`` it is the lane's ``claim_batch`` instead and the lane has no practical
    cap: pgqueuer's default shape (``batch_size=C``, no ``concurrency_limit``).
    """
    config = ClaimedTaskExecutionConfig(
        state=state, registry=REGISTRY, lease_ttl=timedelta(seconds=30), shutdown_token=token
    )
    lane = (
        TaskLaneConfig(Lane.DEFAULT, UNCAPPED, claim_batch=concurrency)
        if uncapped
        else TaskLaneConfig(Lane.DEFAULT, concurrency)
    )
    return TaskWorker(store, lanes=[lane], execution=config, poll=POLL, **options)


@dataclass
class Server:
    """One in-process dispatch worker (plus a NOTIFY listener on PostgreSQL)."""

    url: str
    concurrency: int
    state: State = field(default_factory=State)
    count_round_trips: bool = False
    uncapped: bool = False
    token: CancellationToken = field(default_factory=CancellationToken)
    worker: TaskWorker[State] | None = None
    round_trips: RoundTrips | None = None
    engine: AsyncEngine | None = None

    async def serve(self, ready: asyncio.Event, go: asyncio.Event) -> None:
        """Connect, report ready, wait for ``go``, then run until stopped."""
        engine = self.engine = make_engine(self.url, pool_size=max(10, self.concurrency + 5))
        # Counting costs the client a logger call per driver statement (about 4% of
        # its time at concurrency 10): only the runs that report round trips pay it.
        self.round_trips = RoundTrips(engine) if self.count_round_trips else None
        store = BackgroundTaskDbStore(engine)
        worker = self.worker = task_worker(
            store, self.state, self.concurrency, self.token, uncapped=self.uncapped
        )
        try:
            async with engine.connect():
                pass  # warm the pool: connection setup is not part of the figure
            async with asyncio.TaskGroup() as group:
                if self.url.startswith("postgresql"):
                    listener = BackgroundTaskNotificationListener(
                        engine, store.notify_channel, lambda _lane: worker.wake()
                    )
                    group.create_task(listener.run(self.token), name="bench-listener")
                    await listener.wait_connected()
                ready.set()
                await go.wait()
                if self.round_trips is not None:
                    self.round_trips.count = 0
                group.create_task(worker.run(self.token), name="bench-worker")
                await self.token.wait()
        finally:
            await engine.dispose()

    async def start(self, go: asyncio.Event) -> asyncio.Task[None]:
        """Start serving; return once connected (the worker starts on ``go``)."""
        ready = asyncio.Event()
        task = asyncio.create_task(self.serve(ready, go), name="bench-serve")
        waiter = asyncio.create_task(ready.wait(), name="bench-ready")
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            waiter.cancel()
            await asyncio.gather(waiter, return_exceptions=True)
            await task  # raises the startup error
        return task

    def succeeded(self) -> int:
        """Tasks this worker marked succeeded."""
        return self.worker.stats.total().succeeded if self.worker is not None else 0


def check_once(executed: Counter[int], ids: list[int]) -> None:
    """Fail the run unless every id ran exactly once."""
    duplicates = [task_id for task_id, n in executed.items() if n != 1]
    missing = set(ids) - set(executed)
    if duplicates or missing or len(executed) != len(ids):
        raise SystemExit(
            f"exactly-once violated: {len(duplicates)} duplicates, {len(missing)} missing"
        )


async def count_succeeded(url: str) -> int:
    """Rows marked succeeded."""
    engine = make_engine(url)
    try:
        async with engine.connect() as conn:
            query = sa.text("SELECT count(*) FROM background_tasks WHERE status = :s")
            return int((await conn.execute(query, {"s": TaskStatus.SUCCEEDED.value})).scalar_one())
    finally:
        await engine.dispose()


@dataclass(frozen=True)
class BurnDown:
    """One burn-down figure."""

    rate: float
    round_trips_per_task: float | None = None
    tasks_per_claim: float | None = None


async def burn_down(
    url: str,
    count: int,
    concurrency: int,
    *,
    kind: Kind = Kind.NOOP,
    profile: Any = None,
    count_round_trips: bool = False,
    uncapped: bool = False,
) -> BurnDown:
    """Scenario (a)/(e): one process drains ``count`` pre-enqueued tasks.

    With ``count_round_trips`` the statements are counted (:class:`RoundTrips`), which
    slows the client a little; the figure then has ``round_trips_per_task``. With
    ``uncapped``, ``concurrency`` sizes each claim and does not cap the lane (see
    :func:`task_worker`).
    """
    ids, _ = await fill(url, count, kind)
    go = asyncio.Event()
    server = Server(url, concurrency, count_round_trips=count_round_trips, uncapped=uncapped)
    serving = await server.start(go)
    if profile is not None:
        profile.start()
    started = time.perf_counter()
    go.set()
    while server.succeeded() < count and not serving.done():  # noqa: ASYNC110
        await asyncio.sleep(0.002)
    elapsed = time.perf_counter() - started
    if profile is not None:
        profile.stop()
    trips = server.round_trips.count if server.round_trips is not None else None
    claims = server.worker.stats.total().claim_calls if server.worker else 0
    server.token.cancel()
    await serving
    check_once(server.state.executed, ids)
    done = await count_succeeded(url)
    if done != count:
        raise SystemExit(f"only {done} of {count} tasks are marked succeeded")
    per_task = None if trips is None else trips / count
    return BurnDown(count / elapsed, per_task, count / max(claims, 1))


async def burn_down_processes(url: str, count: int, concurrency: int, processes: int) -> float:
    """Scenario (b): ``processes`` worker processes drain ``count`` tasks."""
    ids, _ = await fill(url, count)
    workers = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "benchmarks._aster",
            "--worker",
            url,
            str(concurrency),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        for _ in range(processes)
    ]
    executed: Counter[int] = Counter()
    try:
        for worker in workers:
            assert worker.stdout is not None
            line = await worker.stdout.readline()
            if line.strip() != b"ready":
                raise SystemExit(f"worker failed to start: {line!r}")
        started = time.perf_counter()
        for worker in workers:
            assert worker.stdin is not None
            worker.stdin.write(b"go\n")
            await worker.stdin.drain()
        engine = make_engine(url)
        try:
            query = sa.text("SELECT count(*) FROM background_tasks WHERE status = 'succeeded'")
            while True:
                async with engine.connect() as conn:
                    done = int((await conn.execute(query)).scalar_one())
                if done >= count:
                    break
                await asyncio.sleep(0.05)
        finally:
            await engine.dispose()
        elapsed = time.perf_counter() - started
        for worker in workers:
            out, _ = await asyncio.wait_for(worker.communicate(b"stop\n"), 120)
            summary = json.loads(out.decode().strip().splitlines()[-1])
            for task_id, n in summary["executed"].items():
                executed[int(task_id)] += n
    finally:
        for worker in workers:
            if worker.returncode is None:
                worker.kill()
                await worker.wait()
    check_once(executed, ids)
    return count / elapsed


async def _worker_process(url: str, concurrency: int) -> None:
    go = asyncio.Event()
    server = Server(url, concurrency)
    serving = await server.start(go)
    print("ready", flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    go.set()
    await asyncio.to_thread(sys.stdin.readline)
    server.token.cancel()
    await serving
    print(json.dumps({"executed": server.state.executed}), flush=True)


@dataclass(frozen=True)
class Latency:
    """Enqueue-to-start latency in milliseconds."""

    p50: float
    p99: float
    max: float
    samples: int


async def latency(url: str, rate: float, seconds: float, concurrency: int = 10) -> Latency:
    """Scenario (c): a producer enqueues at ``rate``/s; enqueue-return-to-start latency.

    On PostgreSQL the enqueue's NOTIFY wakes the worker (as for another process); on
    SQLite the producer calls the worker's ``wake()`` (the in-process enqueue hook).
    """
    await reset_table(url)
    total = max(1, int(rate * seconds))
    all_started = asyncio.Event()
    server = Server(url, concurrency, State(expected=total, all_started=all_started))
    go = asyncio.Event()
    serving = await server.start(go)
    go.set()
    engine = make_engine(url)
    store = BackgroundTaskDbStore(engine)
    wake = None if url.startswith("postgresql") else server.worker
    enqueued_at: dict[int, float] = {}
    try:
        begin = time.perf_counter()
        for n in range(total):
            due = begin + n / rate
            pause = due - time.perf_counter()
            if pause > 0:
                await asyncio.sleep(pause)
            await store.enqueue(NewTask(Kind.NOOP, Lane.DEFAULT, payload_json=str(n)))
            enqueued_at[n] = time.perf_counter()
            if wake is not None:
                wake.wake()
        await asyncio.wait_for(all_started.wait(), 60)
    finally:
        server.token.cancel()
        await serving
        await engine.dispose()
    state = server.state
    samples = [max(state.started_at[n] - enqueued_at[n], 0.0) * 1e3 for n in enqueued_at]
    return Latency(percentile(samples, 0.5), percentile(samples, 0.99), max(samples), total)


async def bulk_enqueue(url: str, count: int) -> float:
    """Scenario (d): ``enqueue_many`` of ``count`` tasks in chunks; rows/s."""
    _, rate = await fill(url, count)
    return rate


def main() -> None:
    """Worker-process entry point (scenario b)."""
    if len(sys.argv) >= 4 and sys.argv[1] == "--worker":
        asyncio.run(_worker_process(sys.argv[2], int(sys.argv[3])))


if __name__ == "__main__":
    main()
