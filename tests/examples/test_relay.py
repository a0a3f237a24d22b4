"""examples/relay as deployed: the web process under uvicorn (no workers) and two
``aster-forge worker`` processes on one PostgreSQL database, delivering to a subscriber
served here (it answers after 100 ms, as a remote endpoint would). Events are posted
concurrently, some twice; one worker is SIGKILLed while it runs deliveries and
restarted; the web process's probes are polled every 50 ms throughout. Every event must
be recorded delivered exactly once and reach the subscriber, nothing left pending or
running, every probe 200.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
import uvicorn
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

import aster_forge

from ..cli._support import cli_env, free_port
from ..conftest import drop_all_tables

pytestmark = [pytest.mark.postgres, pytest.mark.parametrize("backend", ["postgres"], indirect=True)]

RELAY = Path(__file__).resolve().parents[2] / "examples" / "relay"
CLI = Path(sys.executable).parent / "aster-forge"
# The subprocesses import the aster_forge this test imports (this checkout's source).
SOURCE = str(Path(aster_forge.__file__).resolve().parents[1])
PROBE_EVERY = 0.05
SUBSCRIBER_LATENCY = 0.1
REPLAY_EVERY = 10  # every tenth event is sent twice, as a sender's retry

_STATUSES = sa.text("SELECT status, count(*) FROM background_tasks GROUP BY status")
_RUNNING_BY = sa.text(
    "SELECT claimed_by, count(*) FROM background_tasks WHERE status = 'running' GROUP BY claimed_by"
)
_DELIVERIES = sa.text(
    "SELECT count(*), count(DISTINCT event_id), count(*) FILTER (WHERE status_code = 200)"
    " FROM deliveries"
)
_EVENT_IDS = sa.text("SELECT id FROM events")
_RESCUED = sa.text(
    "SELECT failure_reason, last_error, count(*) FROM background_tasks WHERE attempt > 0"
    " GROUP BY failure_reason, last_error"
)


@dataclass
class Probes:
    """Every poll of the web process's probes, and those that were not 200."""

    polls: int = 0
    failures: list[str] = field(default_factory=list)
    slowest: float = 0.0  # seconds, the longest answer


@dataclass
class Kill:
    """The SIGKILLs: how many, the last one's pid and the tasks it left running."""

    kills: int = 0
    pid: int = 0
    orphaned: int = 0


class Subscriber:
    """The endpoint the relay delivers to: counts each Idempotency-Key it receives."""

    def __init__(self) -> None:
        self.port = free_port()
        self.received: Counter[str] = Counter()
        self.mismatched = 0
        self._lock = threading.Lock()

    async def hook(self, request: Request) -> Response:
        event = await request.json()
        await asyncio.sleep(SUBSCRIBER_LATENCY)
        with self._lock:
            key = request.headers.get("idempotency-key", "")
            self.received[key] += 1
            self.mismatched += key != event.get("id")
        return Response(status_code=200)

    @contextlib.contextmanager
    def serving(self) -> Iterator[str]:
        """Serve on 127.0.0.1 in a thread of its own; yield the hook's URL."""
        app = Starlette(routes=[Route("/hooks", self.hook, methods=["POST"])])
        config = uvicorn.Config(app, port=self.port, log_level="warning", lifespan="off")
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, name="relay-subscriber", daemon=True)
        thread.start()
        try:
            for _ in range(400):
                if server.started:
                    break
                threading.Event().wait(0.025)
            assert server.started, "the subscriber did not start"
            yield f"http://127.0.0.1:{self.port}/hooks"
        finally:
            server.should_exit = True
            thread.join(20)


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:]


