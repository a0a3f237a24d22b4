"""Runtime temp dirs: layout, guard cleanup, scope validation."""

from __future__ import annotations

import string
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aster_forge.runtime import create_runtime_temp_dir_guard, ensure_runtime_temp_dir
from aster_forge.runtime.errors import RuntimeTempDirError, RuntimeTempDirScopeError

VALID = set(string.ascii_letters + string.digits + "-_")


async def test_ensure_runtime_temp_dir_creates_runtime_under_root(tmp_path: Path) -> None:
    root = tmp_path / "missing" / "root"
    created = await ensure_runtime_temp_dir(root)
    assert created == root / "_runtime"
    assert created.is_dir()
    assert await ensure_runtime_temp_dir(root) == created  # idempotent


async def test_ensure_runtime_temp_dir_reports_io_errors(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a dir")
    with pytest.raises(RuntimeTempDirError) as caught:
        await ensure_runtime_temp_dir(blocker)
    assert isinstance(caught.value.__cause__, OSError)


async def test_guard_creates_scoped_dir_and_removes_only_it(tmp_path: Path) -> None:
    async with create_runtime_temp_dir_guard(tmp_path, "thumbnail", "render dir") as guard:
        path = guard.path
        assert path.parent == tmp_path / "_runtime" / "thumbnail"
        assert path.is_dir()
        (path / "frame.png").write_bytes(b"x")
        (path / "nested").mkdir()
        async with create_runtime_temp_dir_guard(tmp_path, "thumbnail", "other") as other:
            assert other.path != path
    assert not path.exists()
    assert (tmp_path / "_runtime" / "thumbnail").is_dir()
    assert (tmp_path / "_runtime").is_dir()
    with pytest.raises(RuntimeTempDirError):
        _ = guard.path


async def test_guard_is_removed_when_the_body_raises(tmp_path: Path) -> None:
    guard = create_runtime_temp_dir_guard(tmp_path, "upload", "upload dir")
    with pytest.raises(ValueError, match="body failed"):
        async with guard:
            created = guard.path
            raise ValueError("body failed")
    assert not created.exists()


async def test_explicit_open_close_and_double_open(tmp_path: Path) -> None:
    guard = create_runtime_temp_dir_guard(tmp_path, "job-1", "job dir")
    path = await guard.open()
    with pytest.raises(RuntimeTempDirError):
        await guard.open()
    await guard.close()
    await guard.close()  # idempotent
    assert not path.exists()


async def test_close_survives_an_already_removed_dir(tmp_path: Path) -> None:
    guard = create_runtime_temp_dir_guard(tmp_path, "gone", "gone dir")
    path = await guard.open()
    path.rmdir()
    await guard.close()  # logged, not raised
    assert (tmp_path / "_runtime" / "gone").is_dir()


@pytest.mark.parametrize(
    "scope",
    ["", "..", ".", "../etc", "a/b", "a\\b", "/abs", "x y", "é", "ａ", "a\n", "a.b", "\x00"],
)
def test_bad_scopes_are_rejected_before_touching_disk(tmp_path: Path, scope: str) -> None:
    with pytest.raises(RuntimeTempDirScopeError):
        create_runtime_temp_dir_guard(tmp_path, scope, "label")
    assert list(tmp_path.iterdir()) == []


def test_non_string_scope_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(RuntimeTempDirScopeError):
        create_runtime_temp_dir_guard(tmp_path, 3, "label")  # type: ignore[arg-type]


@given(st.text(max_size=12))
def test_scope_validation_matches_the_allowed_alphabet(scope: str) -> None:
    allowed = bool(scope) and set(scope) <= VALID
    root = Path("/nonexistent-root-never-created")
    try:
        guard = create_runtime_temp_dir_guard(root, scope, "label")
    except RuntimeTempDirScopeError:
        assert not allowed
    else:
        assert allowed
        assert guard.scope == scope


@given(st.text(alphabet=st.sampled_from(sorted(VALID)), min_size=1, max_size=20))
def test_valid_scopes_stay_below_runtime_root(scope: str) -> None:
    guard = create_runtime_temp_dir_guard(Path("/r"), scope, "label")
    target = (Path("/r") / "_runtime" / guard.scope).resolve()
    assert target.parent == Path("/r/_runtime")
