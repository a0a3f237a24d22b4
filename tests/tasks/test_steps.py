"""Step state transitions and the stable steps JSON shape (golden files)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aster_forge.tasks import TaskInvalidValueError, TaskStepSpec
from aster_forge.tasks._steps import (
    TaskStepInfo,
    TaskStepStatus,
    initial_task_steps_from_specs,
    mark_active_step_failed,
    parse_task_steps_json,
    serialize_task_steps_json,
    set_task_step_active,
    set_task_step_skipped,
    set_task_step_succeeded,
    task_step_status_json_schema,
    task_steps_json_schema,
)
from aster_forge.tasks.errors import TaskCodecError, TaskStepNotFoundError

GOLDEN = Path(__file__).parent / "golden"
T0 = datetime(2030, 1, 1, tzinfo=UTC)
T1 = T0 + timedelta(seconds=5)
T2 = T0 + timedelta(seconds=9)
SPECS = (
    TaskStepSpec("download", "Download"),
    TaskStepSpec("convert", "Convert"),
    TaskStepSpec("upload", "Upload"),
)


def test_initial_steps_activate_first_and_leave_rest_pending() -> None:
    steps = initial_task_steps_from_specs(SPECS, now=T0)
    assert [s.status for s in steps] == [
        TaskStepStatus.ACTIVE,
        TaskStepStatus.PENDING,
        TaskStepStatus.PENDING,
    ]
    assert steps[0].detail == "Waiting for worker"
    assert steps[0].started_at == T0
    assert steps[1].started_at is None
    assert initial_task_steps_from_specs(()) == ()


def test_transitions_return_new_values_and_leave_input_untouched() -> None:
    initial = initial_task_steps_from_specs(SPECS, now=T0)
    done = set_task_step_succeeded(initial, "download", detail="ok", progress=(10, 10), now=T1)
    assert initial[0].status is TaskStepStatus.ACTIVE  # input unchanged
    assert done[0].status is TaskStepStatus.SUCCEEDED
    assert done[0].started_at == T0  # first start kept
    assert done[0].finished_at == T1
    active = set_task_step_active(done, "convert", detail="converting", progress=(2, 5), now=T1)
    assert active[1].status is TaskStepStatus.ACTIVE
    assert (active[1].progress_current, active[1].progress_total) == (2, 5)
    finished = set_task_step_succeeded(active, "convert", now=T2)
    assert finished[1].progress_current == 5  # known total completes
    skipped = set_task_step_skipped(finished, "upload", detail="nothing to upload", now=T2)
    assert skipped[2].status is TaskStepStatus.SKIPPED
    assert skipped[2].started_at == T2 and skipped[2].finished_at == T2


def test_reactivation_clears_finished_at_and_keeps_started_at() -> None:
    steps = set_task_step_succeeded(
        initial_task_steps_from_specs(SPECS, now=T0), "download", now=T1
    )
    again = set_task_step_active(steps, "download", now=T2)
    assert again[0].started_at == T0
    assert again[0].finished_at is None


def test_unknown_step_key_is_a_clear_error() -> None:
    steps = initial_task_steps_from_specs(SPECS, now=T0)
    with pytest.raises(TaskStepNotFoundError, match=r"'nope' not found.*download, convert, upload"):
        set_task_step_active(steps, "nope")
    with pytest.raises(LookupError):
        set_task_step_skipped(steps, "nope")


def test_invalid_progress_is_rejected() -> None:
    steps = initial_task_steps_from_specs(SPECS, now=T0)
    with pytest.raises(TaskInvalidValueError, match="exceeds total"):
        set_task_step_active(steps, "download", progress=(6, 5))
    with pytest.raises(TaskInvalidValueError, match="negative"):
        set_task_step_active(steps, "download", progress=(-1, 5))


def test_duplicate_spec_keys_are_rejected() -> None:
    with pytest.raises(TaskInvalidValueError, match="more than once"):
        initial_task_steps_from_specs([TaskStepSpec("a", "A"), TaskStepSpec("a", "B")])
    with pytest.raises(TaskInvalidValueError):
        TaskStepSpec("", "Empty")


def test_mark_active_step_failed_prefers_the_active_step() -> None:
    steps = set_task_step_succeeded(
        initial_task_steps_from_specs(SPECS, now=T0), "download", now=T1
    )
    steps = set_task_step_active(steps, "convert", now=T1)
    failed = mark_active_step_failed(steps, "Disk full", now=T2)
    assert failed[1].status is TaskStepStatus.FAILED
    assert failed[1].detail == "Disk full"
    assert failed[1].finished_at == T2
    assert failed[2].status is TaskStepStatus.PENDING


def test_mark_active_step_failed_falls_back_to_last_pending() -> None:
    steps = (
        TaskStepInfo("a", "A", TaskStepStatus.SUCCEEDED),
        TaskStepInfo("b", "B", TaskStepStatus.PENDING),
        TaskStepInfo("c", "C", TaskStepStatus.PENDING),
    )
    failed = mark_active_step_failed(steps, "boom", now=T2)
    assert [s.status for s in failed] == [
        TaskStepStatus.SUCCEEDED,
        TaskStepStatus.PENDING,
        TaskStepStatus.FAILED,
    ]
    finished = (TaskStepInfo("a", "A", TaskStepStatus.SUCCEEDED),)
    assert mark_active_step_failed(finished, "boom") == finished


def _golden_lifecycle() -> dict[str, tuple[TaskStepInfo, ...]]:
    initial = initial_task_steps_from_specs(SPECS, now=T0)
    progressed = set_task_step_succeeded(initial, "download", progress=(3, 3), now=T1)
    progressed = set_task_step_active(
        progressed, "convert", detail="page 2/5", progress=(2, 5), now=T1
    )
    failed = mark_active_step_failed(progressed, "Converter crashed", now=T2)
    return {"initial": initial, "progressed": progressed, "failed": failed}


@pytest.mark.parametrize("name", ["initial", "progressed", "failed"])
def test_steps_json_matches_golden_file_and_round_trips(name: str) -> None:
    steps = _golden_lifecycle()[name]
    golden = (GOLDEN / f"steps_{name}.json").read_text().strip()
    assert serialize_task_steps_json(steps) == golden
    assert parse_task_steps_json(golden, specs=SPECS) == steps


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("not json", "Invalid JSON"),
        ("{}", "valid tuple|valid array|valid list"),
        ('[{"key": "a"}]', r"0\.title: Field required"),
        ('[{"key": "a", "title": "A", "status": "paused"}]', r"0\.status"),
        ('[{"key": "a", "title": "A", "status": "active", "progress_current": "1"}]', "integer"),
        (
            '[{"key": "a", "title": "A", "status": "active", "started_at": "2030-01-01T00:00:00"}]',
            "timezone",
        ),
    ],
)
def test_malformed_steps_json_raises_codec_error(text: str, match: str) -> None:
    with pytest.raises(TaskCodecError, match=match):
        parse_task_steps_json(text)


def test_unknown_and_duplicate_keys_in_stored_json_are_rejected() -> None:
    text = (
        '[{"key": "download", "title": "D", "status": "active"},'
        ' {"key": "zip", "title": "Z", "status": "pending"}]'
    )
    with pytest.raises(TaskInvalidValueError, match=r"unknown step keys.*zip"):
        parse_task_steps_json(text, specs=SPECS)
    dup = (
        '[{"key": "a", "title": "A", "status": "active"},'
        ' {"key": "a", "title": "A", "status": "pending"}]'
    )
    with pytest.raises(TaskInvalidValueError, match="more than once"):
        parse_task_steps_json(dup)


_step = st.builds(
    TaskStepInfo,
    key=st.text(min_size=1, max_size=12),
    title=st.text(max_size=20),
    status=st.sampled_from(TaskStepStatus),
    progress_current=st.just(0),
    progress_total=st.integers(0, 10**12),
    detail=st.none() | st.text(max_size=30),
    started_at=st.none() | st.datetimes(timezones=st.just(UTC)),
    finished_at=st.none() | st.datetimes(timezones=st.just(UTC)),
)


@given(st.lists(_step, max_size=6, unique_by=lambda s: s.key))
def test_any_step_list_round_trips(steps: list[TaskStepInfo]) -> None:
    assert parse_task_steps_json(serialize_task_steps_json(steps)) == tuple(steps)


def test_json_schemas_describe_steps_and_statuses() -> None:
    status = task_step_status_json_schema()
    assert status["enum"] == ["pending", "active", "succeeded", "failed", "skipped", "cancelled"]
    schema = task_steps_json_schema()
    assert schema["type"] == "array"
    info = schema["$defs"]["TaskStepInfo"]
    assert set(info["required"]) == {"key", "title", "status"}
