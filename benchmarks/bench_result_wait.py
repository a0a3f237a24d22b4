"""How soon ``await forge.result(...)`` returns after the task ends, polled vs pushed.

On a throwaway PostgreSQL database: one task is enqueued, a waiter starts, and after
the waiter has waited a while (the longer it waited, the longer a backed-off poll
sleeps) the task is claimed and its success written through the store. The figure is
the time from sending that write until the waiter returns: the write itself, then the
waiter's next read (polled: the store read again, 10 ms doubling up to 1 s, as on
SQLite and MariaDB) or the NOTIFY the write sends for an awaited task and one read
(pushed: what ``forge.result`` does on PostgreSQL). Polled and pushed waits alternate.
Results replace ``benchmarks/results/result-wait.md``.

Run: ``python -m benchmarks bench_result_wait``; ``BENCH_QUICK=1`` for fewer rounds (its
file goes to a scratch directory, see ``_results.py``).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import statistics
import time
from datetime import timedelta

from aster_forge import Forge, ForgeTask
from aster_forge.forge._results import polled
from aster_forge.tasks import TaskLease

from . import _results
from ._common import create_postgres_database, drop_postgres_database, load_average

LANE = "wait"
WAITED = (0.05, 0.5, 2.0)
"""How long the waiter has waited when the task ends (seconds)."""


async def _once(forge: Forge, task: ForgeTask, *, pushed: bool, waited: float) -> float:
    """Milliseconds from sending the success until the waiter returned."""
    backend = forge.backend
    store = backend.database_task_store("the benchmark")
    made = await task.enqueue(1)
    returned: list[float] = []

    async def wait() -> None:
        if pushed:
            await backend.finished(made.task_id)
        else:
            await polled(store, made.task_id)
        returned.append(time.perf_counter())

    waiter = asyncio.create_task(wait(), name="bench-waiter")
    await asyncio.sleep(waited)
    [record] = await store.claim_due_for_lane(LANE, 1, "bench", timedelta(minutes=1))
    assert record.processing_token is not None and record.lease_expires_at is not None
    lease = TaskLease(record.id, record.processing_token, record.lease_expires_at)
    sent = time.perf_counter()
    assert await store.mark_task_succeeded(lease, "1", None)
    await waiter
    return (returned[0] - sent) * 1000


async def _run(url: str, rounds: int) -> list[str]:
    forge = Forge(url, create_tables=True)
    forge.lane(LANE)

    @forge.task(lane=LANE)
    async def noop(n: int) -> int:
        return n

    await forge.migrate()
    lines = [
        "| the task ends after the waiter waited | polled p50 | polled max "
        "| pushed p50 | pushed max |",
        "|---:|---:|---:|---:|---:|",
    ]
    try:
        await _once(forge, noop, pushed=True, waited=0.01)  # the listener connects
        for waited in WAITED:
            samples: dict[bool, list[float]] = {False: [], True: []}
            for _ in range(rounds):
                for pushed in (False, True):
                    samples[pushed].append(await _once(forge, noop, pushed=pushed, waited=waited))
            cells = [
                f"{figure:,.1f} ms"
                for pushed in (False, True)
                for figure in (statistics.median(samples[pushed]), max(samples[pushed]))
            ]
            lines.append(f"| {waited:g} s | " + " | ".join(cells) + " |")
    finally:
        await forge.aclose()
    return [
        *lines,
        "",
        f"{rounds} waits of each kind per row, alternating; the figure runs from sending "
        "the success write (its own round trip included) until the waiter returned.",
    ]


async def main() -> None:
    """Run the result-wait benchmark on a throwaway PostgreSQL database."""
    url = await create_postgres_database("af_bench_result_wait")
    if url is None:
        return
    started = dt.datetime.now(dt.UTC)
    try:
        load = load_average()
        database = await _results.database_version(url)
        lines = await _run(url, 5 if _results.quick() else 20)
    finally:
        await drop_postgres_database(url)
    path = _results.write(
        "result-wait.md",
        "Awaiting a result: polled against pushed",
        [f"1-minute load average at start {load:.1f}.", "", *lines],
        command=_results.command("python -m benchmarks bench_result_wait", "BENCH_QUICK"),
        databases=[database],
        started=started,
    )
    print(path.read_text(encoding="utf-8"), flush=True)
    print(f"results written to {path}")


if __name__ == "__main__":
    asyncio.run(main())
