"""TaskDedupeKey and scheduled_task_dedupe_key: deterministic, injective, bounded, validated."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aster_forge import TaskStatus
from aster_forge.tasks import (
    NewTask,
    TaskDedupeKey,
    TaskInvalidValueError,
    scheduled_task_dedupe_key,
)
from aster_forge.tasks.errors import TaskDedupeKeyError

AT = datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


def test_format_is_stable() -> None:
    key = scheduled_task_dedupe_key("aster_yggdrasil", "audit-cleanup", AT)
    assert key.as_str() == "scheduled:aster_yggdrasil:audit-cleanup:2030-01-02T03:04:05.678901Z"
    assert str(key) == key.value
    assert key == scheduled_task_dedupe_key("aster_yggdrasil", "audit-cleanup", AT)


def test_equal_instants_in_other_zones_give_the_same_key() -> None:
    tokyo = AT.astimezone(timezone(timedelta(hours=9)))
    assert scheduled_task_dedupe_key("ns", "job", tokyo) == scheduled_task_dedupe_key(
        "ns", "job", AT
    )


def test_separators_are_escaped_so_keys_never_collide() -> None:
    a = scheduled_task_dedupe_key("a:b", "c", AT)
    b = scheduled_task_dedupe_key("a", "b:c", AT)
    c = scheduled_task_dedupe_key("a%3Ab", "c", AT)
    assert len({a, b, c}) == 3
    assert a.value.startswith("scheduled:a%3Ab:c:")


_part = st.text(
    alphabet=st.characters(blacklist_categories=("Cc", "Cs", "Zs", "Zl", "Zp")),
    min_size=1,
    max_size=20,
)


@given(_part, _part, _part, _part)
def test_distinct_parts_give_distinct_keys(ns1: str, n1: str, ns2: str, n2: str) -> None:
    k1 = scheduled_task_dedupe_key(ns1, n1, AT)
    k2 = scheduled_task_dedupe_key(ns2, n2, AT)
    assert (k1 == k2) == ((ns1, n1) == (ns2, n2))
    assert len(k1.value) <= TaskDedupeKey.MAX_LENGTH


def test_distinct_instants_give_distinct_keys() -> None:
    later = AT + timedelta(microseconds=1)
    assert scheduled_task_dedupe_key("n", "j", AT) != scheduled_task_dedupe_key("n", "j", later)


@pytest.mark.parametrize(
    ("namespace", "name", "message"),
    [
        ("", "job", "namespace must not be empty"),
        ("ns", "  ", "name must not be empty"),
        ("ns ", "job", "leading or trailing whitespace"),
        ("n" * 65, "job", "namespace is 65 characters"),
        ("ns", "j" * 129, "name is 129 characters"),
        ("ns", "bad\nname", "control characters"),
        ("ns\x00", "job", "control characters"),
    ],
)
def test_invalid_parts(namespace: str, name: str, message: str) -> None:
    with pytest.raises(TaskDedupeKeyError, match=message):
        scheduled_task_dedupe_key(namespace, name, AT)


def test_escaping_that_overflows_the_limit_is_rejected() -> None:
    with pytest.raises(TaskDedupeKeyError, match="after escaping"):
        scheduled_task_dedupe_key(":" * 64, ":" * 20, AT)


def test_naive_or_wrong_type_scheduled_at_is_rejected() -> None:
    with pytest.raises(TaskDedupeKeyError, match="timezone-aware"):
        scheduled_task_dedupe_key("ns", "job", datetime(2030, 1, 1))  # naive on purpose
    with pytest.raises(TaskDedupeKeyError, match="must be a datetime"):
        scheduled_task_dedupe_key("ns", "job", "2030-01-01")  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", ["", " x", "x" * 256, "tab\t", "\x85"])
def test_task_dedupe_key_validation(bad: str) -> None:
    with pytest.raises(TaskDedupeKeyError):
        TaskDedupeKey(bad)


def test_errors_are_invalid_value_errors() -> None:
    with pytest.raises(TaskInvalidValueError) as caught:
        TaskDedupeKey("")
    assert isinstance(caught.value, ValueError)
    assert isinstance(caught.value, TaskInvalidValueError)
    assert TaskDedupeKey("x" * 255).value == "x" * 255


WINDOW_ERRORS: dict[str, tuple[dict[str, Any], str]] = {
    "statuses-not-a-set": ({"held_while": [TaskStatus.PENDING]}, "set of TaskStatus"),
    "status-unknown": ({"held_while": {"pending", "later"}}, "not a TaskStatus"),
    "without-pending": ({"held_while": {TaskStatus.RUNNING}}, "must include"),
    "period-zero": ({"held_for": timedelta(0)}, "above zero"),
    "period-negative": ({"held_for": timedelta(seconds=-1)}, "above zero"),
    "period-too-long": ({"held_for": timedelta(days=36501)}, "at most 36500 days"),
    "period-not-timedelta": ({"held_for": 60}, "must be a timedelta"),
    "replace-not-bool": ({"replace": 1}, "must be a bool"),
}


@pytest.mark.parametrize("case", sorted(WINDOW_ERRORS))
def test_a_bad_window_is_a_dedupe_key_error(case: str) -> None:
    window, message = WINDOW_ERRORS[case]
    with pytest.raises(TaskDedupeKeyError, match=message):
        TaskDedupeKey("key", **window)


def test_a_window_is_normalised_and_reported() -> None:
    key = TaskDedupeKey("key", held_while={"pending", TaskStatus.RUNNING})  # type: ignore[arg-type]
    assert key.held_while == frozenset({TaskStatus.PENDING, TaskStatus.RUNNING})
    assert key.has_window
    assert TaskDedupeKey("key", replace=True).has_window
    assert not TaskDedupeKey("key").has_window
    assert NewTask("k", "l", dedupe_key=key).windowed_dedupe_key == key
    assert NewTask("k", "l", dedupe_key="key").windowed_dedupe_key is None
