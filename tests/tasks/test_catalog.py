"""Runtime-task catalog consistency and RuntimeTaskName round trips."""

from __future__ import annotations

import enum

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, TypeAdapter

from aster_forge.tasks import RuntimeTaskCatalog, RuntimeTaskDefinition, RuntimeTaskName
from aster_forge.tasks.errors import RuntimeTaskCatalogError

from ._product import RUNTIME_TASKS, Presentation, SystemRuntimeTaskKind

Name = RuntimeTaskName[SystemRuntimeTaskKind]


class RunRecord(BaseModel):
    task: RuntimeTaskName[SystemRuntimeTaskKind]


def test_catalog_lookups_match_the_seed_example() -> None:
    RUNTIME_TASKS.check()
    kind = SystemRuntimeTaskKind.SYSTEM_HEALTH_CHECK
    assert RUNTIME_TASKS.as_str(kind) == "system-health-check"
    assert RUNTIME_TASKS.from_wire_value("system-health-check") is kind
    assert RUNTIME_TASKS.display_name(kind) == "System health check"
    assert RUNTIME_TASKS.presentation(kind) is Presentation.HEALTH
    assert RUNTIME_TASKS.from_wire_value("removed-maintenance-task") is None
    assert [d.kind for d in RUNTIME_TASKS.definitions()] == list(SystemRuntimeTaskKind)


class Broken(enum.Enum):
    A = 1
    B = 2
    C = 3


def test_check_reports_duplicate_empty_and_missing_entries() -> None:
    catalog = RuntimeTaskCatalog(
        Broken,
        [
            RuntimeTaskDefinition(Broken.A, "same", "A", None),
            RuntimeTaskDefinition(Broken.B, "same", "", None),
            RuntimeTaskDefinition(Broken.B, "", "B", None),
        ],
    )
    problems = catalog.problems()
    assert any("wire value 'same' is used by" in p for p in problems)
    assert any("Broken.B: 2> has an empty display name" in p for p in problems)
    assert any("defined more than once" in p for p in problems)
    assert any("empty or untrimmed wire value" in p for p in problems)
    assert any("Broken.C: 3> has no definition" in p for p in problems)
    with pytest.raises(RuntimeTaskCatalogError, match="inconsistent"):
        catalog.check()


def test_known_and_legacy_names() -> None:
    known = Name.of(SystemRuntimeTaskKind.SYSTEM_HEALTH_CHECK)
    legacy = Name.parse(SystemRuntimeTaskKind, "removed-maintenance-task")
    assert known.as_str() == "system-health-check"
    assert known.known() is SystemRuntimeTaskKind.SYSTEM_HEALTH_CHECK
    assert known.display_name() == "System health check"
    assert legacy.known() is None
    assert legacy.display_name() == "removed maintenance task"
    assert Name.parse(SystemRuntimeTaskKind, "audit-cleanup").known() is (
        SystemRuntimeTaskKind.AUDIT_CLEANUP
    )
    assert Name.parse(SystemRuntimeTaskKind, "old_task-name").display_name() == "old task name"


def test_pydantic_serialises_to_the_wire_string() -> None:
    record = RunRecord(task=Name.of(SystemRuntimeTaskKind.AUDIT_CLEANUP))
    assert record.model_dump_json() == '{"task":"audit-cleanup"}'
    assert RunRecord.model_validate_json('{"task":"audit-cleanup"}').task.known() is (
        SystemRuntimeTaskKind.AUDIT_CLEANUP
    )
    from_member = RunRecord.model_validate({"task": SystemRuntimeTaskKind.SYSTEM_HEALTH_CHECK})
    assert from_member.task.as_str() == "system-health-check"
    assert RunRecord.model_json_schema()["properties"]["task"]["type"] == "string"
    with pytest.raises(ValueError, match="wire value string"):
        RunRecord.model_validate({"task": 5})


def test_unparameterised_field_type_is_a_clear_error() -> None:
    with pytest.raises(RuntimeTaskCatalogError, match=r"RuntimeTaskName\[YourKindEnum\]"):
        TypeAdapter(RuntimeTaskName)


@given(st.text())
def test_any_wire_string_round_trips_unchanged(wire: str) -> None:
    stored = RunRecord.model_validate_json(
        RunRecord.model_validate({"task": wire}).model_dump_json()
    )
    assert stored.task.as_str() == wire
    known = SystemRuntimeTaskKind.from_wire_value(wire)
    assert stored.task.known() is known
    if known is None:
        assert stored.task.display_name() == wire.replace("-", " ").replace("_", " ")
    else:
        assert stored.task.display_name() == known.display_name()
