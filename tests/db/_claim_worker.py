"""A worker in another process (``python -m tests.db._claim_worker URL LANE``).

Claims everything due on LANE once through its own engine and store, and prints the
claimed task ids as one JSON list.
"""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import timedelta

from sqlalchemy.ext.asyncio import create_async_engine

from aster_forge.db import BackgroundTaskDbStore


async def main(url: str, lane: str) -> None:
    engine = create_async_engine(url)
    try:
        store = BackgroundTaskDbStore(engine)
        claimed = await store.claim_due_for_lane(lane, 100, "other-process", timedelta(minutes=5))
        sys.stdout.write(json.dumps(sorted(record.id for record in claimed)) + "\n")
    finally:
        await engine.dispose()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
