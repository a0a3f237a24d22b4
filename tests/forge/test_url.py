"""One database URL normalisation: plain schemes get aster-forge's async drivers."""

from __future__ import annotations

import pytest

from aster_forge.db._url import normalize_database_url
from aster_forge.db.errors import AsterForgeDbError


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("sqlite:///./aster-forge.db", "sqlite+aiosqlite:///./aster-forge.db"),
        ("postgresql://app:pw@db/shop", "postgresql+asyncpg://app:pw@db/shop"),
        ("postgres://app@db:5433/shop", "postgresql+asyncpg://app@db:5433/shop"),
        ("mysql://root@db/shop", "mysql+aiomysql://root@db/shop"),
        ("mariadb://root@db/shop", "mysql+aiomysql://root@db/shop"),
        ("postgresql+asyncpg://app@db/shop", "postgresql+asyncpg://app@db/shop"),
    ],
)
def test_plain_schemes_get_the_async_driver(url: str, expected: str) -> None:
    assert normalize_database_url(url) == expected


@pytest.mark.parametrize("url", ["oracle://scott@db/x", "oracle+cx://scott@db/x", "::nope"])
def test_other_backends_are_a_typed_error(url: str) -> None:
    with pytest.raises(AsterForgeDbError):
        normalize_database_url(url)
