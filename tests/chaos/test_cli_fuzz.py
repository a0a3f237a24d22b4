"""Suite 6, CLI arguments: hypothesis over ``aster-forge`` argument lists (click's CliRunner).

Task ids (negative, zero, beyond 64 bits, junk), database URLs (unparseable, unknown
drivers, refused ports, SQLite paths with odd characters, missing directories),
health scopes, service URLs and timeouts, flags in any order, and random token
lists: every invocation ends with exit code 0, 1 or 2; a failure prints exactly one
``error: ...`` line on stderr; nothing ever prints a traceback or a password.

Network targets are loopback ports nothing listens on (refused at once), so no
example waits on DNS or on a server. ``demo`` and ``run`` are never invoked (they
start servers or import product code).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from hypothesis import given
from hypothesis import strategies as st

from aster_forge._demo import DemoApp, DemoSettings
from aster_forge.cli import cli

from ._fuzz import fuzz
from .report import ScenarioResult, record

CANARY = "s3cr3t-canary"
"""A password put into database URLs: it must never appear in any output."""

REFUSED_PORTS = (1, 9)
"""Loopback ports with no listener: connections are refused immediately."""

INVOCATIONS: list[int] = [0, 0]
"""Invocations checked, and how many of them failed cleanly (exit 1 or 2)."""


async def _seed(url: str) -> None:
    app = DemoApp(DemoSettings(database_url=url))
    try:
        await app.migrate()
        await app.seed(batch="cli-fuzz")
    finally:
        await app.forge.aclose()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding a seeded SQLite database (``tasks.db``)."""
    path = tmp_path_factory.mktemp("cli-fuzz")
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, _seed(f"sqlite+aiosqlite:///{path / 'tasks.db'}")).result()
    return path


@pytest.fixture
def runner(workdir: Path) -> Iterator[CliRunner]:
    """A runner whose default database is the seeded one (never a file in the cwd)."""
    yield CliRunner(
        env={
            "ASTER_FORGE_DATABASE_URL": f"sqlite+aiosqlite:///{workdir / 'tasks.db'}",
            "ASTER_FORGE_ADMIN_TOKEN": None,
            "COLUMNS": "160",
        }
    )


# -- strategies ---------------------------------------------------------------------------------

junk = st.text(max_size=24)
url_safe = st.text(
    alphabet=st.characters(
        codec="utf-8", exclude_characters="/@:?#\\", exclude_categories=("Cs", "Cc")
    ),
    max_size=16,
)
task_ids = st.one_of(
    st.integers(-(2**70), 2**70).map(str),
    st.sampled_from(
        [
            "0",
            "1",
            "2",
            "-1",
            "1e3",
            "0x10",
            "1_000",
            "9223372036854775807",
            "9223372036854775808",
            "99999999999999999999999999",
            " 1",
            "\x00",
            "",
        ]
    ),
    junk,
)
schemes = st.sampled_from(
    [
        "postgresql+asyncpg",
        "postgresql",
        "mysql+aiomysql",
        "mysql",
        "sqlite+aiosqlite",
        "sqlite",
        "nosuch+driver",
        "postgresql+nosuch",
        "oracle",
        "x",
    ]
)


def _no_scheme(text: str) -> bool:
    # Without "://" the text cannot name a host, so nothing resolves or connects.
    return "://" not in text


def sqlite_urls(workdir: Path) -> st.SearchStrategy[str]:
    """SQLite URLs inside ``workdir`` (odd file names, missing subdirectories)."""
    names = url_safe.filter(lambda name: name not in ("", ".", ".."))
    return st.one_of(
        st.just(f"sqlite+aiosqlite:///{workdir / 'tasks.db'}"),
        names.map(lambda name: f"sqlite+aiosqlite:///{workdir / name}"),
        names.map(lambda name: f"sqlite+aiosqlite:///{workdir / 'missing' / name / 'x.db'}"),
        st.just("sqlite+aiosqlite:///:memory:"),
        st.just("sqlite+aiosqlite://"),
    )


def server_urls() -> st.SearchStrategy[str]:
    """Server URLs with a password, pointing at a refused loopback port."""
    return st.builds(
        lambda scheme, user, port, db: f"{scheme}://{user}:{CANARY}@127.0.0.1:{port}/{db}",
        schemes,
        url_safe,
        st.sampled_from(REFUSED_PORTS),
        url_safe,
    )


def database_urls(workdir: Path) -> st.SearchStrategy[str]:
    """Anything ``--database-url`` could be given."""
    return st.one_of(
        sqlite_urls(workdir),
        server_urls(),
        junk.filter(_no_scheme),
        st.sampled_from(["", "not a url", "://", "sqlite+aiosqlite:///\x00", "postgresql://"]),
    )


service_urls = st.one_of(
    st.sampled_from([f"http://127.0.0.1:{port}" for port in REFUSED_PORTS]),
    url_safe.map(lambda path: f"http://127.0.0.1:{REFUSED_PORTS[0]}/{path}"),
    st.sampled_from(["", "ftp://127.0.0.1:1", "http://", "127.0.0.1:1", "http://[::1"]),
    junk.filter(_no_scheme),
)
scopes = st.one_of(st.sampled_from(["liveness", "readiness", "diagnostics"]), junk)
timeouts = st.one_of(
    st.sampled_from(["0.5", "0", "-1", "nan", "inf", "1e400", "x"]),
    st.floats(allow_nan=True).map(str),
)


