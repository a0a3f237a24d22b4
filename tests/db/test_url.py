"""``normalize_database_url``: plain schemes get the async driver; bad ones a typed error."""

from __future__ import annotations

import asyncio
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from aster_forge.db import UtcDateTime
from aster_forge.db._tasks_notify import BackgroundTaskNotificationListener
from aster_forge.db._url import normalize_database_url
from aster_forge.db.errors import (
    DatabaseDriverMissingError,
    InvalidDatabaseUrlError,
    UnsupportedDatabaseBackendError,
)
from aster_forge.runtime import CancellationToken


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            "postgresql://u:p%40ss@db:5432/app?ssl=require",
            "postgresql+asyncpg://u:p%40ss@db:5432/app?ssl=require",
        ),
        ("postgres://u@db/app", "postgresql+asyncpg://u@db/app"),
        ("mysql://root@db/app", "mysql+aiomysql://root@db/app"),
        ("mariadb://root@db/app?charset=utf8mb4", "mysql+aiomysql://root@db/app?charset=utf8mb4"),
        ("mariadb+aiomysql://root@db/app", "mysql+aiomysql://root@db/app"),
        ("sqlite://", "sqlite+aiosqlite://"),
        ("sqlite:///./app.db", "sqlite+aiosqlite:///./app.db"),
        ("postgresql+asyncpg://u:p@db/app", "postgresql+asyncpg://u:p@db/app"),
        ("mysql+aiomysql://root@db/app", "mysql+aiomysql://root@db/app"),
        ("sqlite+aiosqlite:////tmp/x.db", "sqlite+aiosqlite:////tmp/x.db"),
    ],
)
def test_plain_schemes_get_the_async_driver(url: str, expected: str) -> None:
    assert normalize_database_url(url) == expected
    assert normalize_database_url(expected) == expected  # idempotent


@pytest.mark.parametrize(
    ("url", "driver"),
    [
        ("postgresql+psycopg2://u@db/app", "psycopg2"),
        ("postgresql+pg8000://u@db/app", "pg8000"),
        ("mysql+pymysql://root@db/app", "pymysql"),
        ("mariadb+mysqldb://root@db/app", "mysqldb"),
        ("sqlite+pysqlite:///x.db", "pysqlite"),
    ],
)
def test_a_sync_driver_is_refused(url: str, driver: str) -> None:
    with pytest.raises(InvalidDatabaseUrlError, match=f"driver '{driver}' is not an asyncio"):
        normalize_database_url(url)


def test_unparsable_and_unsupported_urls() -> None:
    with pytest.raises(InvalidDatabaseUrlError, match="invalid database URL"):
        normalize_database_url("not a url")
    with pytest.raises(UnsupportedDatabaseBackendError, match="'oracle'"):
        normalize_database_url("oracle://scott@db/orcl")


@pytest.mark.parametrize(
    ("url", "module", "extra"),
    [
        ("postgres://u@db/app", "asyncpg", "postgres"),
        ("mysql://root@db/app", "aiomysql", "mysql"),
    ],
)
def test_a_missing_driver_names_the_extra(
    url: str, module: str, extra: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    normalize_database_url(url)  # installed here: no error
    monkeypatch.setitem(sys.modules, module, None)  # what "not installed" looks like to import
    with pytest.raises(DatabaseDriverMissingError, match=rf"aster-forge\[{extra}\]") as caught:
        normalize_database_url(url)
    assert caught.value.driver == module and caught.value.extra == extra


def test_a_missing_dependency_of_the_driver_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in [name for name in sys.modules if name.split(".")[0] in {"aiomysql", "pymysql"}]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "pymysql", None)
    with pytest.raises(DatabaseDriverMissingError, match=r"needs 'pymysql'.*\[mysql\]"):
        normalize_database_url("mysql://root@db/app")


def test_a_driver_that_fails_to_import_is_not_reported_missing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Installed but broken (e.g. a bad native build): the real error, not "install it"."""
    (tmp_path / "asyncmy.py").write_text("raise ImportError('undefined symbol: x')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "asyncmy", raising=False)
    with pytest.raises(ImportError, match="undefined symbol") as caught:
        normalize_database_url("mysql+asyncmy://root@db/app")
    assert not isinstance(caught.value, DatabaseDriverMissingError)


def test_a_driver_outside_the_extras_names_its_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "asyncmy", None)
    with pytest.raises(DatabaseDriverMissingError, match="pip install asyncmy") as caught:
        normalize_database_url("mysql+asyncmy://root@db/app")
    assert caught.value.extra is None


def _plain(url: str) -> str:
    """The URL a user copies from a hosting dashboard: no driver named."""
    scheme, _, rest = url.partition("://")
    plain = {"postgresql+asyncpg": "postgres", "mysql+aiomysql": "mariadb"}
    return f"{plain.get(scheme, 'sqlite')}://{rest}"


async def assert_microsecond_round_trip(url: str) -> str:
    """Store and read back a microsecond UTC time on ``url``; return the dialect's name."""
    engine = create_async_engine(url)
    metadata = sa.MetaData()
    table = sa.Table("url_probe", metadata, sa.Column("at", UtcDateTime(), nullable=False))
    moment = datetime(2026, 3, 29, 1, 30, 0, 123456, tzinfo=UTC)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(metadata.create_all)
            await conn.execute(table.insert().values(at=moment))
            assert (await conn.execute(sa.select(table.c.at))).scalar_one() == moment
            await conn.run_sync(metadata.drop_all)
    finally:
        await engine.dispose()
    return engine.dialect.name


async def test_a_plain_url_opens_a_working_engine(database_url: str) -> None:
    """A ``postgres://`` / ``mariadb://`` / ``sqlite://`` URL round-trips a microsecond UTC time."""
    await assert_microsecond_round_trip(normalize_database_url(_plain(database_url)))


async def test_utc_datetime_keeps_microseconds_on_the_mariadb_dialect(mysql_url: str) -> None:
    """An engine a product built with ``mariadb+aiomysql://`` (dialect named "mariadb")."""
    url = mysql_url.replace("mysql+aiomysql://", "mariadb+aiomysql://")
    assert await assert_microsecond_round_trip(url) == "mariadb"


@pytest.mark.postgres
async def test_the_notification_listener_takes_a_plain_postgres_url(postgres_url: str) -> None:
    plain = postgres_url.replace("postgresql+asyncpg://", "postgres://", 1)
    listener = BackgroundTaskNotificationListener(plain, "af_plain_url")
    token = CancellationToken()
    async with asyncio.TaskGroup() as group:
        group.create_task(listener.run(token), name="listener")
        await asyncio.wait_for(listener.wait_connected(), 10)
        token.cancel()
    assert listener.connects == 1
    with pytest.raises(InvalidDatabaseUrlError, match="psycopg2"):
        BackgroundTaskNotificationListener(plain.replace("postgres://", "postgresql+psycopg2://"))