class Relay:
    """The relay's processes, started from ``examples/relay`` as its README says."""

    def __init__(self, url: str, target: str, logs: Path) -> None:
        path = os.pathsep.join([SOURCE, *filter(None, [cli_env().get("PYTHONPATH")])])
        self.env = cli_env(
            RELAY_DATABASE_URL=url,
            RELAY_TARGET_URL=target,
            RELAY_ADMIN_TOKEN="relay-admin-token",
            PYTHONPATH=path,
        )
        self.logs = logs
        self.web_port = free_port()
        self.web: asyncio.subprocess.Process | None = None
        self.workers: list[asyncio.subprocess.Process] = []
        self.started = 0

    async def _spawn(self, log: Path, *command: str) -> asyncio.subprocess.Process:
        with log.open("ab") as out:
            return await asyncio.create_subprocess_exec(
                *command, cwd=RELAY, env=self.env, stdout=out, stderr=subprocess.STDOUT
            )

    async def _wait_200(self, process: asyncio.subprocess.Process, url: str, log: Path) -> None:
        async with httpx.AsyncClient(timeout=5) as client:
            for _ in range(600):
                assert process.returncode is None, f"exited: {_tail(log)}"
                with contextlib.suppress(httpx.TransportError):
                    if (await client.get(url)).status_code == 200:
                        return
                await asyncio.sleep(0.05)
        raise AssertionError(f"{url} never answered 200: see {log}")

    async def migrate(self) -> None:
        log = self.logs / "migrate.log"
        migrated = await self._spawn(log, str(CLI), "migrate", "relay.app:forge")
        assert await migrated.wait() == 0, _tail(log)

    async def start_web(self) -> None:
        log = self.logs / "web.log"
        self.web = await self._spawn(
            log,
            *(sys.executable, "-m", "uvicorn", "relay.app:app", "--no-access-log"),
            *("--port", str(self.web_port)),
        )
        await self._wait_200(self.web, f"http://127.0.0.1:{self.web_port}/ops/readyz", log)

    async def start_worker(self) -> asyncio.subprocess.Process:
        self.started += 1
        log = self.logs / f"worker-{self.started}.log"
        port = free_port()
        worker = await self._spawn(
            log, str(CLI), "worker", "relay.app:forge", "--http", f"127.0.0.1:{port}"
        )
        self.workers.append(worker)  # before the wait: stop() ends it if the test fails
        await self._wait_200(worker, f"http://127.0.0.1:{port}/livez", log)
        return worker

    async def stop(self) -> list[int]:
        """SIGTERM every live process; their exit codes, workers first."""
        processes = [*self.workers, *([self.web] if self.web else [])]
        for process in processes:
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
        return [await asyncio.wait_for(p.wait(), 60) for p in processes]


@pytest.fixture
async def relay_engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    """An engine on an empty database (every table dropped before and after)."""
    engine = create_async_engine(database_url)
    try:
        await drop_all_tables(engine)
        yield engine
        await drop_all_tables(engine)
    finally:
        await engine.dispose()


async def _statuses(engine: AsyncEngine) -> dict[str, int]:
    async with engine.connect() as conn:
        return {str(status): int(n) for status, n in await conn.execute(_STATUSES)}


async def _running_by_pid(engine: AsyncEngine) -> dict[int, int]:
    # claimed_by is the forge's instance id, "host:pid:uuid".
    async with engine.connect() as conn:
        rows = await conn.execute(_RUNNING_BY)
        return {int(str(owner).rsplit(":", 2)[1]): int(n) for owner, n in rows}


async def _poll_probes(base: str, probes: Probes, stop: asyncio.Event) -> None:
    """GET each probe every 50 ms (each on its own loop) until ``stop``."""

    async def poll(client: httpx.AsyncClient, path: str) -> None:
        while not stop.is_set():
            probes.polls += 1
            asked = asyncio.get_running_loop().time()
            try:
                answer = await client.get(path)
            except httpx.HTTPError as exc:
                probes.failures.append(f"{path}: {type(exc).__name__}")
            else:
                took = asyncio.get_running_loop().time() - asked
                probes.slowest = max(probes.slowest, took)
                if answer.status_code != 200:
                    probes.failures.append(f"{path}: {answer.status_code} {answer.text!r}")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), PROBE_EVERY)

    async with httpx.AsyncClient(base_url=base, timeout=5) as client, asyncio.TaskGroup() as tg:
        for path in ("/ops/livez", "/ops/readyz"):
            tg.create_task(poll(client, path))


async def _post_events(base: str, ids: list[str]) -> dict[str, list[tuple[int, bool]]]:
    """POST every event (the replays among them), 16 at a time: each id's answers."""
    answers: dict[str, list[tuple[int, bool]]] = {}
    gate = asyncio.Semaphore(16)

    async def post(client: httpx.AsyncClient, event_id: str) -> None:
        async with gate:
            event = {"id": event_id, "type": "order.paid", "data": {"order": event_id}}
            answer = await client.post("/events", json=event)
        assert answer.status_code == 202, f"{event_id}: {answer.status_code} {answer.text}"
        body = answer.json()
        answers.setdefault(event_id, []).append((int(body["task_id"]), bool(body["duplicate"])))

    async with httpx.AsyncClient(base_url=base, timeout=30) as client, asyncio.TaskGroup() as tg:
        for event_id in ids:
            tg.create_task(post(client, event_id))
    return answers


