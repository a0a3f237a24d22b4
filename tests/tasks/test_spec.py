"""Typed specs: payload/result codecs, the erased adapter, classification, schemas."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from aster_forge import TaskExecutionContext, TaskRetryClass
from aster_forge.runtime import CancellationToken
from aster_forge.tasks import (
    TaskInvalidValueError,
    TaskLease,
    TaskLeaseGuard,
    TaskPayloadError,
    TaskSpec,
    TaskStepSpec,
)
from aster_forge.tasks.errors import TaskCodecError
from aster_forge.testing import ManualClock

from ._product import ARCHIVE, CLEANUP, THUMBNAIL, AppState, ArchivePayload, ThumbnailPayload


def _context() -> TaskExecutionContext:
    clock = ManualClock()
    lease = TaskLease(1, "tok", clock.now() + timedelta(seconds=30))
    guard = TaskLeaseGuard(
        lease, timedelta(seconds=30), clock=clock, shutdown_token=CancellationToken()
    )
    return TaskExecutionContext(guard, attempt=1)


def test_payload_and_result_codecs_round_trip() -> None:
    payload = ThumbnailPayload(file_id=3, width=64, height=48)
    text = THUMBNAIL.encode_payload(payload)
    assert THUMBNAIL.decode_payload(text) == payload
    assert ARCHIVE.decode_payload(ARCHIVE.encode_payload(ArchivePayload([1, 2]))) == ArchivePayload(
        [1, 2]
    )
    assert CLEANUP.decode_payload('{"older_than_days": 7}') == {"older_than_days": 7}
    assert ARCHIVE.encode_result(2) == "2"
    assert ARCHIVE.decode_result("2") == 2
    assert CLEANUP.encode_result(None) is None
    with pytest.raises(TaskCodecError, match="no result type"):
        CLEANUP.decode_result("null")


def test_invalid_payload_names_kind_and_field_but_not_values() -> None:
    with pytest.raises(TaskPayloadError) as info:
        THUMBNAIL.decode_payload('{"file_id": 3, "width": "wide-secret", "height": 2}')
    assert info.value.task_kind == "thumbnail"
    assert info.value.fields == ("width",)
    assert "task kind 'thumbnail'" in str(info.value) and "'width'" in str(info.value)
    assert "wide-secret" not in str(info.value)
    with pytest.raises(TaskPayloadError, match=r"height.*Field required"):
        THUMBNAIL.decode_payload('{"file_id": 3, "width": 1}')
    with pytest.raises(TaskPayloadError, match=r"<root>.*Invalid JSON"):
        THUMBNAIL.decode_payload("{not json")


async def test_erased_adapter_runs_json_in_json_out() -> None:
    state = AppState(calls=[])
    erased = THUMBNAIL.erase()
    out = await erased.run_json(_context(), state, '{"file_id": 9, "width": 4, "height": 3}')
    assert out == '{"path":"/thumbs/9_4x3.png"}'
    assert state.calls == ["thumbnail:9"]
    assert await CLEANUP.erase().run_json(_context(), state, '{"older_than_days": 1}') is None


async def test_erased_adapter_invalid_payload_is_permanent_and_body_never_runs() -> None:
    state = AppState(calls=[])
    erased = THUMBNAIL.erase()
    with pytest.raises(TaskPayloadError) as info:
        await erased.run_json(_context(), state, '{"file_id": "x", "width": 1, "height": 1}')
    assert state.calls == []
    classified = erased.classify(info.value)
    assert classified.retry_class is TaskRetryClass.PERMANENT
    assert "thumbnail" in classified.message and "file_id" in classified.message


async def test_product_errors_are_classified() -> None:
    erased = THUMBNAIL.erase()
    state = AppState(calls=[])
    with pytest.raises(Exception) as info:
        await erased.run_json(_context(), state, '{"file_id": 1, "width": 20000, "height": 1}')
    classified = erased.classify(info.value)
    assert classified.retry_class is TaskRetryClass.PERMANENT
    assert classified.message == "Image too large"
    unknown = erased.classify(KeyError("internal-detail"))
    assert unknown.retry_class is TaskRetryClass.RETRYABLE
    assert unknown.message == "KeyError: 'internal-detail'"
    redacted, expected = erased.classify_failure(KeyError("internal-detail"), redact=True)
    assert (redacted.message, expected) == ("KeyError", False)


def test_initial_steps_and_schemas() -> None:
    now = datetime(2030, 1, 1, tzinfo=UTC)
    assert [s.key for s in THUMBNAIL.initial_steps(now=now)] == ["load", "render"]
    assert THUMBNAIL.erase().initial_steps_json(now=now) is not None
    assert ARCHIVE.erase().initial_steps_json() is None
    schema = THUMBNAIL.payload_json_schema()
    assert schema["required"] == ["file_id", "width", "height"]
    assert THUMBNAIL.result_json_schema() is not None
    assert CLEANUP.result_json_schema() is None


def test_spec_rejects_duplicate_steps_and_unsupported_types() -> None:
    async def body(ctx: TaskExecutionContext, state: None, payload: int) -> int:
        return payload

    with pytest.raises(TaskInvalidValueError, match="step key twice"):
        TaskSpec(
            kind="k",
            payload_type=int,
            result_type=int,
            run=body,
            steps=(TaskStepSpec("a", "A"), TaskStepSpec("a", "A")),
        )

    class Opaque:
        pass

    with pytest.raises(TaskInvalidValueError, match="not supported by pydantic"):
        TaskSpec(kind="k", payload_type=Opaque, result_type=int, run=body)
