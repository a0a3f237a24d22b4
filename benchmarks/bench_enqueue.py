"""Enqueue speed on PostgreSQL: one enqueue per call and bulk, beside pgqueuer and raw asyncpg.

Each round runs every system time-sliced: 100 single enqueues (or one bulk chunk) of
each system in turn, the order rotating every slice, each system on its own
connection(s), so load changes on the shared machine hit every system alike; the
ratios inside one round are what counts. pgqueuer runs in its own venv as a server
taking commands (``peer_runner.py pgqueuer serve``). One throwaway database:

- aster-forge, one ``store.enqueue`` per call (a store with the registry, so every task
  is validated; NOTIFY on), tasks built with ``registry.new_task``;
- the same with the event loop idle between calls (``asyncio.sleep(0)``, as between
  web requests): the store's connection goes back to the pool each time; beside it the
  same on an engine with ``pool_pre_ping=True`` (what a ``Forge`` opened before
  ``create_database_engine``: a ping on every checkout);
- a ``Forge`` as its users open it (``Forge(url)``, one decorated task,
  ``await task.enqueue(n)``), back to back and with the loop idle between calls: the
  path a Forge user pays, payload validation included;
- pgqueuer (its default configuration), one ``Queries.enqueue`` per call;
- raw asyncpg, one prepared ``INSERT`` per call on one connection (the floor);
- aster-forge's own one-task statement sent on a bare asyncpg connection, no library
  code around it (what the statement costs the database and the driver: the most any
  client-side work could reach; its rows have kind ``floor``);
- the same statement with ``registry.new_task`` run before each send (the payload
  validated and encoded, the task discarded): what building the task costs in place,
  between round trips, where it runs slower than in a loop of its own;
- the same task row inserted with nothing returned and no NOTIFY (what one task row
  costs the database at the least; its rows have kind ``bare``): no task id comes back,
  so no enqueue could be cheaper than this;
- bulk: aster-forge ``enqueue_many`` and pgqueuer ``enqueue`` in chunks of 5,000;
- one enqueue per call again (aster-forge, pgqueuer, raw ``INSERT``) while another
  process (``BENCH_ENQUEUE_LISTENERS=N``: N processes, one per worker instance)
  ``LISTEN``s on both NOTIFY channels, as a waiting worker does in production:
  each system's NOTIFY is then delivered, which it is not when nobody listens; beside
  them an aster-forge store with ``notify_window=timedelta(0)``, every enqueue carrying
  its own NOTIFY (what the default window of one NOTIFY per lane per 5 ms saves).

Every system's row count is checked after each run. Results (medians over the rounds
and the per-round ratios) replace ``benchmarks/results/enqueue.md``.

Run: ``python -m benchmarks bench_enqueue``; ``BENCH_QUICK=1`` for a short run (its
file goes to a scratch directory, see ``_results.py``).
"""

from __future__ import annotations

import asyncio
import inspect
import os
import re
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from aster_forge import Forge
from aster_forge.db import BackgroundTaskDbStore
from aster_forge.db._tasks import DEFAULT_TASK_NOTIFY_CHANNEL
from aster_forge.tasks import NewTask

from . import _aster, _peers, _results
from ._common import (
    asyncpg_dsn,
    create_postgres_database,
    drop_postgres_database,
    load_average,
    make_engine,
)

CHUNK = 5000
FLOOR = "floor"
BARE = "bare"
PGQUEUER_CHANNEL = "ch_pgqueuer"
FORGE_TABLE = "forge_tasks"

# A waiting worker's session: LISTENs on the given channels until its stdin closes,
# then prints how many notifications arrived.
_LISTENER = """
import asyncio, sys
import asyncpg

async def main() -> None:
    conn = await asyncpg.connect(sys.argv[1])
    got = [0]
    for channel in sys.argv[2:]:
        await conn.add_listener(channel, lambda *_: got.__setitem__(0, got[0] + 1))
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await conn.close()
    print(got[0], flush=True)

asyncio.run(main())
"""
SINGLE_SLICE = 100