async def _kill_a_busy_worker(relay: Relay, engine: AsyncEngine, total: int) -> Kill:
    """Once a quarter of the tasks succeeded, SIGKILL the worker the database shows
    running the most tasks (two at least) and restart it. A kill that left none of its
    tasks running (they all finished in between) is tried again, up to three kills."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 120
    while (await _statuses(engine)).get("succeeded", 0) < total // 4:
        assert loop.time() < deadline, "the workers did not get going"
        await asyncio.sleep(0.02)
    kill = Kill()
    while kill.orphaned == 0 and kill.kills < 3:
        pids = {worker.pid: worker for worker in relay.workers}
        while True:
            running = {pid: n for pid, n in (await _running_by_pid(engine)).items() if pid in pids}
            if running and max(running.values()) >= 2:
                break
            assert loop.time() < deadline, "no worker was running tasks to be killed"
            await asyncio.sleep(0.005)
        victim = pids[max(running, key=running.__getitem__)]
        victim.send_signal(signal.SIGKILL)
        await victim.wait()
        relay.workers.remove(victim)
        kill.kills += 1
        kill.pid = victim.pid
        kill.orphaned = (await _running_by_pid(engine)).get(victim.pid, 0)
        await relay.start_worker()
    return kill


async def _run_relay(engine: AsyncEngine, url: str, tmp_path: Path, *, total: int) -> None:
    loop = asyncio.get_running_loop()
    began = loop.time()
    ids = [f"evt-{n:05d}" for n in range(total)]
    sent = ids + ids[::REPLAY_EVERY]  # the replays go out after their first sending
    subscriber = Subscriber()
    stop = asyncio.Event()
    probes = Probes()
    with subscriber.serving() as target:
        relay = Relay(url, target, tmp_path)
        await relay.migrate()
        tasks: list[asyncio.Task[object]] = []
        try:
            await relay.start_web()
            base = f"http://127.0.0.1:{relay.web_port}"
            probing = loop.time()
            tasks.append(poller := asyncio.create_task(_poll_probes(base, probes, stop)))
            for _ in range(2):
                await relay.start_worker()
            tasks.append(killer := asyncio.create_task(_kill_a_busy_worker(relay, engine, total)))
            answers = await _post_events(base, sent)
            kill = await killer
            deadline = loop.time() + 60 + total / 20
            while (statuses := await _statuses(engine)).get("succeeded", 0) < total:
                if loop.time() > deadline:
                    break
                await asyncio.sleep(0.05)
            stop.set()
            await poller
            probing = loop.time() - probing
        finally:
            stop.set()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            codes = await relay.stop()
    elapsed = loop.time() - began
    async with engine.connect() as conn:
        deliveries, delivered_events, answered_200 = (await conn.execute(_DELIVERIES)).one()
        events = {str(event_id) for event_id in (await conn.execute(_EVENT_IDS)).scalars()}
        retried = {
            f"{reason}: {error}": int(n) for reason, error, n in await conn.execute(_RESCUED)
        }
    rescued = sum(retried.values())
    sent_again = sum(subscriber.received.values()) - len(subscriber.received)
    summary = (
        f"relay: {total} events ({len(sent) - total} posted twice); tasks {statuses}; "
        f"deliveries recorded {deliveries} for {delivered_events} events; subscriber got "
        f"{len(subscriber.received)} events, {sent_again} sent again; "
        f"{kill.kills} SIGKILL(s) + restart, the last with {kill.orphaned} tasks running; "
        f"tasks rescued {rescued} {retried}; "
        f"web probes {probes.polls} polls over {probing:.1f} s, "
        f"{len(probes.failures)} not 200, slowest {probes.slowest * 1000:.0f} ms; "
        f"exit codes {codes}; {elapsed:.1f} s in all"
    )
    sys.stderr.write(summary + "\n")
    # Each event id answered one task, created once; its replays found the same task.
    for event_id in ids:
        made = {task_id for task_id, _ in answers[event_id]}
        created = [answer for answer in answers[event_id] if not answer[1]]
        assert len(made) == 1 and len(created) == 1, (event_id, answers[event_id])
    assert statuses == {"succeeded": total}, summary  # none lost, pending, running or failed
    assert events == set(ids), summary
    # Recorded exactly once; sent at least once, again only for a task the kill rescued.
    assert (deliveries, delivered_events, answered_200) == (total, total, total), summary
    assert set(subscriber.received) == set(ids) and subscriber.mismatched == 0, summary
    assert sent_again <= rescued, summary
    assert kill.orphaned > 0 and rescued > 0, summary  # the kill interrupted running deliveries
    assert probes.failures == [] and probes.polls >= 2 * probing, (summary, probes.failures)
    # Workers exit 0 on SIGTERM; uvicorn re-raises the SIGTERM it handled.
    assert codes[:-1] == [0, 0] and codes[-1] in (0, -signal.SIGTERM), summary


async def test_the_relay_survives_a_killed_worker(
    relay_engine: AsyncEngine, database_url: str, tmp_path: Path
) -> None:
    await _run_relay(relay_engine, database_url, tmp_path, total=400)


@pytest.mark.slow
@pytest.mark.timeout(600)
async def test_the_relay_runs_2000_tasks_through_a_killed_worker(
    relay_engine: AsyncEngine, database_url: str, tmp_path: Path
) -> None:
    await _run_relay(relay_engine, database_url, tmp_path, total=2_000)
