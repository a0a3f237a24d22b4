"""Short-lived runtime temp directories under ``<root>/_runtime``."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import shutil
import tempfile
from pathlib import Path
from types import TracebackType

from .errors import RuntimeTempDirError, RuntimeTempDirScopeError

__all__ = [
    "RUNTIME_TEMP_DIR_NAME",
    "RuntimeTempDirGuard",
    "create_runtime_temp_dir_guard",
    "ensure_runtime_temp_dir",
]

logger = logging.getLogger("aster_forge.runtime")

RUNTIME_TEMP_DIR_NAME = "_runtime"
"""The shared directory created under the product's temp root.

Every scope (``<root>/_runtime/<scope>``, such as the per-task directories under
``tasks``) lives inside it, so a product sweeps or mounts one directory.
"""

_SCOPE = re.compile(r"[A-Za-z0-9_-]+")


def _check_scope(scope: object) -> str:
    if not isinstance(scope, str):
        raise RuntimeTempDirScopeError(f"temp dir scope must be a str, got {type(scope).__name__}")
    # fullmatch plus isascii: no path separators, no dots, no unicode look-alikes.
    if not scope.isascii() or _SCOPE.fullmatch(scope) is None:
        raise RuntimeTempDirScopeError(
            f"invalid temp dir scope {scope!r}: use only ASCII letters, digits, '-' and '_'"
        )
    return scope


def make_dirs(path: Path) -> Path:
    """Create ``path`` and its parents if missing (blocking: run it in a thread).

    Returns:
        ``path``.
    """
    path.mkdir(parents=True, exist_ok=True)
    return path


async def ensure_runtime_temp_dir(root: str | os.PathLike[str]) -> Path:
    """Create (if needed) and return ``root/_runtime``.

    Args:
        root: The product's temp root; created too if missing.

    Returns:
        The path of the runtime temp directory.

    Raises:
        RuntimeTempDirError: The directory could not be created.
    """
    target = Path(root) / RUNTIME_TEMP_DIR_NAME
    try:
        return await asyncio.to_thread(make_dirs, target)
    except OSError as exc:
        raise RuntimeTempDirError(f"failed to create runtime temp dir {target}: {exc}") from exc


class RuntimeTempDirGuard:
    """An async context manager owning ``root/_runtime/<scope>/<random>``.

    Entering creates the directory; leaving removes only that directory (never the
    shared ``_runtime`` root or the scope directory). It can also be driven with
    :meth:`open` and :meth:`close`.

    Example:
        >>> guard = create_runtime_temp_dir_guard("/tmp/app", "thumbnail", "render")
        >>> guard.scope
        'thumbnail'
    """

    def __init__(self, root: Path, scope: str, label: str) -> None:
        self._root = root
        self.scope = scope
        self.label = label
        self._path: Path | None = None
        self._closed = False

    @property
    def path(self) -> Path:
        """The created directory.

        Raises:
            RuntimeTempDirError: The guard was not opened yet, or is closed.
        """
        if self._path is None or self._closed:
            raise RuntimeTempDirError(f"temp dir guard for {self.label!r} is not open")
        return self._path

    async def open(self) -> Path:
        """Create the directory and return its path.

        Raises:
            RuntimeTempDirError: It could not be created, or the guard was already opened.
        """
        if self._path is not None:
            raise RuntimeTempDirError(f"temp dir guard for {self.label!r} was already opened")
        scope_dir = self._root / RUNTIME_TEMP_DIR_NAME / self.scope
        try:
            await asyncio.to_thread(make_dirs, scope_dir)
            created = await asyncio.to_thread(tempfile.mkdtemp, dir=scope_dir)
        except OSError as exc:
            raise RuntimeTempDirError(
                f"failed to create {self.label} under {scope_dir}: {exc}"
            ) from exc
        self._path = Path(created)
        return self._path

    async def close(self) -> None:
        """Remove the directory (idempotent); a failure is logged, not raised."""
        if self._path is None or self._closed:
            return
        self._closed = True
        path = self._path
        # Shielded: a cancelled caller must not leave a half-removed directory behind.
        removal = asyncio.create_task(
            asyncio.to_thread(shutil.rmtree, path), name="aster-forge:temp-dir-remove"
        )
        try:
            await asyncio.shield(removal)
        except asyncio.CancelledError:
            await asyncio.gather(removal, return_exceptions=True)
            raise
        except OSError as exc:
            logger.warning(
                "failed to remove %s %s: %s",
                self.label,
                path,
                exc,
                extra={"temp_dir": str(path), "temp_dir_scope": self.scope},
            )

    async def __aenter__(self) -> RuntimeTempDirGuard:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"RuntimeTempDirGuard(scope={self.scope!r}, path={self._path!s})"


def create_runtime_temp_dir_guard(
    root: str | os.PathLike[str], scope: str, label: str
) -> RuntimeTempDirGuard:
    """Return a guard for a fresh ``root/_runtime/<scope>/<random>`` directory.

    The scope is validated here, before anything touches the file system.

    Args:
        root: The product's temp root.
        scope: Non-empty ASCII letters, digits, ``-`` and ``_`` only.
        label: A human description used in logs and errors.

    Returns:
        The guard; use ``async with`` (or ``await guard.open()``).

    Raises:
        RuntimeTempDirScopeError: ``scope`` is empty or holds any other character
            (``..``, ``/``, ``\\``, spaces, unicode).

    Example:
        >>> async def render(root: str) -> None:
        ...     async with create_runtime_temp_dir_guard(root, "thumbnail", "render") as tmp:
        ...         (tmp.path / "frame.png").write_bytes(b"")
    """
    return RuntimeTempDirGuard(Path(root), _check_scope(scope), label)
