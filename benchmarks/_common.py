"""Shared benchmark plumbing: databases, engines, percentiles, the result table."""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from aster_forge.db import create_database_engine

DEFAULT_POSTGRES_URL = "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
DEFAULT_MYSQL_URL = "mysql+aiomysql://root@127.0.0.1:3306/test"


# Generous: the slowest peer configurations (pgqueuer capped at concurrency 1) take minutes.
_PROCESS_SECONDS = 900


async def json_of_process(*argv: str, what: str, cwd: Path | None = None) -> dict[str, Any]:
    """Run ``argv``; the JSON object on the last line it printed.

    Raises:
        RuntimeError: It exited non-zero (the message names ``what`` and the last lines
            of its stderr).
    """
    process = await asyncio.create_subprocess_exec(
        *argv, cwd=cwd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), _PROCESS_SECONDS)
    if process.returncode != 0:
        tail = err.decode(errors="replace").strip().splitlines()[-3:]
        raise RuntimeError(f"{what} failed: {' | '.join(tail)}")
    result: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return result


def postgres_base_url() -> str:
    """The server the benchmarks create their throwaway databases on."""
    return os.environ.get("ASTER_FORGE_TEST_POSTGRES_URL", DEFAULT_POSTGRES_URL)


def asyncpg_dsn(url: str) -> str:
    """A SQLAlchemy ``postgresql+asyncpg://`` URL as a plain libpq DSN."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def make_engine(url: str, *, pool_size: int = 20, pool_pre_ping: bool = False) -> AsyncEngine:
    """An engine as a product would configure it.

    SQLite: :func:`create_database_engine`'s (what ``Forge`` opens: WAL, the write-lock
    wait, a pool that rolls back only a connection with a transaction open) with
    ``synchronous=NORMAL``, as ``docs/performance.md`` recommends.
    """
    if url.startswith("sqlite"):
        engine = create_database_engine(url)
        sa.event.listen(engine.sync_engine, "connect", _sqlite_normal_sync)
        return engine
    return create_async_engine(
        url, pool_size=pool_size, max_overflow=5, pool_pre_ping=pool_pre_ping
    )


def _sqlite_normal_sync(dbapi_connection: Any, _record: Any) -> None:
    # Durable at checkpoints, no fsync per commit (WAL is create_database_engine's).
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA synchronous=NORMAL")
    finally:
        cursor.close()


def mysql_base_url() -> str:
    """The MariaDB server the benchmarks create their throwaway databases on."""
    return os.environ.get("ASTER_FORGE_TEST_MYSQL_URL", DEFAULT_MYSQL_URL)


async def _create_database(base: str, quoted: str, what: str, prefix: str) -> str | None:
    name = f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    admin = create_async_engine(base, isolation_level="AUTOCOMMIT")
    try:
        async with admin.connect() as conn:
            await conn.execute(sa.text(f"CREATE DATABASE {quoted.format(name)}"))
    except Exception as exc:  # unreachable server: skip this backend
        print(f"{what} skipped ({type(exc).__name__}: {exc})", flush=True)
        return None
    finally:
        await admin.dispose()
    return make_url(base).set(database=name).render_as_string(hide_password=False)


async def create_postgres_database(prefix: str = "af_bench") -> str | None:
    """Create a throwaway database; ``None`` when the server is unreachable."""
    return await _create_database(postgres_base_url(), '"{}"', "PostgreSQL", prefix)


async def create_mysql_database(prefix: str = "af_bench") -> str | None:
    """Create a throwaway MariaDB database; ``None`` when the server is unreachable."""
    return await _create_database(mysql_base_url(), "`{}`", "MariaDB", prefix)


async def drop_mysql_database(url: str) -> None:
    """Drop a database made by :func:`create_mysql_database`."""
    admin = create_async_engine(mysql_base_url(), isolation_level="AUTOCOMMIT")
    try:
        async with admin.connect() as conn:
            await conn.execute(sa.text(f"DROP DATABASE IF EXISTS `{make_url(url).database}`"))
    finally:
        await admin.dispose()


async def drop_postgres_database(url: str) -> None:
    """Drop a database made by :func:`create_postgres_database`."""
    admin = create_async_engine(postgres_base_url(), isolation_level="AUTOCOMMIT")
    try:
        async with admin.connect() as conn:
            name = make_url(url).database
            await conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        await admin.dispose()


def percentile(samples: Sequence[float], fraction: float) -> float:
    """The ``fraction`` quantile (nearest rank) of ``samples``."""
    ordered = sorted(samples)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))
    return ordered[index]


def median(samples: Sequence[float]) -> float:
    """The median (``nan`` when empty)."""
    return statistics.median(samples) if samples else float("nan")


def load_average() -> float:
    """The 1-minute load average."""
    return os.getloadavg()[0]


@dataclass
class Row:
    """One line of the results table."""

    scenario: str
    backend: str
    system: str
    setting: str
    value: float
    unit: str = "tasks/s"
    note: str = ""
    ratio: float | None = None


@dataclass
class Report:
    """Every figure of one run, in order."""

    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: Per-round ratios of a head-to-head figure, keyed by its concurrency.
    ratios: dict[int, list[float]] = field(default_factory=dict)

    def add(self, row: Row) -> Row:
        """Record and print one figure."""
        self.rows.append(row)
        ratio = f"  ({row.ratio:.2f}x aster-forge)" if row.ratio is not None else ""
        print(
            f"  {row.scenario:<4} {row.backend:<10} {row.system:<24} {row.setting:<22} "
            f"{row.value:>10,.1f} {row.unit}{ratio} {row.note}",
            flush=True,
        )
        return row

    def markdown(self) -> str:
        """The table as Markdown."""
        lines = [
            "| scenario | backend | system | setting | figure | vs aster-forge | note |",
            "|---|---|---|---|---:|---:|---|",
        ]
        for row in self.rows:
            ratio = f"{row.ratio:.2f}x" if row.ratio is not None else ""
            lines.append(
                f"| {row.scenario} | {row.backend} | {row.system} | {row.setting} | "
                f"{row.value:,.1f} {row.unit} | {ratio} | {row.note} |"
            )
        return "\n".join(lines)


async def count_rows(url: str, table: str) -> int:
    """The rows of ``table`` (every benchmark checks its runs landed)."""
    engine = make_engine(url)
    try:
        async with engine.connect() as conn:
            return int((await conn.execute(sa.text(f"SELECT count(*) FROM {table}"))).scalar_one())
    finally:
        await engine.dispose()
