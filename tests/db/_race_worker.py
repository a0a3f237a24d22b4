"""A worker process for the multi-process race test (``python -m tests.db._race_worker``).

Protocol on stdin/stdout, one line each: the worker prints ``ready <round>`` and waits
for ``go``; then its contenders race (each on its own connection) for the round's lease
and scheduled firing, and it prints ``{"round": r, "lease": n, "claim": m}``.
"""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import timedelta

from sqlalchemy.ext.asyncio import create_async_engine

from aster_forge.db import RuntimeLeaseDbStore, ScheduledTaskDbStore


async def main(url: str, worker: int, rounds: int, contenders: int, run_id: str) -> None:
    engine = create_async_engine(url, pool_size=contenders, max_overflow=0)
    leases = RuntimeLeaseDbStore(engine)
    catalog = ScheduledTaskDbStore(engine)
    loop = asyncio.get_running_loop()
    try:
        for round_no in range(rounds):
            sys.stdout.write(f"ready {round_no}\n")
            sys.stdout.flush()
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if line.strip() != "go":
                return
            owners = [f"p{worker}-c{index}" for index in range(contenders)]
            lease_results = await asyncio.gather(
                *(
                    leases.try_acquire(f"{run_id}-lease-{round_no}", owner, timedelta(hours=1))
                    for owner in owners
                )
            )
            claim_results = await asyncio.gather(
                *(
                    catalog.claim_scheduled_task(
                        run_id, f"job-{round_no}", owner, timedelta(hours=1)
                    )
                    for owner in owners
                )
            )
            result = {
                "round": round_no,
                "lease": sum(r is not None for r in lease_results),
                "claim": sum(r is not None for r in claim_results),
            }
            sys.stdout.write(json.dumps(result) + "\n")
            sys.stdout.flush()
    finally:
        await engine.dispose()


if __name__ == "__main__":
    url, worker, rounds, contenders, run_id = sys.argv[1:6]
    asyncio.run(main(url, int(worker), int(rounds), int(contenders), run_id))
