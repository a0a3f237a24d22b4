"""Per-task temp directories under ``<root>/_runtime/tasks``, and the sweep of stale ones."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import re
import shutil
import time
from collections.abc import Iterable
from datetime import timedelta
from pathlib import Path

from ..runtime._internal import RUNTIME_TEMP_DIR_NAME
from ._lease import TaskLease
from .errors import TaskIoError

__all__ = [
    "TASK_TEMP_DIR_SCOPE",
    "TaskTempDirs",
    "sweep_task_temp_dirs",
    "task_temp_dir_name",
    "task_temp_dirs_root",
]

logger = logging.getLogger("aster_forge.tasks.temp")

#: The directory under ``<root>/_runtime`` that holds one directory per claimed task.
TASK_TEMP_DIR_SCOPE = "tasks"

_SAFE_TOKEN = re.compile(r"[A-Za-z0-9_-]{1,64}")
_DIR_NAME = re.compile(r"(?P<task_id>-?[0-9]+)-(?P<token>[A-Za-z0-9_-]+)")


def task_temp_dirs_root(root: str | os.PathLike[str]) -> Path:
    """The directory holding every per-task temp dir: ``<root>/_runtime/tasks``."""
    return Path(root) / RUNTIME_TEMP_DIR_NAME / TASK_TEMP_DIR_SCOPE


def task_temp_dir_name(lease: TaskLease) -> str:
    """The directory name of ``lease``'s temp dir: ``<task_id>-<token>``.

    A token that is not already short and path-safe (ASCII letters, digits, ``-``,
    ``_``) is replaced by a SHA-256 prefix, so no token can escape the directory.
    """
    token = lease.processing_token
    if _SAFE_TOKEN.fullmatch(token) is None:
        token = hashlib.sha256(token.encode()).hexdigest()[:32]
    return f"{lease.task_id}-{token}"


def _make_dirs(path: Path) -> Path:
    # Blocking: callers run it in a thread.
    path.mkdir(parents=True, exist_ok=True)
    return path


def _rmtree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=False)


class TaskTempDirs:
    """The standard :class:`~aster_forge.tasks.TaskTempDirProvider`.

    Each claim gets ``<root>/_runtime/tasks/<task_id>-<token>``: created lazily the first
    time the body calls ``await ctx.temp_dir()``, removed by the executor after the task
    ends whatever the outcome. The token in the name keeps a stale worker from sharing a
    directory with the claim that replaced it.

    Example:
        >>> dirs = TaskTempDirs("/var/tmp/app")
        >>> dirs.root.as_posix()
        '/var/tmp/app/_runtime/tasks'
    """

    __slots__ = ("_root",)

    def __init__(self, root: str | os.PathLike[str]) -> None:
        """Use ``root`` (the product's temp root) as the parent of ``_runtime/tasks``."""
        self._root = task_temp_dirs_root(root)

    @property
    def root(self) -> Path:
        """``<root>/_runtime/tasks``."""
        return self._root

    def path_for(self, lease: TaskLease) -> Path:
        """Where ``lease``'s directory lives (whether or not it exists)."""
        return self._root / task_temp_dir_name(lease)

    async def create_task_temp_dir(self, lease: TaskLease) -> Path:
        """Create (if needed) and return the claim's directory.

        Raises:
            TaskIoError: When the directory cannot be created.
        """
        path = self.path_for(lease)
        try:
            return await asyncio.to_thread(_make_dirs, path)
        except OSError as exc:
            raise TaskIoError(f"failed to create task temp dir {path}: {exc}") from exc

    async def remove_task_temp_dir(self, lease: TaskLease) -> None:
        """Remove the claim's directory and its contents; a missing one is fine.

        Raises:
            TaskIoError: When the directory exists but cannot be removed.
        """
        path = self.path_for(lease)
        try:
            await asyncio.to_thread(_rmtree, path)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise TaskIoError(f"failed to remove task temp dir {path}: {exc}") from exc

    def __repr__(self) -> str:
        return f"TaskTempDirs(root={str(self._root)!r})"


def _sweep(root: Path, keep: frozenset[str], min_age: float) -> list[Path]:
    removed: list[Path] = []
    try:
        entries = list(os.scandir(root))
    except FileNotFoundError:
        return removed
    now = time.time()
    for entry in entries:
        if entry.name in keep or _DIR_NAME.fullmatch(entry.name) is None:
            continue
        if not entry.is_dir(follow_symlinks=False):
            continue
        try:
            if min_age > 0 and now - entry.stat(follow_symlinks=False).st_mtime < min_age:
                continue
            shutil.rmtree(entry.path)
        except FileNotFoundError:
            continue
        except OSError as exc:
            logger.warning(
                "failed to sweep task temp dir %s: %s",
                entry.path,
                exc,
                extra={"temp_dir": entry.path},
            )
            continue
        removed.append(Path(entry.path))
    return sorted(removed)


async def sweep_task_temp_dirs(
    root: str | os.PathLike[str],
    running_leases: Iterable[TaskLease],
    *,
    min_age: timedelta = timedelta(0),
) -> list[Path]:
    """Remove the temp dirs of tasks that are no longer running.

    Every ``<task_id>-<token>`` directory under ``<root>/_runtime/tasks`` whose claim is
    not in ``running_leases`` is removed (a crashed process's leftovers, or a claim that
    was taken over). Entries that do not look like task temp dirs, and symlinks, are left
    alone. A removal failure is logged and skipped.

    Args:
        root: The product's temp root (the same one given to :class:`TaskTempDirs`).
        running_leases: The claims still running; their directories are kept. When
            several processes share ``root``, pass every processing claim from the store.
        min_age: Keep directories modified more recently than this, so a claim made
            after ``running_leases`` was read is not swept from under its task.

    Returns:
        The removed directories, sorted.
    """
    keep = frozenset(task_temp_dir_name(lease) for lease in running_leases)
    return await asyncio.to_thread(_sweep, task_temp_dirs_root(root), keep, min_age.total_seconds())
