"""The current results files: one per benchmark, overwritten by every run.

Each writer keeps one file of a fixed name in ``benchmarks/results/`` (git keeps the
older versions). Every file starts with the same header: the machine (cores, memory,
CPU model, Python), the databases it ran on, the tree it measured (``+dirty`` when the
checkout had uncommitted changes outside the results directories), the command that
reproduces it and when it ran.

Quick runs (``BENCH_QUICK=1`` or ``--quick``) never touch ``benchmarks/results/``: they
write to a scratch directory under the system's temporary directory.
``BENCH_RESULTS_DIR=DIR`` sends any run's file to ``DIR`` instead (a trial, or a run of
another tree that should not replace the current file).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import platform
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

import aster_forge

RESULTS = Path(__file__).resolve().parent / "results"
#: The directories results are written to: changes there do not make a tree dirty.
RESULT_DIRS = ("benchmarks/results", "tests/chaos/results")
_GIT_SECONDS = 30
_VERSION_SECONDS = 10


def quick() -> bool:
    """Whether this is a short development run (``BENCH_QUICK=1`` or ``--quick``)."""
    return "--quick" in sys.argv or os.environ.get("BENCH_QUICK", "") not in ("", "0")


def results_dir() -> Path:
    """Where this run's results file goes (see the module docstring)."""
    override = os.environ.get("BENCH_RESULTS_DIR", "")
    if override:
        return Path(override)
    if quick():
        return Path(tempfile.gettempdir()) / "aster-forge-quick-results"
    return RESULTS


def command(invocation: str, *env: str) -> str:
    """``invocation`` preceded by those of the ``env`` variables that are set."""
    settings = [f"{name}={os.environ[name]}" for name in env if os.environ.get(name)]
    return " ".join([*settings, invocation])


def machine() -> str:
    """Cores, memory, CPU model, operating system and Python of this machine."""
    try:
        memory = f"{os.sysconf('SC_PHYS_PAGES') * os.sysconf('SC_PAGE_SIZE') / 2**30:.0f} GiB"
    except (ValueError, OSError, AttributeError):
        memory = "memory unknown"
    return (
        f"{os.cpu_count()} cores, {memory}, {_cpu_model()} "
        f"({platform.system()} {platform.machine()}); "
        f"{platform.python_implementation()} {platform.python_version()}"
    )


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "CPU model unknown"


def _git(cwd: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", *args],
            cwd=cwd,
            capture_output=True,
            text=True,
            check=True,
            timeout=_GIT_SECONDS,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip()


def _checkout(path: Path) -> Path | None:
    top = _git(path, "rev-parse", "--show-toplevel")
    return Path(top) if top else None


def commit_of(checkout: Path, ref: str | None = None) -> str:
    """The short commit of ``ref`` in ``checkout``; without ``ref``, of the working tree:
    ``HEAD``, ``+dirty`` when files outside the results directories have changes."""
    commit = _git(checkout, "rev-parse", "--short=7", ref or "HEAD") or "unknown commit"
    if ref is not None:
        return commit
    excluded = [f":(exclude){path}" for path in RESULT_DIRS]
    status = _git(checkout, "status", "--porcelain", "--untracked-files=no", "--", ".", *excluded)
    return commit + ("+dirty" if status else "")


def current_tree() -> str:
    """The tree measured: the commit of the imported ``aster_forge`` and, when it comes
    from another checkout (``PYTHONPATH=<tree>/src``), of this one too."""
    library = Path(aster_forge.__file__).resolve().parent
    library_checkout = _checkout(library)
    ours = _checkout(Path(__file__).resolve().parent)
    if library_checkout is None:
        where = f"aster-forge {aster_forge.__version__} from `{library}`"
        return where + (f"; this checkout `{commit_of(ours)}`" if ours else "")
    if ours is None or library_checkout == ours:
        return f"`{commit_of(library_checkout)}`"
    return (
        f"library `{commit_of(library_checkout)}` (`{library_checkout}`), "
        f"this checkout `{commit_of(ours)}`"
    )


async def database_version(url: str) -> str:
    """The server and version behind ``url`` (``"PostgreSQL 15.20 ... on loopback"``)."""
    if url.startswith("sqlite"):
        query, name = "SELECT sqlite_version()", "SQLite"
    elif url.startswith("postgresql"):
        query, name = "SHOW server_version", "PostgreSQL"
    else:
        query, name = "SELECT VERSION()", "MySQL"
    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn:
            version = str((await conn.execute(sa.text(query))).scalar_one())
    finally:
        await engine.dispose()
    if "mariadb" in version.lower():
        name = "MariaDB"
    host = make_url(url).host
    if not host:
        return f"{name} {version}"
    where = "loopback" if host in ("127.0.0.1", "localhost", "::1") else host
    return f"{name} {version} on {where}"


def database_versions(urls: Sequence[str]) -> list[str]:
    """:func:`database_version` of each reachable ``url``, from synchronous code."""

    async def read() -> list[str]:
        versions = []
        for url in urls:
            try:
                versions.append(await asyncio.wait_for(database_version(url), _VERSION_SECONDS))
            except Exception as exc:  # unreachable server: name it, do not fail the report
                versions.append(f"{url.split(':', 1)[0]} unreachable ({type(exc).__name__})")
        return versions

    # Its own thread, so a caller inside a running event loop can use it too.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, read()).result()


def header(
    title: str,
    *,
    command: str,
    databases: Sequence[str] = (),
    tree: str | None = None,
    when: datetime | None = None,
) -> list[str]:
    """The header every results file starts with."""
    when = when or datetime.now(UTC)
    lines = [f"# {title}", "", f"- Machine: {machine()}"]
    if databases:
        lines.append(f"- Databases: {'; '.join(databases)}")
    lines += [
        f"- Tree: {tree if tree is not None else current_tree()}",
        f"- Command: `{command}`",
        f"- Measured: {when:%Y-%m-%d %H:%M} UTC",
        "",
    ]
    return lines


def write(
    name: str,
    title: str,
    body: Sequence[str],
    *,
    command: str,
    databases: Sequence[str] = (),
    started: datetime | None = None,
) -> Path:
    """Replace ``name`` in :func:`results_dir` with the header and ``body``; its path."""
    directory = results_dir()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    text = "\n".join([*header(title, command=command, databases=databases, when=started), *body])
    path.write_text(text.rstrip("\n") + "\n", encoding="utf-8")
    return path
