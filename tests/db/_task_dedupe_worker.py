"""A process for the multi-process dedupe race (``python -m tests.db._task_dedupe_worker``).

Args: URL RUN_ID KEYS CONTENDERS. Prints ``ready``, waits for ``go`` on stdin, then for
each key races CONTENDERS enqueues (own connections) and prints one JSON line:
``{"key": [created_count, [ids...]], ...}``.
"""

from __future__ import annotations

import asyncio
import json
import sys

from sqlalchemy.ext.asyncio import create_async_engine

from aster_forge.db import BackgroundTaskDbStore
from aster_forge.tasks import NewTask


async def main(url: str, run_id: str, keys: int, contenders: int) -> None:
    engine = create_async_engine(url, pool_size=contenders, max_overflow=0)
    store = BackgroundTaskDbStore(engine)
    loop = asyncio.get_running_loop()
    try:
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        if (await loop.run_in_executor(None, sys.stdin.readline)).strip() != "go":
            return
        out: dict[str, list[object]] = {}
        for index in range(keys):
            key = f"{run_id}:{index}"
            results = await asyncio.gather(
                *(store.enqueue(NewTask("k", "race", dedupe_key=key)) for _ in range(contenders))
            )
            out[key] = [sum(r.created for r in results), sorted({r.record.id for r in results})]
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()
    finally:
        await engine.dispose()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
