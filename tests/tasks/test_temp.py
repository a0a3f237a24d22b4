"""Per-task temp dirs: lazy creation, removal after every outcome, and the sweep."""

from __future__ import annotations

import asyncio
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from aster_forge import ClassifiedTaskError, TaskExecutionContext, TaskRetryClass
from aster_forge.runtime import CancellationToken
from aster_forge.tasks import ClaimedTaskOutcome, TaskLease, TaskTempDirs, sweep_task_temp_dirs
from aster_forge.tasks._temp import task_temp_dir_name, task_temp_dirs_root
from aster_forge.testing import InMemoryTaskStore, ManualClock

from ._dispatch_support import (
    Harness,
    Job,
    Kind,
    Lane,
    ProxyStore,
    claim_one,
    enqueue,
    make_config,
    new_task,
    run_claimed,
)

EXPIRES = datetime(2030, 1, 1, tzinfo=UTC)


def _lease(task_id: int, token: str) -> TaskLease:
    return TaskLease(task_id, token, EXPIRES)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def store(clock: ManualClock) -> InMemoryTaskStore:
    return InMemoryTaskStore(clock)


def _entries(root: Path) -> list[str]:
    base = task_temp_dirs_root(root)
    return sorted(os.listdir(base)) if base.exists() else []


async def test_provider_paths_and_unsafe_tokens(tmp_path: Path) -> None:
    dirs = TaskTempDirs(tmp_path)
    assert dirs.root == tmp_path / "_runtime" / "tasks"
    safe = _lease(7, "abc_DEF-123")
    assert dirs.path_for(safe) == dirs.root / "7-abc_DEF-123"
    unsafe = _lease(7, "../../etc/passwd")
    name = task_temp_dir_name(unsafe)
    assert name.startswith("7-") and "/" not in name and ".." not in name
    created = await dirs.create_task_temp_dir(unsafe)
    assert created.parent == dirs.root and created.is_dir()
    (created / "nested").mkdir()
    (created / "nested" / "f.bin").write_bytes(b"x")
    await dirs.remove_task_temp_dir(unsafe)
    assert not created.exists()
    await dirs.remove_task_temp_dir(unsafe)  # missing is fine
    assert "TaskTempDirs" in repr(dirs)


async def test_temp_dir_is_created_lazily(
    store: InMemoryTaskStore, clock: ManualClock, tmp_path: Path
) -> None:
    await enqueue(store, new_task(Kind.MAIL, "plain"))
    config = make_config(Harness(), clock, temp_dirs=TaskTempDirs(tmp_path))
    report = await run_claimed(store, await claim_one(store, Lane.FALLBACK), config)
    assert report.outcome is ClaimedTaskOutcome.SUCCEEDED
    assert not task_temp_dirs_root(tmp_path).exists()


async def _writes_temp(ctx: TaskExecutionContext, job: Job) -> int:
    path = await ctx.temp_dir()
    assert path == await ctx.temp_dir()  # created once
    (path / "scratch.txt").write_text("data")
    if job.value == 1:
        raise ClassifiedTaskError("broken", TaskRetryClass.PERMANENT)
    if job.value == 2:
        raise ClassifiedTaskError("again")
    if job.value == 3:
        await ctx.sleep(3600)
    return 0


@pytest.mark.parametrize(
    ("value", "outcome"),
    [
        (0, ClaimedTaskOutcome.SUCCEEDED),
        (1, ClaimedTaskOutcome.FAILED),
        (2, ClaimedTaskOutcome.RETRIED),
        (3, ClaimedTaskOutcome.RELEASED),
    ],
)
async def test_temp_dir_is_removed_after_every_outcome(
    store: InMemoryTaskStore,
    clock: ManualClock,
    tmp_path: Path,
    value: int,
    outcome: ClaimedTaskOutcome,
) -> None:
    harness = Harness()
    harness.actions["t"] = _writes_temp
    await enqueue(store, new_task(Kind.MAIL, "t", value=value))
    shutdown = CancellationToken()
    config = make_config(harness, clock, temp_dirs=TaskTempDirs(tmp_path), shutdown_token=shutdown)
    run = asyncio.create_task(
        run_claimed(store, await claim_one(store, Lane.FALLBACK), config),
        name="test-run",
    )
    if value == 3:
        await clock.wait_for_sleepers(2)  # the heartbeat and the body's ctx.sleep
        assert len(_entries(tmp_path)) == 1
        shutdown.cancel()
    report = await run
    assert report.outcome is outcome
    assert harness.contexts["t"].temp_dir_created
    assert _entries(tmp_path) == []


async def test_temp_dir_is_removed_when_the_lease_is_lost(
    store: InMemoryTaskStore, clock: ManualClock, tmp_path: Path
) -> None:
    proxy = ProxyStore(store)
    proxy.refuse_success = True
    harness = Harness()
    harness.actions["t"] = _writes_temp
    await enqueue(store, new_task(Kind.MAIL, "t"))
    config = make_config(harness, clock, temp_dirs=TaskTempDirs(tmp_path))
    report = await run_claimed(proxy, await claim_one(store, Lane.FALLBACK), config)
    assert report.outcome is ClaimedTaskOutcome.LEASE_LOST
    assert _entries(tmp_path) == []


async def test_sweep_removes_dirs_of_tasks_no_longer_running(tmp_path: Path) -> None:
    dirs = TaskTempDirs(tmp_path)
    running, stale, replaced = _lease(1, "aaa"), _lease(2, "bbb"), _lease(3, "old")
    for lease in (running, stale, replaced):
        await dirs.create_task_temp_dir(lease)
        (dirs.path_for(lease) / "f").write_text("x")
    foreign_dir = dirs.root / "not-a-task-dir"
    foreign_dir.mkdir()
    (dirs.root / "12-file").write_text("a file, not a dir")
    # Task 3 was taken over: its new claim runs, the old claim's directory is stale.
    removed = await sweep_task_temp_dirs(tmp_path, [running, _lease(3, "new")])
    assert removed == sorted([dirs.path_for(stale), dirs.path_for(replaced)])
    assert _entries(tmp_path) == sorted(["1-aaa", "12-file", "not-a-task-dir"])


async def test_sweep_keeps_fresh_dirs_with_min_age(tmp_path: Path) -> None:
    dirs = TaskTempDirs(tmp_path)
    fresh, old = _lease(1, "fresh"), _lease(2, "old")
    await dirs.create_task_temp_dir(fresh)
    await dirs.create_task_temp_dir(old)
    an_hour_ago = datetime.now(UTC).timestamp() - 3600
    os.utime(dirs.path_for(old), (an_hour_ago, an_hour_ago))
    removed = await sweep_task_temp_dirs(tmp_path, [], min_age=timedelta(minutes=5))
    assert removed == [dirs.path_for(old)]
    assert _entries(tmp_path) == ["1-fresh"]


async def test_sweep_of_a_missing_root_is_a_no_op(tmp_path: Path) -> None:
    assert await sweep_task_temp_dirs(tmp_path / "nowhere", []) == []
