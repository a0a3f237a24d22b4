"""Worker settings are checked when they are built: a wrong type or value fails at once,
naming the field and what to pass, instead of inside the running worker."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from aster_forge import Forge, ForgeDeclarationError, ForgeWorkerSettings, TaskRetryPolicy
from aster_forge.tasks import (
    ClaimedTaskExecutionConfig,
    DispatchPollConfig,
    TaskInvalidValueError,
    TaskLaneConfig,
)
from aster_forge.tasks.errors import TaskDispatchConfigError


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        (
            "poll",
            timedelta(milliseconds=50),
            "ForgeWorkerSettings.poll must be a DispatchPollConfig such as "
            "DispatchPollConfig(base_interval=timedelta(milliseconds=200)), got timedelta",
        ),
        ("retry", 5, "ForgeWorkerSettings.retry must be a TaskRetryPolicy such as"),
        ("task_lease_ttl", 30, "task_lease_ttl must be a timedelta such as timedelta(seconds=30)"),
        ("task_lease_ttl", timedelta(0), "ForgeWorkerSettings.task_lease_ttl must be positive"),
        ("shutdown_grace", 10.0, "ForgeWorkerSettings.shutdown_grace must be a timedelta"),
        ("shutdown_grace", timedelta(seconds=-1), "shutdown_grace must be non-negative"),
        ("scheduler_lease_ttl", "15s", "ForgeWorkerSettings.scheduler_lease_ttl must be a"),
        ("scheduler_claim_ttl", None, "ForgeWorkerSettings.scheduler_claim_ttl must be a"),
        ("temp_root", "/var/tmp", "ForgeWorkerSettings.temp_root must be a Path such as"),
        ("redact_errors", "yes", "ForgeWorkerSettings.redact_errors must be a bool such as"),
    ],
)
def test_a_wrong_setting_fails_when_built_and_names_the_field(
    field: str, value: Any, message: str
) -> None:
    with pytest.raises(ForgeDeclarationError) as info:
        ForgeWorkerSettings(**{field: value})
    assert message in str(info.value)


def test_the_forge_refuses_bad_settings_before_anything_runs() -> None:
    with pytest.raises(ForgeDeclarationError, match=r"ForgeWorkerSettings\.poll"):
        Forge("memory://", settings=ForgeWorkerSettings(poll=timedelta(seconds=1)))  # type: ignore[arg-type]


def test_valid_settings_are_kept_as_given() -> None:
    poll = DispatchPollConfig(base_interval=timedelta(milliseconds=100))
    settings = ForgeWorkerSettings(
        poll=poll, shutdown_grace=timedelta(0), temp_root=Path("/tmp"), redact_errors=True
    )
    assert settings.poll is poll and settings.redact_errors is True


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: DispatchPollConfig(base_interval=0.2), "DispatchPollConfig.base_interval"),  # type: ignore[arg-type]
        (lambda: DispatchPollConfig(multiplier="2"), "DispatchPollConfig.multiplier"),  # type: ignore[arg-type]
        (lambda: TaskLaneConfig("media", "4"), "lane 'media': max_concurrency must be an int"),  # type: ignore[arg-type]
        (lambda: TaskLaneConfig("media", 2, claim_batch=0), "claim_batch must be an int >= 1"),
        (lambda: TaskLaneConfig("media", 2, cluster_limit=0), "cluster_limit must be an int >= 1"),
        (
            lambda: TaskLaneConfig("media", 2, partition_limit=0),
            "partition_limit must be an int >= 1",
        ),
    ],
)
def test_dispatch_configs_check_their_types(build: Any, message: str) -> None:
    with pytest.raises(TaskDispatchConfigError, match=message):
        build()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"base_delay": 5}, "TaskRetryPolicy.base_delay must be a timedelta, got int"),
        ({"max_attempts": True}, "TaskRetryPolicy.max_attempts must be an int >= 1, got bool"),
        ({"jitter": "0.1"}, "TaskRetryPolicy.jitter must be a number, got str"),
        ({"multiplier": 0.5}, "TaskRetryPolicy.multiplier must be a finite number >= 1"),
    ],
)
def test_a_retry_policy_checks_its_types(options: dict[str, Any], message: str) -> None:
    with pytest.raises(TaskInvalidValueError, match=message):
        TaskRetryPolicy(**options)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"lease_ttl": 30}, "ClaimedTaskExecutionConfig.lease_ttl must be a timedelta, got int"),
        ({"retry_policy": timedelta(seconds=5)}, "retry_policy must be a TaskRetryPolicy"),
        ({"shutdown_grace": 10}, "ClaimedTaskExecutionConfig.shutdown_grace must be a timedelta"),
        ({"blocking_step_threshold": 0.25}, "blocking_step_threshold must be a timedelta"),
        ({"max_snoozes": -1}, "ClaimedTaskExecutionConfig.max_snoozes must be an int >= 0"),
        ({"redact_errors": None}, "ClaimedTaskExecutionConfig.redact_errors must be a bool"),
    ],
)
def test_the_execution_config_checks_its_types(options: dict[str, Any], message: str) -> None:
    with pytest.raises(TaskInvalidValueError, match=message):
        ClaimedTaskExecutionConfig(state=None, specs={}, **options)
