"""The named-query files each backend's raw SQL lives in, and their loader."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from aster_forge.db._queries import MYSQL, POSTGRESQL, SQLITE, parse_queries


def test_a_query_file_splits_on_its_headers_and_drops_their_comment_lines() -> None:
    text = (
        "-- a file's own comment --- not a header\n\n"
        "-- first --\n-- what it does\nSELECT 1\n  FROM t\n\n"
        "-- second_2 --\nSELECT 2\n"
    )
    assert parse_queries(text) == {"first": "SELECT 1\n  FROM t", "second_2": "SELECT 2"}


def test_a_name_given_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="'again' is defined twice"):
        parse_queries("-- again --\nSELECT 1\n\n-- again --\nSELECT 2\n")


@pytest.mark.parametrize(
    "queries", [SQLITE, MYSQL, POSTGRESQL], ids=["sqlite", "mysql", "postgresql"]
)
def test_every_shipped_query_has_a_body_and_no_comment_header(
    queries: Mapping[str, str],
) -> None:
    assert queries
    for name, sql in queries.items():
        assert sql.strip(), name
        assert not sql.startswith(("--", "\n")), name
