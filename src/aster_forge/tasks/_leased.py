"""run_leased_background_tasks: run a BackgroundTasks group only while holding a runtime lease."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable

from ..runtime import (
    CancellationToken,
    RuntimeLeaseConfig,
    RuntimeLeaseStore,
    run_runtime_lease_supervisor,
)
from ..runtime._internal import Clock, SystemClock
from ._background import BackgroundTasks
from .errors import BackgroundTaskSpawnError

__all__ = ["SpawnGroup", "run_leased_background_tasks", "spawn_background_group"]

SpawnGroup = Callable[[CancellationToken], BackgroundTasks | Awaitable[BackgroundTasks]]
"""Builds a worker group from the token that stops it (plain or ``async`` function)."""

_SYSTEM_CLOCK = SystemClock()


async def spawn_background_group(
    spawn_group: SpawnGroup, shutdown_token: CancellationToken
) -> BackgroundTasks:
    """Call ``spawn_group(shutdown_token)`` and check it produced a :class:`BackgroundTasks`.

    Raises:
        BackgroundTaskSpawnError: When the spawner returned something else.
    """
    group = spawn_group(shutdown_token)
    if inspect.isawaitable(group):
        group = await group
    if not isinstance(group, BackgroundTasks):
        raise BackgroundTaskSpawnError(
            f"the group spawner must return BackgroundTasks, got {type(group).__name__}"
        )
    return group


async def _stop(group: BackgroundTasks) -> None:
    await group.shutdown()


async def run_leased_background_tasks(
    lease_store: RuntimeLeaseStore,
    lease_config: RuntimeLeaseConfig,
    shutdown_token: CancellationToken,
    spawn_group: SpawnGroup,
    *,
    clock: Clock = _SYSTEM_CLOCK,
) -> None:
    """Run a process-level singleton worker group on whichever instance holds the lease.

    Every instance calls this; the one that acquires ``lease_config.lease_id`` calls
    ``spawn_group(leased_token)`` and keeps renewing. When the lease is lost (or not
    confirmed before it would expire) or ``shutdown_token`` is cancelled, the leased
    token is cancelled and the whole group is shut down with
    :meth:`BackgroundTasks.shutdown` before the lease is released; a standby instance
    then acquires it. Returns once ``shutdown_token`` is cancelled and the group (if
    any) stopped. Store errors are logged and retried, never raised.

    Args:
        lease_store: E.g. :class:`aster_forge.db.RuntimeLeaseDbStore`.
        lease_config: Lease id, this process's owner id, TTL and intervals.
        shutdown_token: Process shutdown.
        spawn_group: Builds the group from the leased token; should create the
            :class:`BackgroundTasks` with that token so the workers see the stop.
        clock: Time source (``ManualClock`` in tests).

    Example:
        >>> import asyncio
        >>> from aster_forge.testing import InMemoryRuntimeLeaseStore
        >>> async def main() -> None:
        ...     token = CancellationToken()
        ...     def spawn(leased: CancellationToken) -> BackgroundTasks:
        ...         token.cancel()  # stop right away for the example
        ...         return BackgroundTasks(leased)
        ...     config = RuntimeLeaseConfig("demo.workers", "host:1:x")
        ...     await run_leased_background_tasks(InMemoryRuntimeLeaseStore(), config, token, spawn)
        >>> asyncio.run(main())
    """
    if not callable(spawn_group):
        raise BackgroundTaskSpawnError("spawn_group is not callable")

    async def start(leased_token: CancellationToken) -> BackgroundTasks:
        return await spawn_background_group(spawn_group, leased_token)

    await run_runtime_lease_supervisor(
        lease_store, lease_config, shutdown_token, start, _stop, clock=clock
    )
