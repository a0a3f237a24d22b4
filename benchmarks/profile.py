"""Where the time goes in scenario (a): cProfile of one burn-down, top 15 frames.

Runs the PostgreSQL (and SQLite) burn-down at concurrency 10 under :mod:`cProfile`,
and replaces ``benchmarks/results/profile.md``: the top 15 frames by own time
and by cumulative time, the SQL round trips per task (statements plus BEGIN/COMMIT of
real transactions, counted with an SQLAlchemy event hook) and the tasks per claim.
cProfile slows Python down, so the rates here are lower than the suite's.

Run: ``python -m benchmarks.profile`` (``BENCH_PROFILE_TASKS``, default 5,000).
"""

from __future__ import annotations

import asyncio
import cProfile
import io
import os
import pstats
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from . import _aster, _results
from ._common import create_postgres_database, drop_postgres_database, load_average

TOP = 15


class _Profile:
    def __init__(self) -> None:
        self.profile = cProfile.Profile()

    def start(self) -> None:
        self.profile.enable()

    def stop(self) -> None:
        self.profile.disable()


def _top(profile: cProfile.Profile, key: str) -> str:
    out = io.StringIO()
    stats = pstats.Stats(profile, stream=out)
    stats.strip_dirs().sort_stats(key).print_stats(TOP)
    lines = out.getvalue().splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("ncalls"))
    return "\n".join(lines[start : start + TOP + 1])


async def _one(url: str, count: int) -> tuple[_aster.BurnDown, _Profile]:
    profile = _Profile()
    result = await _aster.burn_down(url, count, 10, profile=profile, count_round_trips=True)
    return result, profile


async def _run(count: int, databases: list[str]) -> list[str]:
    sections: list[str] = []
    pg = await create_postgres_database("af_bench_profile")
    with tempfile.TemporaryDirectory(prefix="af-profile-") as tmp:
        targets = [("SQLite", f"sqlite+aiosqlite:///{Path(tmp) / 'p.db'}")]
        if pg is not None:
            targets.insert(0, ("PostgreSQL", pg))
        try:
            for name, url in targets:
                databases.append(await _results.database_version(url))
                result, profile = await _one(url, count)
                sections += [
                    f"## {name}: 1 process x concurrency 10, N={count:,}",
                    "",
                    f"- {result.rate:,.0f} tasks/s under cProfile",
                    f"- {result.round_trips_per_task or 0:.2f} SQL round trips per task "
                    "(statements + BEGIN/COMMIT of real transactions)",
                    f"- {result.tasks_per_claim:.1f} tasks per claim statement",
                    "",
                    "Top frames by own time:",
                    "",
                    "```",
                    _top(profile.profile, "tottime"),
                    "```",
                    "",
                    "Top frames by cumulative time:",
                    "",
                    "```",
                    _top(profile.profile, "cumulative"),
                    "```",
                    "",
                ]
        finally:
            if pg is not None:
                await drop_postgres_database(pg)
    return sections


def main() -> None:
    """Profile and write the summary."""
    count = int(os.environ.get("BENCH_PROFILE_TASKS", "5000"))
    started = datetime.now(UTC)
    load = load_average()
    databases: list[str] = []
    sections = asyncio.run(_run(count, databases))
    path = _results.write(
        "profile.md",
        "Profile of scenario (a)",
        [
            f"Load average at start {load:.2f}. cProfile counts each coroutine resumption "
            "as a call.",
            "",
            *sections,
        ],
        command=_results.command("python -m benchmarks.profile", "BENCH_PROFILE_TASKS"),
        databases=databases,
        started=started,
    )
    print(f"profile written to {path}")


if __name__ == "__main__":
    main()
