"""Scenario (a) against pgqueuer, interleaved round by round, as ratios of medians.

Each round burns down N pre-enqueued no-op tasks with aster-forge, then with pgqueuer in
its default configuration (``QueueManager.run(batch_size=C)``, no ``concurrency_limit``:
what its users run), once on asyncio's own event loop (``asyncio.run``, as aster-forge
runs here) and once on uvloop (as its ``pgq run`` command runs a worker: pgqueuer
depends on uvloop on Linux and its CLI picks it), then with pgqueuer capped
(``concurrency_limit=C``, the hard limit a lane's ``max_concurrency`` gives), on the
same PostgreSQL database, every job checked to have run exactly once. Interleaving the
systems makes their ratio meaningful on a shared machine; the load average is printed
before and after. SQLite (aster-forge only) runs last at the same concurrencies.

Run: ``python -m benchmarks.head_to_head --count 5000 --rounds 3`` (``--concurrency``
to choose, default 1 10 50).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
from pathlib import Path

from . import _aster, _peers
from ._common import create_postgres_database, drop_postgres_database, load_average

SYSTEMS = (
    "aster-forge",
    "pgqueuer (default)",
    "pgqueuer (default, uvloop as `pgq run`)",
    "pgqueuer (concurrency_limit=C)",
)


async def _round(url: str, count: int, concurrency: int) -> dict[str, float]:
    rates = {"aster-forge": (await _aster.burn_down(url, count, concurrency)).rate}
    for label, scenario in zip(SYSTEMS[1:], ("burn", "burn-uvloop", "burn-capped"), strict=True):
        result = await _peers.run_peer("pgqueuer", scenario, url, count, concurrency)
        rates[label] = float(result["rate"])
    return rates


async def run(count: int, rounds: int, concurrencies: list[int]) -> None:
    """Print one Markdown table row per concurrency (medians and ratios)."""
    problem = _peers.ensure_peers_venv()
    if problem is not None:
        raise SystemExit(f"pgqueuer is needed: {problem}")
    url = await create_postgres_database("af_head_to_head")
    if url is None:
        raise SystemExit("PostgreSQL is not reachable (ASTER_FORGE_TEST_POSTGRES_URL)")
    print(f"load average at start {load_average():.2f}; N={count:,}, {rounds} rounds (medians)")
    print(
        "| PostgreSQL, 1 process | "
        + " | ".join(SYSTEMS)
        + " | vs default | vs default on uvloop | vs capped |"
    )
    print("|---|" + "---:|" * (len(SYSTEMS) + 3))
    try:
        for concurrency in concurrencies:
            samples = [await _round(url, count, concurrency) for _ in range(rounds)]
            med = {name: statistics.median(s[name] for s in samples) for name in SYSTEMS}
            ours = med["aster-forge"]
            print(
                f"| concurrency {concurrency} | "
                + " | ".join(f"{med[name]:,.0f}/s" for name in SYSTEMS)
                + "".join(f" | {ours / med[name]:.2f}x" for name in SYSTEMS[1:])
                + " |",
                flush=True,
            )
    finally:
        await drop_postgres_database(url)
    with tempfile.TemporaryDirectory(prefix="af-h2h-") as tmp:
        for concurrency in concurrencies:
            rates = []
            for n in range(rounds):
                sqlite = f"sqlite+aiosqlite:///{Path(tmp) / f'b{concurrency}-{n}.db'}"
                rates.append((await _aster.burn_down(sqlite, count, concurrency)).rate)
            print(f"SQLite, concurrency {concurrency}: {statistics.median(rates):,.0f}/s")
    print(f"load average at end {load_average():.2f}")


def main() -> None:
    """Parse the command line and run."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.head_to_head")
    parser.add_argument("--count", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, nargs="*", default=[1, 10, 50])
    args = parser.parse_args()
    asyncio.run(run(args.count, args.rounds, args.concurrency))


if __name__ == "__main__":
    main()
