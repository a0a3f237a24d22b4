"""Retry classes, classification and backoff delays."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aster_forge import ClassifiedTaskError, TaskRetryClass, TaskRetryPolicy
from aster_forge.tasks import TaskPayloadError
from aster_forge.tasks._retry import (
    TaskFailureClassification,
    classify_task_error,
    should_auto_retry,
)


def test_retry_class_capabilities() -> None:
    assert TaskRetryClass.RETRYABLE.should_auto_retry()
    assert TaskRetryClass.RETRYABLE.can_manual_retry()
    assert not TaskRetryClass.MANUAL.should_auto_retry()
    assert TaskRetryClass.MANUAL.can_manual_retry()
    assert not TaskRetryClass.PERMANENT.should_auto_retry()
    assert not TaskRetryClass.PERMANENT.can_manual_retry()


def test_should_auto_retry_respects_budget() -> None:
    assert should_auto_retry(TaskRetryClass.RETRYABLE, 1, 3)
    assert should_auto_retry(TaskRetryClass.RETRYABLE, 2, 3)
    assert not should_auto_retry(TaskRetryClass.RETRYABLE, 3, 3)
    assert not should_auto_retry(TaskRetryClass.PERMANENT, 1, 3)
    assert not should_auto_retry(TaskRetryClass.MANUAL, 1, 3)


class QuotaError(Exception):
    pass


def _product_classifier(exc: Exception) -> TaskFailureClassification | None:
    if isinstance(exc, QuotaError):
        return TaskFailureClassification(TaskRetryClass.MANUAL, "Storage quota exceeded")
    return None


def test_classification_order_and_type_and_message_for_unknown_errors() -> None:
    chosen = classify_task_error(ClassifiedTaskError("Bad input", TaskRetryClass.PERMANENT))
    assert chosen == TaskFailureClassification(TaskRetryClass.PERMANENT, "Bad input")
    payload = TaskPayloadError("invalid payload for task kind 'x'", task_kind="x", fields=("a",))
    assert classify_task_error(payload).retry_class is TaskRetryClass.PERMANENT
    quota = classify_task_error(QuotaError("secret=hunter2"), None, _product_classifier)
    assert quota == TaskFailureClassification(TaskRetryClass.MANUAL, "Storage quota exceeded")
    unknown = classify_task_error(RuntimeError("upstream said 503"), _product_classifier)
    assert unknown == TaskFailureClassification(
        TaskRetryClass.RETRYABLE, "RuntimeError: upstream said 503"
    )
    assert classify_task_error(TimeoutError()).message == "TimeoutError"


def test_default_delays_back_off_to_the_cap() -> None:
    policy = TaskRetryPolicy(jitter=0.0)
    assert [policy.delay(n).total_seconds() for n in range(1, 7)] == [5, 15, 45, 135, 300, 300]
    assert policy.delay(10**9) == timedelta(minutes=5)  # saturates, never overflows
    assert policy.delay(0) == timedelta(seconds=5)


def test_invalid_policies_are_rejected() -> None:
    with pytest.raises(ValueError, match="multiplier"):
        TaskRetryPolicy(multiplier=0.5)
    with pytest.raises(ValueError, match="max_delay"):
        TaskRetryPolicy(base_delay=timedelta(minutes=10))
    with pytest.raises(ValueError, match="jitter"):
        TaskRetryPolicy(jitter=1.5)
    with pytest.raises(ValueError, match="max_attempts"):
        TaskRetryPolicy(max_attempts=0)


_policies = st.builds(
    TaskRetryPolicy,
    base_delay=st.integers(0, 3600).map(lambda s: timedelta(seconds=s)),
    multiplier=st.floats(1.0, 10.0),
    max_delay=st.just(timedelta(hours=2)),
    jitter=st.floats(0.0, 1.0),
)


@given(_policies, st.integers(-5, 10_000), st.integers(0, 2**32))
def test_backoff_is_monotonic_capped_and_never_negative(
    policy: TaskRetryPolicy, attempt: int, seed: int
) -> None:
    backoff = policy.backoff(attempt)
    assert timedelta(0) <= backoff <= policy.max_delay
    assert policy.backoff(attempt + 1) >= backoff
    delay = policy.delay(attempt, rng=random.Random(seed))
    assert backoff * (1 - policy.jitter) - timedelta(microseconds=1) <= delay <= backoff


@given(st.integers(1, 10_000), st.integers(0, 2**32))
def test_same_random_draw_keeps_jittered_delays_monotonic(attempt: int, seed: int) -> None:
    default = TaskRetryPolicy()  # 5 s, x3 per attempt, capped at 5 min, 10 % jitter
    first = default.delay(attempt, rng=random.Random(seed))
    second = default.delay(attempt + 1, rng=random.Random(seed))
    assert timedelta(0) <= first <= second <= timedelta(minutes=5)
