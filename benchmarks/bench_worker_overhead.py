"""The worker's own CPU per task, with a store that answers at once (no database).

Every head-to-head figure mixes three costs: the database's statement time, the
driver's encoding and decoding, and the library's own Python (claim bookkeeping,
the execution object, the heartbeat registration, the outcome and the stats). This
benchmark isolates the last one: a worker drains tasks from a store whose
every call yields to the event loop once (as a statement's round trip would) and then
answers with records claimed before the timing, so what is timed is the worker and the
benchmark's no-op body. It runs the worker path the PostgreSQL store uses: successes
written in batches that also claim the freed slots, two such writes in flight. The
worker is a :class:`TaskWorker` over one lane, run until every task succeeded.

The figure is process CPU time per task (``time.process_time``), less noisy than
throughput against a database on a shared machine; wall time is shown beside it.
Every task must run exactly once and be reported succeeded.

Run: ``python -m benchmarks bench_worker_overhead`` (part of ``make bench``); against
another tree, e.g. the commit before a change: ``PYTHONPATH=<tree>/src
BENCH_RESULTS_DIR=/tmp/before python -m benchmarks bench_worker_overhead``. Results
replace ``benchmarks/results/worker-overhead.md`` (``BENCH_RESULTS_DIR``: elsewhere).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from aster_forge import BackgroundTaskRecord
from aster_forge.runtime import CancellationToken
from aster_forge.tasks import (
    ClaimedTaskExecutionConfig,
    DispatchPollConfig,
    NewTask,
    TaskLaneConfig,
    TaskWorker,
)
from aster_forge.tasks._rate_limit import TaskRateLimit
from aster_forge.tasks._records import TaskCompletion
from aster_forge.testing import InMemoryTaskStore

from . import _aster, _results
from ._common import load_average

TASKS = int(os.environ.get("BENCH_WORKER_OVERHEAD_TASKS", "20000"))
ROUNDS = int(os.environ.get("BENCH_WORKER_OVERHEAD_ROUNDS", "5"))
CONCURRENCY = (1, 10, 50)
_LEASE_TTL = timedelta(seconds=60)
_POLL = DispatchPollConfig(
    base_interval=timedelta(milliseconds=50), max_interval=timedelta(milliseconds=500)
)


class InstantStore(InMemoryTaskStore):
    """Answers claims and success writes at once, from records built in advance.

    Each call yields to the event loop once before it answers. Successes are counted,
    not stored; a success for a claim this store did not hand out is an error.
    """

    claims_with_success = True
    success_writes_in_flight = 2

    def __init__(self, records: Sequence[BackgroundTaskRecord]) -> None:
        super().__init__()
        self._ready = list(records)
        self._next = 0
        self._out: set[tuple[int, str | None]] = set()
        self.succeeded = 0
        self.done = asyncio.Event()

    def _take(self, limit: int) -> list[BackgroundTaskRecord]:
        taken = self._ready[self._next : self._next + max(limit, 0)]
        self._next += len(taken)
        self._out.update((record.id, record.processing_token) for record in taken)
        return taken

    def _written(self, completions: Sequence[TaskCompletion]) -> list[bool]:
        for completion in completions:
            self._out.remove((completion.lease.task_id, completion.lease.processing_token))
        self.succeeded += len(completions)
        if self.succeeded == len(self._ready):
            self.done.set()
        return [True] * len(completions)

    async def claim_due_for_lane(
        self,
        lane: str,
        limit: int,
        owner: str,
        lease_ttl: timedelta,
        *,
        cluster_limit: int | None = None,
        partition_limit: int | None = None,
        rate_limit: TaskRateLimit | None = None,
        partition_rate_limit: TaskRateLimit | None = None,
    ) -> list[BackgroundTaskRecord]:
        """Up to ``limit`` of the prepared records."""
        await asyncio.sleep(0)
        return self._take(limit)

    async def mark_tasks_succeeded_many(self, completions: Sequence[TaskCompletion]) -> list[bool]:
        """Count the successes (every one applied)."""
        await asyncio.sleep(0)
        return self._written(completions)

    async def mark_tasks_succeeded_and_claim(
        self,
        completions: Sequence[TaskCompletion],
        lane: str,
        limit: int,
        owner: str,
        lease_ttl: timedelta,
        *,
        cluster_limit: int | None = None,
        partition_limit: int | None = None,
        rate_limit: TaskRateLimit | None = None,
        partition_rate_limit: TaskRateLimit | None = None,
    ) -> tuple[list[bool], list[BackgroundTaskRecord]]:
        """Count the successes and hand out up to ``limit`` more records."""
        await asyncio.sleep(0)
        return self._written(completions), self._take(limit)


async def _claimed(count: int) -> list[BackgroundTaskRecord]:
    """``count`` no-op tasks as a claim returns them (enqueued and claimed in memory)."""
    store = InMemoryTaskStore()
    kind, lane = _aster.Kind.NOOP.value, _aster.Lane.DEFAULT.value
    await store.enqueue_many([NewTask(kind, lane, payload_json=str(n)) for n in range(count)])
    return await store.claim_due_for_lane(lane, count, "bench", _LEASE_TTL)


async def drain(count: int, concurrency: int) -> tuple[float, float]:
    """One worker drains ``count`` tasks; (CPU seconds, wall seconds) per task."""
    store = InstantStore(await _claimed(count))
    state = _aster.State()
    worker = TaskWorker(
        store,
        lanes=[TaskLaneConfig(_aster.Lane.DEFAULT, concurrency)],
        execution=ClaimedTaskExecutionConfig(
            state=state, registry=_aster.REGISTRY, lease_ttl=_LEASE_TTL
        ),
        poll=_POLL,
    )
    token = CancellationToken()
    cpu, wall = time.process_time(), time.perf_counter()
    serving = asyncio.create_task(worker.run(token), name="bench-worker-overhead")
    await store.done.wait()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    token.cancel()
    await serving
    ran_twice = [task_id for task_id, runs in state.executed.items() if runs != 1]
    if len(state.executed) != count or ran_twice or store.succeeded != count:
        raise SystemExit(f"not every task ran once and succeeded (c={concurrency})")
    return cpu / count, wall / count


async def main() -> None:
    """Time the worker at each concurrency; replace ``results/worker-overhead.md``."""
    started = datetime.now(UTC)
    await drain(min(TASKS, 2000), 10)  # imports, caches and the allocator warm up
    lines = [
        f"- {TASKS:,} no-op tasks per round, {ROUNDS} rounds (medians); load average "
        f"{load_average():.2f}",
        "",
        "| concurrency | CPU per task | wall per task | rounds (CPU) |",
        "|---:|---:|---:|---|",
    ]
    for concurrency in CONCURRENCY:
        rounds = [await drain(TASKS, concurrency) for _ in range(ROUNDS)]
        cpu = [c * 1e6 for c, _ in rounds]
        wall = statistics.median(w for _, w in rounds) * 1e6
        each = ", ".join(f"{c:.1f}" for c in cpu)
        lines.append(
            f"| {concurrency} | {statistics.median(cpu):.1f} us | {wall:.1f} us | {each} |"
        )
        print(lines[-1], flush=True)
    path = _results.write(
        "worker-overhead.md",
        "The worker's own CPU per task (a store that answers at once)",
        lines,
        command=_results.command(
            "python -m benchmarks bench_worker_overhead",
            "BENCH_WORKER_OVERHEAD_TASKS",
            "BENCH_WORKER_OVERHEAD_ROUNDS",
        ),
        started=started,
    )
    print(f"results written to {path}")
