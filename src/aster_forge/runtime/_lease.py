"""The runtime lease supervisor: run a singleton worker group only while holding a lease."""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from ._cancellation import CancellationToken
from ._clock import Clock, SystemClock
from ._lease_types import RuntimeLease, RuntimeLeaseConfig
from ._race import RaceWinner, race, sleep_or_cancelled
from .protocols import RuntimeLeaseStore

__all__ = ["run_runtime_lease_supervisor"]

logger = logging.getLogger("aster_forge.runtime.lease")

G = TypeVar("G")

_SYSTEM_CLOCK = SystemClock()


class _HoldEnd(enum.Enum):
    SHUTDOWN = "shutdown"
    LOST = "lost"
    UNCONFIRMED = "unconfirmed"


class _Expired:
    """Sentinel: the clock deadline passed before the awaited call finished."""


_EXPIRED = _Expired()


async def run_runtime_lease_supervisor(
    store: RuntimeLeaseStore,
    config: RuntimeLeaseConfig,
    shutdown_token: CancellationToken,
    start_group: Callable[[CancellationToken], Awaitable[G]],
    stop_group: Callable[[G], Awaitable[None]],
    *,
    clock: Clock = _SYSTEM_CLOCK,
) -> None:
    """Run ``start_group`` only while this process holds the runtime lease.

    Standby: try to acquire every ``config.standby_retry_interval``. Holder: start
    the group with a child of ``shutdown_token`` (cancelled when the group must
    stop), then renew every ``config.renew_interval``. The group is stopped (its
    token cancelled, then ``stop_group`` awaited) when a renewal reports the lease
    lost, or when no renewal has been confirmed ``config.stop_margin`` before the
    lease would expire, so two instances' groups never overlap. The holder then
    releases the lease (best effort) and returns to standby. Store errors are logged
    and retried, never raised. On ``shutdown_token`` the group is stopped, the lease
    released and the function returns.

    Args:
        store: The lease store (e.g. :class:`aster_forge.db.RuntimeLeaseDbStore`).
        config: Lease id, owner id, TTL and intervals.
        shutdown_token: Process shutdown; cancelling it ends the supervisor.
        start_group: Starts the singleton group given its stop token; returns a handle.
        stop_group: Stops and joins the group started by ``start_group``.
        clock: Time source (``ManualClock`` in tests).

    Raises:
        asyncio.CancelledError: When the supervisor task itself is cancelled (after
            stopping the group and releasing the lease under a shield).
    """
    ttl = config.ttl.total_seconds()
    renew_every = config.renew_interval.total_seconds()
    standby_every = config.standby_retry_interval.total_seconds()
    stop_margin = config.stop_margin.total_seconds()
    error_retry = min(renew_every, standby_every)
    log_extra = {"lease_id": config.lease_id, "owner_id": config.owner_id}

    while not shutdown_token.cancelled:
        started = clock.monotonic()
        lease: RuntimeLease | None
        try:
            lease = await store.try_acquire(config.lease_id, config.owner_id, config.ttl)
        except Exception:
            logger.warning(
                "runtime lease %s: acquisition failed; retrying",
                config.lease_id,
                exc_info=True,
                extra=log_extra,
            )
            lease = None
        if lease is None:
            if await sleep_or_cancelled(clock, shutdown_token, standby_every):
                return
            continue

        logger.info(
            "runtime lease %s acquired by %s; starting the group",
            config.lease_id,
            config.owner_id,
            extra=log_extra,
        )
        group_token = shutdown_token.child_token()
        try:
            group = await start_group(group_token)
        except Exception:
            logger.exception(
                "runtime lease %s: starting the group failed; releasing the lease",
                config.lease_id,
                extra=log_extra,
            )
            group_token.cancel()
            await _shielded_release(store, config)
            if await sleep_or_cancelled(clock, shutdown_token, standby_every):
                return
            continue

        try:
            end = await _hold(
                store, config, shutdown_token, clock, started + ttl - stop_margin, error_retry
            )
        except asyncio.CancelledError:
            group_token.cancel()
            await asyncio.shield(_stop_and_release(store, config, group, stop_group))
            raise
        group_token.cancel()
        if end is _HoldEnd.SHUTDOWN:
            logger.info(
                "runtime lease %s: shutdown; stopping the group and releasing",
                config.lease_id,
                extra=log_extra,
            )
        else:
            logger.warning(
                "runtime lease %s %s; stopping the group",
                config.lease_id,
                "lost" if end is _HoldEnd.LOST else "renewal not confirmed before expiry",
                extra=log_extra,
            )
        await asyncio.shield(_stop_and_release(store, config, group, stop_group))
        if end is _HoldEnd.SHUTDOWN:
            return
        if await sleep_or_cancelled(clock, shutdown_token, standby_every):
            return