def task_commands(workdir: Path) -> st.SearchStrategy[list[str]]:
    """``tasks show|retry|cancel ID`` and ``tasks list`` with fuzzed values."""
    single = st.builds(
        lambda sub, task_id, url, flags: ["tasks", sub, task_id, "--database-url", url, *flags],
        st.sampled_from(["show", "retry", "cancel"]),
        task_ids,
        database_urls(workdir),
        st.lists(st.sampled_from(["--json", "--force"]), max_size=2, unique=True),
    )
    listing = st.builds(
        lambda url, status, limit, kind, lane: [
            "tasks",
            "list",
            "--database-url",
            url,
            *status,
            *limit,
            *kind,
            *lane,
        ],
        database_urls(workdir),
        st.one_of(st.just([]), st.tuples(st.just("--status"), junk | st.just("failed"))),
        st.one_of(st.just([]), st.tuples(st.just("--limit"), task_ids)),
        st.one_of(st.just([]), st.tuples(st.just("--kind"), junk)),
        st.one_of(st.just([]), st.tuples(st.just("--lane"), junk)),
    )
    # Options may come before the argument; ids given against the seeded database.
    seeded = st.builds(
        lambda sub, task_id, flags: ["tasks", sub, *flags, task_id],
        st.sampled_from(["show", "retry", "cancel"]),
        task_ids,
        st.lists(st.sampled_from(["--json", "--force", "--"]), max_size=2, unique=True),
    )
    return st.one_of(single, listing, seeded)


def other_commands(workdir: Path) -> st.SearchStrategy[list[str]]:
    """``migrate``, ``health`` and random token lists (never ``demo`` or ``run``)."""
    migrate = database_urls(workdir).map(lambda url: ["migrate", "--database-url", url])
    health = st.builds(
        lambda scope, url, timeout, flags: [
            "health",
            "--scope",
            scope,
            "--url",
            url,
            "--timeout",
            timeout,
            *flags,
        ],
        scopes,
        service_urls,
        timeouts,
        st.lists(st.sampled_from(["--json", "--admin-token", "tok"]), max_size=3),
    )
    tokens = st.one_of(
        st.sampled_from(
            [
                "tasks",
                "list",
                "show",
                "retry",
                "cancel",
                "migrate",
                "health",
                "--json",
                "--force",
                "--limit",
                "--status",
                "--scope",
                "--url",
                "-h",
                "--version",
                "--",
            ]
        ),
        task_ids,
        junk,
    )
    random_lists = st.lists(tokens, max_size=6).filter(
        lambda args: (
            not {"demo", "run"} & set(args)
            and ("migrate" not in args or "--database-url" not in args)
        )
    )
    return st.one_of(migrate, health, random_lists)


# -- the check ----------------------------------------------------------------------------------


def _check(result: Result, args: list[str]) -> None:
    """Clean exit code; a failure is one ``error:`` line; no traceback, no password."""
    INVOCATIONS[0] += 1
    shown = (args, result.exit_code, result.output[-2000:])
    if result.exception is not None:
        assert isinstance(result.exception, SystemExit), shown
    assert result.exit_code in (0, 1, 2), shown
    assert "Traceback" not in result.output, shown
    assert CANARY not in result.output, shown
    errors = result.stderr.strip().splitlines()
    if result.exit_code == 0:
        assert not errors, shown
        return
    INVOCATIONS[1] += 1
    if not errors:
        # Exit 1 without an error line: a cancel of a finished task (said on stdout).
        assert result.exit_code == 1 and "already finished" in result.stdout, shown
        return
    if errors[0].startswith("Usage:"):
        # A bare group (``aster-forge``, ``aster-forge tasks``) prints its help.
        assert result.exit_code == 2 and "Commands:" in result.stderr, shown
        return
    assert len(errors) == 1 and errors[0].startswith("error: "), shown


def _invoke(runner: CliRunner, args: list[str]) -> None:
    _check(runner.invoke(cli, args, prog_name="aster-forge"), args)


def _fuzz_cli(runner: CliRunner, workdir: Path, *, long: bool) -> None:
    """Run the hypothesis search; record the table row only when every example passed."""
    before = list(INVOCATIONS)

    @fuzz(long=long)
    @given(args=st.one_of(task_commands(workdir), other_commands(workdir)))
    def search(args: list[str]) -> None:
        _invoke(runner, args)

    search()
    record(
        ScenarioResult(
            scenario="bad input: CLI arguments",
            tasks=0,
            faults=f"{INVOCATIONS[0] - before[0]} hypothesis argument lists "
            f"({INVOCATIONS[1] - before[1]} rejected with one error line)",
            lost=0,
            duplicated=0,
            stuck=0,
            result="pass",
            long=long,
        )
    )


def test_cli_arguments_fail_cleanly(runner: CliRunner, workdir: Path) -> None:
    _fuzz_cli(runner, workdir, long=False)


@pytest.mark.slow
def test_cli_arguments_long(runner: CliRunner, workdir: Path) -> None:
    _fuzz_cli(runner, workdir, long=True)


@pytest.mark.parametrize("command", ["show", "retry", "cancel"])
@pytest.mark.parametrize("task_id", [str(2**63), str(2**70), "0", "-5"])
def test_out_of_range_task_ids_are_one_line_usage_errors(
    runner: CliRunner, command: str, task_id: str
) -> None:
    result = runner.invoke(cli, ["tasks", command, "--", task_id], prog_name="aster-forge")
    _check(result, ["tasks", command, task_id])
    assert result.exit_code == 2
    assert "is not in the range 1<=x<=9223372036854775807" in result.stderr


def test_largest_task_id_reaches_the_store(runner: CliRunner) -> None:
    result = runner.invoke(cli, ["tasks", "show", str(2**63 - 1)], prog_name="aster-forge")
    _check(result, ["tasks", "show", str(2**63 - 1)])
    assert result.exit_code == 1 and "not found" in result.stderr
