"""Hypothesis helpers shared by the chaos suites: JSON-ish values and short/long settings."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

F = TypeVar("F", bound=Callable[..., Any])

SHORT_EXAMPLES = 60
LONG_EXAMPLES = 3000

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40)
)
json_values: st.SearchStrategy[Any] = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=12), children, max_size=5)
    ),
    max_leaves=25,
)


def json_texts() -> st.SearchStrategy[str]:
    """Valid JSON text of arbitrary shape."""
    return json_values.map(json.dumps)


def deep_texts() -> st.SearchStrategy[str]:
    """Deeply nested (and unterminated) JSON: arrays and objects up to 5000 levels."""
    return st.one_of(
        st.integers(min_value=1, max_value=5000).map(lambda n: "[" * n),
        st.integers(min_value=1, max_value=5000).map(lambda n: '{"a":' * n),
        st.integers(min_value=1, max_value=3000).map(lambda n: "[" * n + "]" * n),
    )


def raw_texts(*, deep: bool = True) -> st.SearchStrategy[str | bytes]:
    """Anything a column could hold: random text, random bytes, JSON, truncated JSON.

    Args:
        deep: Include deeply nested JSON (see :func:`deep_texts`).
    """
    shallow: st.SearchStrategy[str | bytes] = st.one_of(
        st.text(max_size=200),
        st.binary(max_size=200),
        json_texts(),
        json_texts().map(lambda text: text[: max(len(text) // 2, 1)]),
    )
    return st.one_of(shallow, deep_texts()) if deep else shallow


def fuzz(*, long: bool = False) -> Callable[[F], F]:
    """Hypothesis settings: the short version (``make test``) or the long one (``slow``)."""

    def apply(fn: F) -> F:
        configured = settings(
            max_examples=LONG_EXAMPLES if long else SHORT_EXAMPLES,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
            database=None,
        )(fn)
        return pytest.mark.slow(configured) if long else configured

    return apply