async def _hold(
    store: RuntimeLeaseStore,
    config: RuntimeLeaseConfig,
    shutdown_token: CancellationToken,
    clock: Clock,
    stop_at: float,
    error_retry: float,
) -> _HoldEnd:
    """Renew until shutdown, loss, or the stop deadline passes unconfirmed."""
    ttl = config.ttl.total_seconds()
    stop_margin = config.stop_margin.total_seconds()
    next_attempt = clock.monotonic() + config.renew_interval.total_seconds()
    while True:
        wake = min(next_attempt, stop_at)
        if await sleep_or_cancelled(clock, shutdown_token, wake - clock.monotonic()):
            return _HoldEnd.SHUTDOWN
        if clock.monotonic() >= stop_at:
            return _HoldEnd.UNCONFIRMED
        started = clock.monotonic()
        try:
            result = await _call_before(
                clock,
                shutdown_token,
                stop_at - started,
                lambda: store.renew(config.lease_id, config.owner_id, config.ttl),
            )
        except Exception:
            logger.warning(
                "runtime lease %s: renewal failed; retrying",
                config.lease_id,
                exc_info=True,
                extra={"lease_id": config.lease_id, "owner_id": config.owner_id},
            )
            next_attempt = clock.monotonic() + error_retry
            continue
        if shutdown_token.cancelled:
            return _HoldEnd.SHUTDOWN
        if isinstance(result, _Expired):
            return _HoldEnd.UNCONFIRMED
        if result is None:
            return _HoldEnd.LOST
        # The server computed its expiry after ``started``, so this local bound is safe.
        stop_at = started + ttl - stop_margin
        next_attempt = started + config.renew_interval.total_seconds()


async def _call_before(
    clock: Clock,
    shutdown_token: CancellationToken,
    seconds: float,
    call: Callable[[], Awaitable[RuntimeLease | None]],
) -> RuntimeLease | _Expired | None:
    """Await ``call()`` unless ``seconds`` of clock time or shutdown come first."""

    async def invoke() -> RuntimeLease | None:
        return await call()

    worker = asyncio.create_task(invoke(), name="aster-forge:lease-renew")
    winner = await race(
        worker,
        seconds=seconds,
        clock=clock,
        token=shutdown_token,
        cancel_loser=True,
        name="aster-forge:lease-deadline",
    )
    if winner is not RaceWinner.DONE:
        return _EXPIRED
    return worker.result()


async def _stop_and_release(
    store: RuntimeLeaseStore,
    config: RuntimeLeaseConfig,
    group: G,
    stop_group: Callable[[G], Awaitable[None]],
) -> None:
    try:
        await stop_group(group)
    except Exception:
        logger.exception(
            "runtime lease %s: stopping the group raised",
            config.lease_id,
            extra={"lease_id": config.lease_id, "owner_id": config.owner_id},
        )
    await _release(store, config)


async def _shielded_release(store: RuntimeLeaseStore, config: RuntimeLeaseConfig) -> None:
    await asyncio.shield(_release(store, config))


async def _release(store: RuntimeLeaseStore, config: RuntimeLeaseConfig) -> None:
    try:
        released = await store.release(config.lease_id, config.owner_id)
    except Exception:
        logger.warning(
            "runtime lease %s: release failed; it expires by TTL instead",
            config.lease_id,
            exc_info=True,
            extra={"lease_id": config.lease_id, "owner_id": config.owner_id},
        )
        return
    logger.info(
        "runtime lease %s %s",
        config.lease_id,
        "released" if released else "was no longer held at release",
        extra={"lease_id": config.lease_id, "owner_id": config.owner_id},
    )
