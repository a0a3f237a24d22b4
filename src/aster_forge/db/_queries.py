"""The raw SQL of each backend, by name, from ``db/sql/<backend>.sql`` (package data).

A file holds statements under ``-- name --`` headers (comment lines right after a
header describe it); each is read once, at import. Statements that SQLAlchemy Core
writes the same on every backend stay in Python; these are the ones it cannot write,
or that a hot path compiles once per store.
"""

from __future__ import annotations

import re
from importlib import resources
from types import MappingProxyType
from typing import Final

__all__ = ["MYSQL", "POSTGRESQL", "SQLITE", "parse_queries"]

_HEADER = re.compile(r"^-- ([a-z0-9_]+) --\n(?:--.*\n)*", re.MULTILINE)


def parse_queries(text: str) -> dict[str, str]:
    """The statements of a query file by name (each without its surrounding blank lines).

    Raises:
        ValueError: When a name is given twice.
    """
    parts = _HEADER.split(text)
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in queries:
            raise ValueError(f"query {name!r} is defined twice")
        queries[name] = body.strip("\n")
    return queries


def _load(backend: str) -> MappingProxyType[str, str]:
    text = resources.files(__package__).joinpath("sql", f"{backend}.sql").read_text("utf-8")
    return MappingProxyType(parse_queries(text))


SQLITE: Final = _load("sqlite")
MYSQL: Final = _load("mysql")
POSTGRESQL: Final = _load("postgresql")
