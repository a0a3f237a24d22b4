"""Task records: the fast constructor stores share with the dataclass's own."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from aster_forge import BackgroundTaskRecord, EnqueueResult, TaskStatus
from aster_forge.tasks._records import TaskFailureReason

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
VALUES = (
    7, "kind", "lane", TaskStatus.FAILED, '{"a": 1}', None, "[]", 2, 5, NOW, -3, None, None,
    "owner", "key", "boom", TaskFailureReason.CANCELLED, True, False, True, NOW, NOW, NOW,
    NOW, 4, "Traceback (most recent call last):\nValueError: boom\n",
    '{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}', True,
    "tenant-1",
)  # fmt: skip


def test_from_values_equals_the_dataclass_constructor_field_by_field() -> None:
    record = BackgroundTaskRecord.from_values(VALUES)
    assert record == BackgroundTaskRecord(*VALUES)
    assert dataclasses.astuple(record) == VALUES
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.status = TaskStatus.PENDING  # type: ignore[misc]


def test_from_values_refuses_a_wrong_number_of_values() -> None:
    with pytest.raises(TypeError, match="29 fields, got 28 values"):
        BackgroundTaskRecord.from_values(VALUES[:-1])
    with pytest.raises(TypeError, match="got 30 values"):
        BackgroundTaskRecord.from_values((*VALUES, 0))


def test_the_record_has_no_checks_from_values_would_skip() -> None:
    # from_values sets the slots directly; a __post_init__ added later would be bypassed.
    assert not hasattr(BackgroundTaskRecord, "__post_init__")


def _recording_build(built: list[BackgroundTaskRecord]) -> Callable[[], BackgroundTaskRecord]:
    """A deferred result's ``build`` that appends each record it makes to ``built``."""

    def build() -> BackgroundTaskRecord:
        record = BackgroundTaskRecord.from_values(VALUES)
        built.append(record)
        return record

    return build


def test_a_deferred_enqueue_result_builds_its_record_once_and_equals_the_eager_one() -> None:
    built: list[BackgroundTaskRecord] = []
    build = _recording_build(built)
    eager = EnqueueResult(BackgroundTaskRecord(*VALUES), True)
    deferred = EnqueueResult.deferred(build, True)
    assert built == [], "nothing is built before the record is read"
    assert deferred == eager and hash(deferred) == hash(eager)
    assert deferred.record is deferred.record
    assert len(built) == 1
    assert deferred != EnqueueResult(BackgroundTaskRecord(*VALUES), False)
    assert repr(deferred) == repr(eager)
    match deferred:
        case EnqueueResult(record, created):
            assert record.id == 7 and created
    with pytest.raises(dataclasses.FrozenInstanceError):
        deferred.created = False  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del deferred.created


def test_task_id_reads_the_id_without_building_a_deferred_record() -> None:
    built: list[BackgroundTaskRecord] = []
    build = _recording_build(built)
    told = EnqueueResult.deferred(build, True, task_id=7)
    assert told.task_id == 7
    assert built == [], "the id the store gave is read without the record"
    assert told.record.id == told.task_id and len(built) == 1
    # A store that gives no id: the record is built to read it, once.
    untold = EnqueueResult.deferred(build, True)
    assert untold.task_id == 7 and untold.task_id == 7 and len(built) == 2
    assert EnqueueResult(BackgroundTaskRecord(*VALUES), False).task_id == 7
    assert pickle.loads(pickle.dumps(told)).task_id == 7


def test_an_unread_deferred_result_pickles_and_copies_as_its_record() -> None:
    # What would build the record (a driver row) is never pickled or shared.
    deferred = EnqueueResult.deferred(lambda: BackgroundTaskRecord(*VALUES), False)
    restored = pickle.loads(pickle.dumps(deferred))
    assert restored == deferred and restored.record == BackgroundTaskRecord(*VALUES)
    assert copy.copy(deferred) == deferred


def test_results_deferred_at_a_shared_builder_build_each_their_own_record_once() -> None:
    asked: list[int] = []

    def rows(index: int) -> BackgroundTaskRecord:
        asked.append(index)
        return BackgroundTaskRecord.from_values((10 + index, *VALUES[1:]))

    results = [EnqueueResult.deferred_at(rows, index, True, task_id=10 + index) for index in (0, 1)]
    assert [r.task_id for r in results] == [10, 11] and asked == []
    second = results[1].record
    assert second.id == 11 and results[1].record is second and asked == [1]
    assert results[0] == EnqueueResult(BackgroundTaskRecord.from_values((10, *VALUES[1:])), True)
    assert asked == [1, 0]
    restored = pickle.loads(pickle.dumps(results[1]))
    assert restored == results[1] and asked == [1, 0]
