"""A process of the dedupe window race (``python -m tests.db._dedupe_window_worker``).

Args: URL TABLE RUN_ID KEYS CONTENDERS. Prints ``ready``; for each ``go`` line on stdin
races CONTENDERS enqueues (own connections) of each key with ``held_while={PENDING}``
and prints one JSON line ``{"key": [created_count, [ids...]], ...}``; exits on ``stop``.
"""

from __future__ import annotations

import asyncio
import json
import sys

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from aster_forge import TaskStatus
from aster_forge.db import BackgroundTaskDbStore, background_tasks_table
from aster_forge.tasks import NewTask, TaskDedupeKey

LANE = "race-window"


async def main(url: str, table: str, run_id: str, keys: int, contenders: int) -> None:
    engine = create_async_engine(url, pool_size=contenders, max_overflow=0)
    store = BackgroundTaskDbStore(engine, table=background_tasks_table(sa.MetaData(), table))
    loop = asyncio.get_running_loop()
    pending = frozenset({TaskStatus.PENDING})
    try:
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        while (await loop.run_in_executor(None, sys.stdin.readline)).strip() == "go":
            out: dict[str, list[object]] = {}
            for index in range(keys):
                key = f"{run_id}:{index}"
                task = NewTask("k", LANE, dedupe_key=TaskDedupeKey(key, held_while=pending))
                results = await asyncio.gather(*(store.enqueue(task) for _ in range(contenders)))
                out[key] = [sum(r.created for r in results), sorted({r.record.id for r in results})]
            sys.stdout.write(json.dumps(out) + "\n")
            sys.stdout.flush()
    finally:
        await engine.dispose()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])))
