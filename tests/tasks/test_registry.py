"""TaskRegistry: kinds, specs and lanes must agree both ways."""

from __future__ import annotations

import pytest

from aster_forge.tasks import TaskRegistry, TaskSpec
from aster_forge.tasks.errors import TaskRegistryError

from ._product import (
    ALL_SPECS,
    ARCHIVE,
    CLEANUP,
    THUMBNAIL,
    AppState,
    ArchivePayload,
    Kind,
    Lane,
    run_archive,
)


def _registry() -> TaskRegistry[AppState, Kind, Lane]:
    return TaskRegistry(kind=Kind, lane=Lane, state=AppState)


def _complete() -> TaskRegistry[AppState, Kind, Lane]:
    registry = _registry()
    for spec in ALL_SPECS:
        registry.register(spec)
    registry.lane(Lane.MEDIA, [Kind.THUMBNAIL, Kind.ARCHIVE])
    registry.lane(Lane.FALLBACK, [Kind.CLEANUP])
    return registry


def test_consistent_registry_validates_and_answers_lookups_both_ways() -> None:
    registry = _complete().validate()
    assert registry.validated
    for kind in Kind:
        assert registry.spec_for(kind).kind is kind
        assert kind in registry.kinds_of(registry.lane_of(kind))
    for lane in Lane:
        assert all(registry.lane_of(kind) is lane for kind in registry.kinds_of(lane))
    assert registry.kinds_of(Lane.MEDIA) == (Kind.THUMBNAIL, Kind.ARCHIVE)
    assert registry.typed_spec_for(Kind.ARCHIVE) is ARCHIVE
    assert set(registry.payload_json_schemas()) == {"thumbnail", "archive", "cleanup"}


def test_missing_spec_is_reported() -> None:
    registry = _registry()
    registry.register(THUMBNAIL)
    registry.register(ARCHIVE)
    registry.lane(Lane.MEDIA, list(Kind))
    with pytest.raises(TaskRegistryError, match=r"Kind\.CLEANUP has no spec"):
        registry.validate()
    assert not registry.validated


def test_two_specs_for_one_kind_are_reported() -> None:
    registry = _complete()
    registry.register(THUMBNAIL)
    with pytest.raises(TaskRegistryError, match=r"Kind\.THUMBNAIL is claimed by 2 specs"):
        registry.validate()


def test_kind_in_no_lane_and_in_two_lanes_are_reported() -> None:
    registry = _registry()
    for spec in ALL_SPECS:
        registry.register(spec)
    registry.lane(Lane.MEDIA, [Kind.THUMBNAIL])
    registry.lane(Lane.FALLBACK, [Kind.THUMBNAIL, Kind.CLEANUP])
    problems = registry.problems()
    assert "task kind Kind.ARCHIVE is in no lane" in problems
    assert any("Kind.THUMBNAIL is in more than one lane" in p for p in problems)
    with pytest.raises(TaskRegistryError, match="ARCHIVE is in no lane"):
        registry.validate()


def test_foreign_members_are_reported() -> None:
    registry = _complete()
    registry.lane(Lane.FALLBACK, ["cleanup"])  # type: ignore[list-item]
    with pytest.raises(TaskRegistryError, match="'cleanup', which is not a Kind"):
        registry.validate()


def test_lookups_need_validation_and_registration_ends_after_it() -> None:
    registry = _complete()
    with pytest.raises(TaskRegistryError, match="not validated"):
        registry.spec_for(Kind.THUMBNAIL)
    registry.validate()
    with pytest.raises(TaskRegistryError, match="frozen"):
        registry.register(CLEANUP)
    with pytest.raises(TaskRegistryError, match="frozen"):
        registry.lane(Lane.MEDIA, [])


def _named(kind: str) -> TaskSpec[AppState, ArchivePayload, int]:
    return TaskSpec(kind=kind, payload_type=ArchivePayload, result_type=int, run=run_archive)


def test_plain_str_kinds_and_lanes_need_no_enum() -> None:
    registry: TaskRegistry[AppState, str, str] = TaskRegistry(state=AppState)
    registry.register(_named("archive"))
    registry.register(_named("purge"))
    registry.lane("slow", ["purge"])
    registry.lane("bulk", ["archive"])
    registry.validate()
    assert registry.kinds() == ("archive", "purge")
    assert registry.lanes() == ("slow", "bulk")
    assert registry.lane_of("archive") == "bulk"
    assert registry.kind_type is None and registry.lane_type is None
    task = registry.new_task("purge", {"files": [1, 2]})
    assert (task.kind, task.lane) == ("purge", "slow")
    assert "kind=str, lane=str" in repr(registry)


def test_plain_str_registry_checks_both_ways() -> None:
    registry: TaskRegistry[AppState, str, str] = TaskRegistry()
    registry.register(_named("archive"))
    registry.register(_named("orphan"))
    registry.lane("bulk", ["archive", "ghost"])
    registry.lane(Lane.MEDIA, [Kind.ARCHIVE])  # type: ignore[arg-type, list-item]
    problems = registry.problems()
    assert "task kind 'orphan' is in no lane" in problems
    assert "task kind 'ghost' has no spec" in problems
    assert any("which is not a non-empty str" in p for p in problems)
    with pytest.raises(TaskRegistryError, match="'orphan' is in no lane"):
        registry.validate()