def _sizes() -> tuple[int, int, int]:
    """``(single calls, bulk rows, rounds)``."""
    if os.environ.get("BENCH_QUICK", "") not in ("", "0"):
        return 500, 20_000, 2
    return 2_000, 50_000, 3


def _store(engine: Any, *, notify_each: bool = False) -> BackgroundTaskDbStore:
    """The store as a product builds it; ``notify_each``: every enqueue NOTIFYs."""
    parameters = inspect.signature(BackgroundTaskDbStore).parameters
    options: dict[str, Any] = {}
    if "registry" in parameters:
        options["registry"] = _aster.REGISTRY
    if notify_each and "notify_window" in parameters:
        options["notify_window"] = timedelta(0)
    return BackgroundTaskDbStore(engine, **options)


def _task(n: int) -> NewTask:
    new_task = getattr(_aster.REGISTRY, "new_task", None)
    if new_task is not None:
        task: NewTask = new_task(_aster.Kind.NOOP, n)
        return task
    return NewTask(_aster.Kind.NOOP, _aster.Lane.DEFAULT, payload_json=str(n))


async def _count(url: str, *, kind: str | None = None, table: str = "background_tasks") -> int:
    """Rows of aster-forge (or, with ``kind``, of that :class:`FloorSystem`) in ``table``."""
    engine = make_engine(url)
    where = f"kind = '{kind}'" if kind else f"kind NOT IN ('{FLOOR}', '{BARE}')"
    try:
        async with engine.connect() as conn:
            query = sa.text(f"SELECT count(*) FROM {table} WHERE {where}")
            return int((await conn.execute(query)).scalar_one())
    finally:
        await engine.dispose()


class AsterSystem:
    """aster-forge on its own engine: a store with the registry (every task validated)."""

    def __init__(self, url: str, *, notify_each: bool = False, pre_ping: bool = False) -> None:
        self.url = url
        self.engine = make_engine(url, pool_pre_ping=pre_ping)
        self.store = _store(self.engine, notify_each=notify_each)
        self.sent = 0

    async def warm(self) -> None:
        """One enqueue: the pool and the statement cache are warm before timing."""
        await self.store.enqueue(_task(-1))

    async def single(self, n: int) -> float:
        """``n`` enqueues, one per call (tasks built inside the timing); seconds."""
        started = time.perf_counter()
        for i in range(self.sent, self.sent + n):
            await self.store.enqueue(_task(i))
        elapsed = time.perf_counter() - started
        self.sent += n
        return elapsed

    async def single_idle(self, n: int) -> float:
        """As :meth:`single`, the loop idle between calls (a web request each); seconds.

        The store returns its connection to the pool whenever the loop runs with no
        enqueue in flight, so every call here checks one out: no reuse across calls.
        """
        started = time.perf_counter()
        for i in range(self.sent, self.sent + n):
            await self.store.enqueue(_task(i))
            await asyncio.sleep(0)
        elapsed = time.perf_counter() - started
        self.sent += n
        return elapsed

    async def bulk(self, n: int) -> float:
        """One ``enqueue_many`` of ``n`` tasks (built inside the timing); seconds."""
        started = time.perf_counter()
        await self.store.enqueue_many([_task(i) for i in range(self.sent, self.sent + n)])
        elapsed = time.perf_counter() - started
        self.sent += n
        return elapsed

    async def close(self, *, others: int = 0) -> bool:
        """Dispose of the engine; whether every task landed (``others``: other stores')."""
        flush = getattr(self.store, "flush_notifications", None)
        if flush is not None:
            await flush()
        await self.engine.dispose()
        return await _count(self.url) == self.sent + 1 + others


