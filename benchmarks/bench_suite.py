"""The side-by-side benchmark suite: aster-forge, its peers and the raw limit.

Scenarios (every burn-down verifies each task completed exactly once, for every system):

(a) burn-down of N pre-enqueued no-op tasks, one process, concurrency 1, 10, 50
    (``ANALYZE`` after filling, for every system alike); on PostgreSQL aster-forge and
    pgqueuer's default run head to head in ``BENCH_ROUNDS`` rounds (default 3, the
    order alternating), their figures the medians and the goal the median of the
    per-round ratios;
(b) the same with 4 worker processes (PostgreSQL);
(c) steady state: a producer at a fixed rate, enqueue-to-start p50/p99/max;
(d) bulk enqueue (rows/s);
(e) tasks with 3 steps (each step a fenced write);
(f) the scheduled runner: 100 scheduled tasks at 100 ms on 3 instances.

Peers on PostgreSQL, same database, same N and concurrency: pgqueuer and Procrastinate
(in their own venv, see ``_peers.py``), and a bare asyncpg ``SKIP LOCKED`` loop with 1
and 50 rows per claim (the physical limit). Every figure is also given as a ratio to
aster-forge in the same run. Results replace ``benchmarks/results/suite.md``.

Run: ``python -m benchmarks bench_suite`` (``make bench``); ``--quick`` (or
``BENCH_QUICK=1``) for a short development run, whose file goes to a scratch directory
(see ``_results.py``). PostgreSQL comes from ``ASTER_FORGE_TEST_POSTGRES_URL``; a
throwaway database is created and dropped.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from . import _aster, _peers, _raw, _results, _scheduled
from ._common import (
    Report,
    Row,
    create_postgres_database,
    drop_postgres_database,
    load_average,
)


@dataclass(frozen=True)
class Sizes:
    """How big each scenario is."""

    burn: int
    bulk: int
    steps: int
    latency_seconds: float
    scheduled_seconds: float
    concurrency: tuple[int, ...] = (1, 10, 50)


FULL = Sizes(burn=20_000, bulk=100_000, steps=5_000, latency_seconds=10, scheduled_seconds=10)
QUICK = Sizes(burn=3_000, bulk=20_000, steps=1_000, latency_seconds=3, scheduled_seconds=3)


# pgqueuer twice: its default (what its users run: batch_size=C, no concurrency_limit;
# run head to head with aster-forge) and with concurrency_limit=C (a hard cap in SQL,
# the guarantee a lane limit gives).
_BURN_PEERS = (("pgqueuer", "burn-capped"), ("procrastinate", "burn"))
_PEER_LABELS = {
    ("pgqueuer", "burn"): "pgqueuer (default)",
    ("pgqueuer", "burn-capped"): "pgqueuer (concurrency_limit=C)",
}
# aster-forge in pgqueuer's default shape (``claim_batch=C``, no lane cap); the plain
# "aster-forge" rows cap the lane at C (``max_concurrency=C``).
NO_CAP = "aster-forge, claim_batch=C, no cap"


async def _burn_downs(report: Report, backend: str, url: str, sizes: Sizes, peers: bool) -> None:
    n = sizes.burn
    if backend == "postgresql":
        raw1 = await _raw.raw_burn_down(url, n, 1)
        raw50 = await _raw.raw_burn_down(url, n, 50)
    for concurrency in sizes.concurrency:
        setting = f"1 proc x {concurrency}, N={n:,}"
        head_to_head = backend == "postgresql" and peers
        ours_rates, theirs = await _head_to_head(report, url, n, concurrency, head_to_head)
        ours = statistics.median(ours_rates)
        # Counted in a run of its own: counting slows the client.
        counted = await _aster.burn_down(url, min(n, 2000), concurrency, count_round_trips=True)
        note = f"{counted.round_trips_per_task or 0:.2f} SQL round trips/task"
        if len(ours_rates) > 1:
            note += f"; median of {_listed(ours_rates)}"
        report.add(Row("a", backend, "aster-forge", setting, ours, note=note, ratio=1.0))
        if backend != "postgresql":
            continue
        if theirs:
            ratios = [o / t for o, t in zip(ours_rates, theirs, strict=True)]
            report.ratios[concurrency] = ratios
            note = f"median of {_listed(theirs)}"
            rate = statistics.median(theirs)
            label = _PEER_LABELS[("pgqueuer", "burn")]
            report.add(Row("a", backend, label, setting, rate, note=note, ratio=rate / ours))
        # pgqueuer's default shape: C tasks per claim, no cap on the tasks running.
        shaped = await _aster.burn_down(url, n, concurrency, uncapped=True)
        report.add(Row("a", backend, NO_CAP, setting, shaped.rate, ratio=shaped.rate / ours))
        if peers:
            for system, scenario in _BURN_PEERS:
                try:
                    result = await _peers.run_peer(system, scenario, url, n, concurrency)
                except RuntimeError as exc:
                    report.notes.append(str(exc))
                    continue
                rate = float(result["rate"])
                label = _PEER_LABELS.get((system, scenario), system)
                report.add(Row("a", backend, label, setting, rate, ratio=rate / ours))
        for label, rate in (
            ("raw asyncpg 1 row/claim", raw1),
            ("raw asyncpg 50 rows/claim", raw50),
        ):
            report.add(
                Row("a", backend, label, setting, rate, note="1 connection", ratio=rate / ours)
            )


def _rounds() -> int:
    return max(int(os.environ.get("BENCH_ROUNDS", "3")), 1)


def _listed(values: list[float]) -> str:
    return ", ".join(f"{value:,.0f}" for value in values)


async def _head_to_head(
    report: Report, url: str, n: int, concurrency: int, with_pgqueuer: bool
) -> tuple[list[float], list[float]]:
    """aster-forge's and pgqueuer's default burn-down rates, round by round.

    Each round runs both, the order alternating, so a change in the shared machine's
    speed hits both alike. Without pgqueuer (or when it fails: noted), aster-forge's
    rates alone.
    """

    async def pgqueuer() -> float:
        result = await _peers.run_peer("pgqueuer", "burn", url, n, concurrency)
        return float(result["rate"])

    ours: list[float] = []
    theirs: list[float] = []
    try:
        for index in range(_rounds() if with_pgqueuer else 1):
            pgqueuer_first = with_pgqueuer and index % 2 == 1
            if pgqueuer_first:
                theirs.append(await pgqueuer())
            ours.append((await _aster.burn_down(url, n, concurrency)).rate)
            if with_pgqueuer and not pgqueuer_first:
                theirs.append(await pgqueuer())
    except RuntimeError as exc:
        report.notes.append(str(exc))
        if not ours:
            ours.append((await _aster.burn_down(url, n, concurrency)).rate)
        return ours, []
    return ours, theirs


async def _run(sizes: Sizes, databases: list[str]) -> Report:
    report = Report()
    peer_problem = _peers.ensure_peers_venv()
    versions = _peers.peer_versions() if peer_problem is None else {}
    if peer_problem is not None:
        report.notes.append(f"peers skipped: {peer_problem}")
    pg_url = await create_postgres_database()
    report.notes.append(f"load average at start {load_average():.2f}")
    if versions:
        report.notes.append(
            "peers: " + ", ".join(f"{name} {version}" for name, version in versions.items())
        )
    with tempfile.TemporaryDirectory(prefix="af-bench-") as tmp:
        backends = [("sqlite", f"sqlite+aiosqlite:///{Path(tmp) / 'bench.db'}")]
        if pg_url is not None:
            backends.insert(0, ("postgresql", pg_url))
        try:
            for backend, url in backends:
                databases.append(await _results.database_version(url))
                print(f"== {backend}: (a) burn-down", flush=True)
                await _burn_downs(report, backend, url, sizes, peer_problem is None)
                if backend == "postgresql":
                    print(f"== {backend}: (b) 4 processes", flush=True)
                    four = await _aster.burn_down_processes(url, sizes.burn, 10, 4)
                    report.add(
                        Row("b", backend, "aster-forge", f"4 proc x 10, N={sizes.burn:,}", four)
                    )
                print(f"== {backend}: (c) enqueue-to-start latency", flush=True)
                for rate in (20.0, 200.0):
                    lat = await _aster.latency(url, rate, sizes.latency_seconds)
                    hint = "NOTIFY" if backend == "postgresql" else "wake()"
                    setting = f"producer {rate:.0f}/s, {hint}"
                    report.add(Row("c", backend, "aster-forge", setting + " p50", lat.p50, "ms"))
                    report.add(Row("c", backend, "aster-forge", setting + " p99", lat.p99, "ms"))
                    report.add(Row("c", backend, "aster-forge", setting + " max", lat.max, "ms"))
                print(f"== {backend}: (d) bulk enqueue", flush=True)
                ours_bulk = await _aster.bulk_enqueue(url, sizes.bulk)
                setting = f"N={sizes.bulk:,}"
                report.add(
                    Row("d", backend, "aster-forge", setting, ours_bulk, "rows/s", ratio=1.0)
                )
                if backend == "postgresql":
                    if peer_problem is None:
                        for system in ("pgqueuer", "procrastinate"):
                            result = await _peers.run_peer(system, "bulk", url, sizes.bulk, 1)
                            rate = float(result["rate"])
                            report.add(
                                Row(
                                    "d",
                                    backend,
                                    system,
                                    setting,
                                    rate,
                                    "rows/s",
                                    ratio=rate / ours_bulk,
                                )
                            )
                    copy = await _raw.raw_bulk_insert(url, sizes.bulk)
                    report.add(
                        Row(
                            "d",
                            backend,
                            "raw asyncpg COPY",
                            setting,
                            copy,
                            "rows/s",
                            ratio=copy / ours_bulk,
                        )
                    )
                print(f"== {backend}: (e) 3-step tasks", flush=True)
                steps = await _aster.burn_down(
                    url, sizes.steps, 10, kind=_aster.Kind.STEPS, count_round_trips=True
                )
                report.add(
                    Row(
                        "e",
                        backend,
                        "aster-forge",
                        f"1 proc x 10, N={sizes.steps:,}, 3 step writes",
                        steps.rate,
                        note=f"{steps.round_trips_per_task or 0:.2f} SQL round trips/task "
                        "(counted, which slows the client)",
                    )
                )
                print(f"== {backend}: (f) scheduled runner", flush=True)
                sched = await _scheduled.scheduled(url, seconds=sizes.scheduled_seconds)
                setting = "100 tasks @ 100 ms, 3 instances"
                report.add(
                    Row(
                        "f",
                        backend,
                        "aster-forge",
                        setting,
                        sched.claims_per_second,
                        "claims/s",
                        note=f"{sched.firings} firings, {sched.duplicates} duplicates",
                    )
                )
                report.add(
                    Row(
                        "f",
                        backend,
                        "aster-forge",
                        "firing lateness p99",
                        sched.lateness_p99_ms,
                        "ms",
                    )
                )
                if sched.duplicates:
                    raise SystemExit(f"scheduled: {sched.duplicates} firings ran twice")
        finally:
            if pg_url is not None:
                await drop_postgres_database(pg_url)
    report.notes.append(f"load average at end {load_average():.2f}")
    return report


def _goals(report: Report) -> list[str]:
    def find(scenario: str, backend: str, system: str, setting_part: str) -> float | None:
        for row in report.rows:
            if (row.scenario, row.backend, row.system) == (scenario, backend, system) and (
                setting_part in row.setting
            ):
                return row.value
        return None

    lines: list[str] = []
    for concurrency, goal in ((1, "1x"), (10, "1.5x"), (50, "1.5x")):
        at = f"1 proc x {concurrency},"
        ours_c = find("a", "postgresql", "aster-forge", at)
        default = find("a", "postgresql", "pgqueuer (default)", at)
        capped = find("a", "postgresql", "pgqueuer (concurrency_limit=C)", at)
        shaped = find("a", "postgresql", NO_CAP, at)
        if ours_c and default:
            rounds = report.ratios.get(concurrency, [ours_c / default])
            line = (
                f"PostgreSQL 1 x {concurrency}: {statistics.median(rounds):.2f}x pgqueuer's "
                f"default (goal >= {goal}; aster-forge capped at {concurrency}, pgqueuer "
                "uncapped"
            )
            if len(rounds) > 1:
                listed = ", ".join(f"{ratio:.2f}" for ratio in rounds)
                line += f"; median of {len(rounds)} rounds: {listed}"
            line += ")"
            if capped:
                line += f"; {ours_c / capped:.2f}x pgqueuer capped"
            if shaped:
                line += f"; in pgqueuer's shape (no cap): {shaped / default:.2f}x its default"
            lines.append(line)
    ours = find("a", "postgresql", "aster-forge", "1 proc x 10,")
    proc = find("a", "postgresql", "procrastinate", "1 proc x 10,")
    raw50 = find("a", "postgresql", "raw asyncpg 50 rows/claim", "1 proc x 10,")
    if ours and proc:
        lines.append(f"PostgreSQL 1 x 10: {ours / proc:.1f}x Procrastinate (goal >= 10x)")
    if ours and raw50:
        lines.append(f"PostgreSQL 1 x 10: {ours / raw50:.0%} of the raw 50-row limit (goal >= 50%)")
    four = find("b", "postgresql", "aster-forge", "4 proc")
    if ours and four:
        lines.append(f"PostgreSQL 4 processes: {four / ours:.2f}x one process (goal >= 1.5x)")
    p50 = find("c", "postgresql", "aster-forge", "20/s, NOTIFY p50")
    p99 = find("c", "postgresql", "aster-forge", "20/s, NOTIFY p99")
    if p50 is not None and p99 is not None:
        lines.append(
            f"idle enqueue-to-start: p50 {p50:.1f} ms (goal < 10), p99 {p99:.1f} ms (goal < 50)"
        )
    sqlite = find("a", "sqlite", "aster-forge", "1 proc x 10,")
    if sqlite:
        lines.append(f"SQLite 1 x 10: {sqlite:,.0f} tasks/s (goal >= 3,000)")
    return lines


def write_results(report: Report, quick: bool, databases: list[str], started: datetime) -> Path:
    """Replace ``results/suite.md`` (a quick run's file goes to a scratch directory)."""
    body = [
        "Every burn-down verified that each task completed exactly once, for every system. "
        "Ratios compare with aster-forge in the same run, same database, same N and "
        "concurrency.",
        "",
        *(f"- {note}" for note in report.notes),
        "",
        "## Goals",
        "",
        *(f"- {line}" for line in _goals(report)),
        "",
        "## Figures",
        "",
        report.markdown(),
    ]
    invocation = "python -m benchmarks bench_suite" + (" --quick" if quick else "")
    return _results.write(
        "suite.md",
        "Benchmark suite" + (" (quick)" if quick else ""),
        body,
        command=_results.command(invocation, "BENCH_ROUNDS"),
        databases=databases,
        started=started,
    )


def main() -> None:
    """Run the suite and write the results file."""
    quick = _results.quick()
    started = datetime.now(UTC)
    databases: list[str] = []
    report = asyncio.run(_run(QUICK if quick else FULL, databases))
    path = write_results(report, quick, databases, started)
    for line in _goals(report):
        print(f"goal: {line}")
    print(f"results written to {path}")


if __name__ == "__main__":
    main()
