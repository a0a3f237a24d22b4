"""Scenario (a) against pgqueuer, interleaved round by round, as ratios of medians.

Each round burns down N pre-enqueued no-op tasks with aster-forge and with pgqueuer, on
the same PostgreSQL database, every job checked to have run exactly once, each run in a
fresh process:

- aster-forge on asyncio's own event loop, and on uvloop (what ``aster-forge worker``
  runs on when uvloop is installed: the ``uvloop`` extra, or uvicorn's standard one);
- pgqueuer in its default configuration (``QueueManager.run(batch_size=C)``, no
  ``concurrency_limit``: what its users run), on asyncio's loop and on uvloop (its
  ``pgq run`` command runs workers on uvloop, a dependency of pgqueuer on Linux);
- pgqueuer capped (``concurrency_limit=C``, the hard limit a lane's
  ``max_concurrency`` gives), on asyncio's loop;
- aster-forge in pgqueuer's default shape: each claim takes at most C tasks
  (``claim_batch=C``) and the lane has no practical cap, on asyncio's loop.

The ratios compare like with like: aster-forge capped at C (a lane's
``max_concurrency``, the first column) against pgqueuer on asyncio (its default, which
has no cap: the strictest comparison; and capped), both on uvloop, and both in
pgqueuer's default shape (C tasks per claim, no cap). Interleaving the systems makes
their ratio meaningful on a shared machine; the load average is printed before and
after. SQLite (aster-forge only, asyncio) runs first, at the same concurrencies, before
any PostgreSQL round (see :func:`_sqlite_rates`).

Below the table, the first ratio of every round: on a shared machine it moves from
round to round more than the medians show.

Run: ``python -m benchmarks.head_to_head --count 5000 --rounds 3`` (``--concurrency``
to choose, default 1 10 50).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
from pathlib import Path

from . import _peers
from ._common import (
    create_postgres_database,
    drop_postgres_database,
    json_of_process,
    load_average,
)

HERE = Path(__file__).resolve().parent.parent

SYSTEMS = (
    "aster-forge",
    "aster-forge on uvloop",
    "pgqueuer (default)",
    "pgqueuer (default) on uvloop, as `pgq run`",
    "pgqueuer (concurrency_limit=C)",
    "aster-forge, claim_batch=C, no cap",
)
# (ours, theirs, column): each ratio compares runs on the same event loop.
RATIOS = (
    (SYSTEMS[0], SYSTEMS[2], "vs default"),
    (SYSTEMS[1], SYSTEMS[3], "on uvloop: vs default on uvloop"),
    (SYSTEMS[0], SYSTEMS[4], "vs capped"),
    (SYSTEMS[5], SYSTEMS[2], "no cap: vs default"),
)

# One burn-down of aster-forge in a process of its own, on the chosen event loop.
_CHILD = """
import asyncio, json, sys
from benchmarks import _aster

async def main(url: str, count: int, concurrency: int, uncapped: bool) -> None:
    result = await _aster.burn_down(url, count, concurrency, uncapped=uncapped)
    print(json.dumps({"rate": result.rate}))

url, count, concurrency, loop = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
uncapped = sys.argv[5] == "uncapped"
if loop == "uvloop":
    import uvloop

    uvloop.run(main(url, count, concurrency, uncapped))
else:
    asyncio.run(main(url, count, concurrency, uncapped))
"""


async def _aster_rate(
    url: str, count: int, concurrency: int, loop: str, *, uncapped: bool = False
) -> float:
    result = await json_of_process(
        sys.executable,
        "-c",
        _CHILD,
        url,
        str(count),
        str(concurrency),
        loop,
        "uncapped" if uncapped else "capped",
        what="aster-forge burn-down",
        cwd=HERE,
    )
    return float(result["rate"])


async def _round(url: str, count: int, concurrency: int) -> dict[str, float]:
    rates = {
        SYSTEMS[0]: await _aster_rate(url, count, concurrency, "asyncio"),
        SYSTEMS[1]: await _aster_rate(url, count, concurrency, "uvloop"),
    }
    for label, scenario in zip(SYSTEMS[2:5], ("burn", "burn-uvloop", "burn-capped"), strict=True):
        result = await _peers.run_peer("pgqueuer", scenario, url, count, concurrency)
        rates[label] = float(result["rate"])
    rates[SYSTEMS[5]] = await _aster_rate(url, count, concurrency, "asyncio", uncapped=True)
    return rates


async def run(count: int, rounds: int, concurrencies: list[int]) -> None:
    """Print one Markdown table row per concurrency (medians and ratios)."""
    problem = _peers.ensure_peers_venv()
    if problem is not None:
        raise SystemExit(f"pgqueuer is needed: {problem}")
    sqlite_rates = await _sqlite_rates(count, rounds, concurrencies)
    url = await create_postgres_database("af_head_to_head")
    if url is None:
        raise SystemExit("PostgreSQL is not reachable (ASTER_FORGE_TEST_POSTGRES_URL)")
    print(f"load average at start {load_average():.2f}; N={count:,}, {rounds} rounds (medians)")
    print(
        "| PostgreSQL, 1 process | "
        + " | ".join(SYSTEMS)
        + " | "
        + " | ".join(column for _, _, column in RATIOS)
        + " |"
    )
    print("|---|" + "---:|" * (len(SYSTEMS) + len(RATIOS)))
    # Per round, the first ratio: the spread a median of a few rounds hides.
    spread: dict[int, list[float]] = {}
    try:
        for concurrency in concurrencies:
            samples = [await _round(url, count, concurrency) for _ in range(rounds)]
            med = {name: statistics.median(s[name] for s in samples) for name in SYSTEMS}
            ours, theirs, _ = RATIOS[0]
            spread[concurrency] = [s[ours] / s[theirs] for s in samples]
            print(
                f"| concurrency {concurrency} | "
                + " | ".join(f"{med[name]:,.0f}/s" for name in SYSTEMS)
                + "".join(f" | {med[ours] / med[theirs]:.2f}x" for ours, theirs, _ in RATIOS)
                + " |",
                flush=True,
            )
    finally:
        await drop_postgres_database(url)
    for concurrency, ratios in spread.items():
        each = ", ".join(f"{ratio:.2f}x" for ratio in ratios)
        print(f"concurrency {concurrency}, {RATIOS[0][2]} per round: {each}")
    for concurrency, rate in sqlite_rates.items():
        print(f"SQLite, concurrency {concurrency}: {rate:,.0f}/s")
    print(f"load average at end {load_average():.2f}")


async def _sqlite_rates(count: int, rounds: int, concurrencies: list[int]) -> dict[int, float]:
    """The median SQLite burn-down rate per concurrency.

    Measured before the PostgreSQL rounds: right after them, while the server and the
    kernel still write back what those rounds left, SQLite's checkpoints wait for the
    same disk, and the runs are slower.
    """
    medians = {}
    with tempfile.TemporaryDirectory(prefix="af-h2h-") as tmp:
        for concurrency in concurrencies:
            rates = []
            for n in range(rounds):
                sqlite = f"sqlite+aiosqlite:///{Path(tmp) / f'b{concurrency}-{n}.db'}"
                rates.append(await _aster_rate(sqlite, count, concurrency, "asyncio"))
            medians[concurrency] = statistics.median(rates)
    return medians


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