class ForgeSystem:
    """A ``Forge`` as its users open it, one decorated task; rows in ``forge_tasks``."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.forge = Forge(url, name="bench-enqueue", tasks_table=FORGE_TABLE)

        @self.forge.task(name="noop")
        async def noop(payload: int) -> None:
            del payload

        self.task = noop
        self.sent = 0
        self.before = 0

    async def warm(self) -> None:
        """Create the tables, count the rows already there, and enqueue once."""
        await self.forge.migrate()
        self.before = await _count(self.url, table=FORGE_TABLE)
        await self.task.enqueue(-1)

    async def single(self, n: int) -> float:
        """``n`` enqueues, one per call; seconds."""
        started = time.perf_counter()
        for i in range(self.sent, self.sent + n):
            await self.task.enqueue(i)
        elapsed = time.perf_counter() - started
        self.sent += n
        return elapsed

    async def single_idle(self, n: int) -> float:
        """As :meth:`single`, the loop idle between calls (a web request each); seconds."""
        started = time.perf_counter()
        for i in range(self.sent, self.sent + n):
            await self.task.enqueue(i)
            await asyncio.sleep(0)
        elapsed = time.perf_counter() - started
        self.sent += n
        return elapsed

    async def close(self) -> bool:
        """Close the forge; whether every task landed."""
        await self.forge.aclose()
        return await _count(self.url, table=FORGE_TABLE) == self.before + self.sent + 1


class FloorSystem:
    """aster-forge's one-task statement on a bare asyncpg connection (no library code)."""

    def __init__(
        self, conn: Any, sql: str, args: list[Any], kind: str, *, build: bool = False
    ) -> None:
        self.conn = conn
        self.sql = sql
        self.args = args
        self.kind = kind
        self.build = build
        self.sent = 0

    @classmethod
    async def open(
        cls, url: str, store: BackgroundTaskDbStore, *, bare: bool = False, build: bool = False
    ) -> FloorSystem:
        """Connect and warm the statement (the store's own, for one task without a key).

        With ``bare``, the statement ends before its ``RETURNING`` (which also holds the
        NOTIFY): the task row is inserted and nothing comes back. With ``build``, each
        call first builds a task with ``registry.new_task`` (and discards it).
        """
        import asyncpg

        pg: Any = getattr(store, "_pg_enqueue", None)
        if pg is None:
            raise SystemExit("bench_enqueue: the store has no PostgreSQL enqueue statement")
        kind = BARE if bare else FLOOR
        sql, args = pg.unkeyed([NewTask(kind, _aster.Lane.DEFAULT, payload_json="0")])
        if bare:
            sql = sql.split("RETURNING", 1)[0]
            # The NOTIFY's channel is no longer sent; a parameter may appear twice.
            args = args[: max(int(n) for n in re.findall(r"\$(\d+)", sql))]
        conn = await asyncpg.connect(asyncpg_dsn(url))
        await conn.fetch(sql, *args)
        return cls(conn, sql, args, kind, build=build)

    async def single(self, n: int) -> float:
        """``n`` statements, one per call; seconds."""
        started = time.perf_counter()
        if self.build:
            for i in range(self.sent, self.sent + n):
                _task(i)
                await self.conn.fetch(self.sql, *self.args)
            elapsed = time.perf_counter() - started
            self.sent += n
            return elapsed
        for _ in range(n):
            await self.conn.fetch(self.sql, *self.args)
        elapsed = time.perf_counter() - started
        self.sent += n
        return elapsed

    async def close(self, url: str, *, others: int = 0) -> bool:
        """Close the connection; whether every row landed (``others``: same kind's)."""
        await self.conn.close()
        return await _count(url, kind=self.kind) == self.sent + 1 + others


class RawSystem:
    """One prepared ``INSERT`` per call on one asyncpg connection (the floor)."""

    INSERT = "INSERT INTO raw_queue (status, payload) VALUES ('pending', $1)"

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.sent = 0

    @classmethod
    async def open(cls, url: str) -> RawSystem:
        """Connect, create ``raw_queue`` and warm the prepared statement."""
        import asyncpg

        conn = await asyncpg.connect(asyncpg_dsn(url))
        await conn.execute(
            "DROP TABLE IF EXISTS raw_queue; CREATE TABLE raw_queue "
            "(id bigserial PRIMARY KEY, status text NOT NULL, payload text, token text)"
        )
        await conn.execute(cls.INSERT, "warm")
        return cls(conn)

    async def single(self, n: int) -> float:
        """``n`` inserts, one per call; seconds."""
        started = time.perf_counter()
        for i in range(self.sent, self.sent + n):
            await self.conn.execute(self.INSERT, str(i))
        elapsed = time.perf_counter() - started
        self.sent += n
        return elapsed

    async def close(self) -> bool:
        """Drop ``raw_queue``; whether every row landed."""
        try:
            rows = await self.conn.fetchval("SELECT count(*) FROM raw_queue")
            await self.conn.execute("DROP TABLE IF EXISTS raw_queue")
        finally:
            await self.conn.close()
        return bool(rows == self.sent + 1)


