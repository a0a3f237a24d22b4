"""Timestamps of the PostgreSQL hot statements, sent as epoch microseconds.

The claim family and the enqueue return their timestamps as :func:`epoch_micros`;
:func:`utc_from_micros` must turn each into exactly what a ``UtcDateTime`` column reads
back through SQLAlchemy, the infinities and ``NULL`` included.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from aster_forge.db import UtcDateTime
from aster_forge.db._postgres import epoch_micros, utc_from_micros
from aster_forge.runtime._lease import NEVER_EXPIRES

pytestmark = pytest.mark.postgres

_VALUES = [
    "2026-12-01 10:11:12.123456+00",
    "2026-03-29 01:59:59.999999+01",  # an offset, a microsecond before a whole second
    "1969-12-31 23:59:59.999999+00",  # before the epoch: negative microseconds
    "1900-01-01 00:00:00.000001+00",
    "9999-12-31 23:59:59.999999+00",  # NEVER_EXPIRES
    "infinity",
    "-infinity",
    None,
]

_QUERY = (
    sa.text(f"SELECT {epoch_micros('x')} AS m, x FROM (SELECT CAST(:v AS timestamptz) AS x) AS s")
    .bindparams(sa.bindparam("v", type_=sa.Text()))
    .columns(sa.column("m", sa.BigInteger()), sa.column("x", UtcDateTime()))
)


@pytest.mark.parametrize("value", _VALUES)
async def test_epoch_micros_read_back_equal_the_column_types_datetime(
    postgres_url: str, value: str | None
) -> None:
    engine = create_async_engine(postgres_url)
    try:
        async with engine.connect() as conn:
            micros, want = (await conn.execute(_QUERY, {"v": value})).one()
    finally:
        await engine.dispose()
    got = None if micros is None else utc_from_micros(micros)
    assert got == want
    if got is not None:
        assert got.tzinfo is UTC


def test_the_extremes_are_the_datetimes_asyncpg_reads_the_infinities_as() -> None:
    assert utc_from_micros(0) == datetime(1970, 1, 1, tzinfo=UTC)
    assert utc_from_micros(253402300799999999) == NEVER_EXPIRES
    assert utc_from_micros(-62135596800000000) == datetime.min.replace(tzinfo=UTC)