async def _sliced(
    jobs: dict[str, Callable[[int], Awaitable[float]]], total: int, size: int
) -> dict[str, float]:
    """Run ``total`` units per system in slices of ``size``, rotating the order; rates."""
    elapsed = dict.fromkeys(jobs, 0.0)
    names = list(jobs)
    for index in range(total // size):
        shift = index % len(names)
        for name in names[shift:] + names[:shift]:
            elapsed[name] += await jobs[name](size)
    return {name: (total // size) * size / seconds for name, seconds in elapsed.items()}


async def single_round(url: str, count: int, pgqueuer: bool) -> dict[str, float]:
    """One enqueue per call: aster-forge, pgqueuer and raw INSERT, time-sliced."""
    await _aster.reset_table(url)
    aster = AsterSystem(url)
    each = AsterSystem(url, notify_each=True)
    pinged = AsterSystem(url, pre_ping=True)
    forge = ForgeSystem(url)
    raw = await RawSystem.open(url)
    floor = await FloorSystem.open(url, aster.store)
    built = await FloorSystem.open(url, aster.store, build=True)
    bare = await FloorSystem.open(url, aster.store, bare=True)
    peer = await _peers.PeerServer.start("pgqueuer", url) if pgqueuer else None
    await aster.warm()
    await each.warm()
    await pinged.warm()
    await forge.warm()
    jobs: dict[str, Callable[[int], Awaitable[float]]] = {
        "aster single": aster.single,
        "aster single, NOTIFY each": each.single,
        "aster single, idle loop": aster.single_idle,
        "aster single, idle loop, pool_pre_ping": pinged.single_idle,
        "forge single": forge.single,
        "forge single, idle loop": forge.single_idle,
    }
    if peer is not None:
        jobs["pgqueuer single"] = lambda n: peer.run("single", n)
    jobs["raw single"] = raw.single
    jobs["aster statement, bare driver"] = floor.single
    jobs["aster statement + new_task, bare driver"] = built.single
    jobs["task row INSERT, nothing returned"] = bare.single
    rates = await _sliced(jobs, count, SINGLE_SLICE)
    await each.close()
    await pinged.close()
    checks = [
        await forge.close(),
        await aster.close(others=each.sent + 1 + pinged.sent + 1),
        await raw.close(),
        # Both send the statement of kind FLOOR: each count includes the other's rows.
        await floor.close(url, others=built.sent + 1),
        await built.close(url, others=floor.sent + 1),
        await bare.close(url),
    ]
    if peer is not None:
        checks.append(await peer.close())
    if not all(checks):
        raise SystemExit(f"single enqueue: row count mismatch {checks}")
    return rates


#: Worker processes listening (``BENCH_ENQUEUE_LISTENERS``): each NOTIFY reaches every one.
LISTENERS = int(os.environ.get("BENCH_ENQUEUE_LISTENERS", "1"))


class Listener:
    """Another process ``LISTEN``ing on aster-forge's and pgqueuer's channels."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    @classmethod
    async def start(cls, url: str) -> Listener:
        """Start it and wait until it listens."""
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _LISTENER,
            asyncpg_dsn(url),
            DEFAULT_TASK_NOTIFY_CHANNEL,
            PGQUEUER_CHANNEL,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        assert process.stdout is not None
        if (await process.stdout.readline()).strip() != b"ready":
            raise SystemExit("bench_enqueue: the listener did not start")
        return cls(process)

    async def stop(self) -> int:
        """Stop it; how many notifications it received."""
        out, _ = await asyncio.wait_for(self.process.communicate(b""), 60)
        return int(out.decode().strip().splitlines()[-1])


async def listened_round(url: str, count: int, pgqueuer: bool) -> dict[str, float]:
    """One enqueue per call with another session listening on both channels."""
    await _aster.reset_table(url)
    aster = AsterSystem(url)
    # Every enqueue carrying its own NOTIFY (no window): what the window saves.
    each = AsterSystem(url, notify_each=True)
    raw = await RawSystem.open(url)
    peer = await _peers.PeerServer.start("pgqueuer", url) if pgqueuer else None
    await aster.warm()
    await each.warm()
    listeners = [await Listener.start(url) for _ in range(LISTENERS)]
    jobs: dict[str, Callable[[int], Awaitable[float]]] = {
        "aster single, listened": aster.single,
        "aster single, listened, NOTIFY each": each.single,
    }
    if peer is not None:
        jobs["pgqueuer single, listened"] = lambda n: peer.run("single", n)
    jobs["raw single, listened"] = raw.single
    try:
        rates = await _sliced(jobs, count, SINGLE_SLICE)
    finally:
        notified = min([await listener.stop() for listener in listeners])
    await each.close()
    checks = [await aster.close(others=each.sent + 1), await raw.close()]
    if peer is not None:
        checks.append(await peer.close())
    if not all(checks) or not notified:
        raise SystemExit(f"listened enqueue: row count mismatch {checks}, {notified} notified")
    return rates


async def bulk_round(url: str, count: int, pgqueuer: bool) -> dict[str, float]:
    """``enqueue_many`` beside pgqueuer's list enqueue, one chunk each in turn."""
    await _aster.reset_table(url)
    aster = AsterSystem(url)
    peer = await _peers.PeerServer.start("pgqueuer", url) if pgqueuer else None
    await aster.warm()
    jobs: dict[str, Callable[[int], Awaitable[float]]] = {"aster bulk": aster.bulk}
    if peer is not None:
        jobs["pgqueuer bulk"] = lambda n: peer.run("bulk", n)
    rates = await _sliced(jobs, count, CHUNK)
    checks = [await aster.close()]
    if peer is not None:
        checks.append(await peer.close())
    if not all(checks):
        raise SystemExit(f"bulk enqueue: row count mismatch {checks}")
    return rates


def _cost(a: str, b: str, med: dict[str, float]) -> str:
    """How much longer one call of ``a`` takes than one of ``b`` (from the medians)."""
    if a not in med or b not in med:
        return "n/a"
    return f"{(1 / med[a] - 1 / med[b]) * 1e6:.0f} us"


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


async def _run(databases: list[str]) -> list[str]:
    single_n, bulk_n, rounds = _sizes()
    problem = _peers.ensure_peers_venv()
    url = await create_postgres_database("af_bench_enqueue")
    if url is None:
        raise SystemExit("bench_enqueue needs PostgreSQL")
    figures: dict[str, list[float]] = {}
    load_start = load_average()
    try:
        databases.append(await _results.database_version(url))
        for round_no in range(1, rounds + 1):
            print(f"== enqueue round {round_no}/{rounds}", flush=True)
            rates = await single_round(url, single_n, problem is None)
            rates.update(await bulk_round(url, bulk_n, problem is None))
            rates.update(await listened_round(url, single_n, problem is None))
            for name, rate in rates.items():
                figures.setdefault(name, []).append(rate)
                print(f"  {name:<24} {rate:>10,.0f}/s", flush=True)
    finally:
        await drop_postgres_database(url)
    med = {name: _median(values) for name, values in figures.items()}

    def ratio(a: str, b: str) -> str:
        pairs = [x / y for x, y in zip(figures.get(a, []), figures.get(b, []), strict=False)]
        if not pairs:
            return "n/a"
        per_round = ", ".join(f"{p:.2f}" for p in pairs)
        return f"{_median(pairs):.2f}x (rounds: {per_round})"

    lines = [
        f"- N single = {single_n:,} calls, N bulk = {bulk_n:,} rows (chunks of {CHUNK:,}), "
        f"{rounds} rounds, time-sliced ({SINGLE_SLICE} single calls or one chunk per "
        f"system in turn); load average {load_start:.2f} -> {load_average():.2f}",
        *(
            [f"- peers skipped: {problem}"]
            if problem is not None
            else ["- peers: " + ", ".join(f"{k} {v}" for k, v in _peers.peer_versions().items())]
        ),
        "",
        "| system | median | rounds |",
        "|---|--:|---|",
        *(
            f"| {name} | {med[name]:,.0f}/s | {', '.join(f'{v:,.0f}' for v in values)} |"
            for name, values in figures.items()
        ),
        "",
        f"- one enqueue per call vs pgqueuer: {ratio('aster single', 'pgqueuer single')} "
        "(goal >= 1.5x)",
        f"- one enqueue per call vs raw INSERT: {ratio('aster single', 'raw single')} "
        "(goal >= 0.70x); vs a NOTIFY on every enqueue (nobody listening): "
        f"{ratio('aster single', 'aster single, NOTIFY each')}",
        "- the statement alone (bare driver, no library code) vs pgqueuer: "
        f"{ratio('aster statement, bare driver', 'pgqueuer single')}; vs raw INSERT: "
        f"{ratio('aster statement, bare driver', 'raw single')}; aster single vs it: "
        f"{ratio('aster single', 'aster statement, bare driver')}",
        "- the statement with `registry.new_task` before each send vs the statement alone: "
        f"{ratio('aster statement + new_task, bare driver', 'aster statement, bare driver')}"
        f" ({_cost('aster statement + new_task, bare driver', 'aster statement, bare driver', med)}"
        " per call in place)",
        "- a task row inserted with nothing returned and no NOTIFY (no enqueue that "
        "returns the task id can cost less): "
        f"{ratio('task row INSERT, nothing returned', 'pgqueuer single')} vs pgqueuer, "
        f"{ratio('task row INSERT, nothing returned', 'raw single')} vs raw INSERT",
        f"- bulk vs pgqueuer: {ratio('aster bulk', 'pgqueuer bulk')} (goal >= 1x)",
        f"- one enqueue per call with {LISTENERS} process(es) listening on both channels: "
        f"{ratio('aster single, listened', 'pgqueuer single, listened')} vs pgqueuer, "
        f"{ratio('aster single, listened', 'raw single, listened')} vs raw INSERT; "
        "every enqueue carrying its own NOTIFY (no window) vs pgqueuer: "
        f"{ratio('aster single, listened, NOTIFY each', 'pgqueuer single, listened')}; "
        "the window's gain: "
        f"{ratio('aster single, listened', 'aster single, listened, NOTIFY each')}",
        "- idle loop between calls (each call checks a connection out; no reuse): "
        f"{ratio('aster single, idle loop', 'pgqueuer single')} vs pgqueuer, "
        f"{ratio('aster single, idle loop', 'raw single')} vs raw INSERT; the same with "
        "`pool_pre_ping` (a ping per checkout) vs without: "
        f"{ratio('aster single, idle loop, pool_pre_ping', 'aster single, idle loop')}",
        "- a Forge as users open it (`task.enqueue(n)`, payload validated) vs pgqueuer: "
        f"back to back {ratio('forge single', 'pgqueuer single')}, loop idle between "
        f"calls {ratio('forge single, idle loop', 'pgqueuer single')}; vs the store: "
        f"{ratio('forge single', 'aster single')} and "
        f"{ratio('forge single, idle loop', 'aster single, idle loop')}",
        "",
    ]
    return lines


def main() -> None:
    """Run the rounds and replace ``results/enqueue.md``."""
    started = datetime.now(UTC)
    databases: list[str] = []
    lines = asyncio.run(_run(databases))
    path = _results.write(
        "enqueue.md",
        "Enqueue speed on PostgreSQL",
        [
            "Each round runs every system once, interleaved; the ratios are taken inside "
            "each round (the machine is shared).",
            "",
            *lines,
        ],
        command=_results.command(
            "python -m benchmarks bench_enqueue", "BENCH_QUICK", "BENCH_ENQUEUE_LISTENERS"
        ),
        databases=databases,
        started=started,
    )
    print("\n".join(lines))
    print(f"results written to {path}")


if __name__ == "__main__":
    main()
