"""Runtime leases: config, the held lease, listings, and the supervisor that holds one."""

from __future__ import annotations

import asyncio
import enum
import logging
import os
import socket
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar, TypeVar

from .._validation import check_stored_duration, check_stored_identifier, is_control_character
from ._cancellation import CancellationToken
from ._clock import Clock, SystemClock
from ._race import RaceWinner, race, sleep_or_cancelled
from .errors import RuntimeLeaseConfigError
from .protocols import RuntimeLeaseStore

__all__ = [
    "MAX_RUNTIME_LEASE_ID_LENGTH",
    "NEVER_EXPIRES",
    "RuntimeLease",
    "RuntimeLeaseConfig",
    "RuntimeLeaseView",
    "RuntimeLeases",
    "new_runtime_lease_owner_id",
    "run_runtime_lease_supervisor",
    "saturating_expiry",
    "validate_lease_identifier",
    "validate_lease_ttl",
]

G = TypeVar("G")


MAX_RUNTIME_LEASE_ID_LENGTH = 255

"""The longest lease id or owner id (in characters) a store must accept.

It is the width of the lease table's ``lease_id`` and ``owner_id`` columns; every
store refuses a longer id with :class:`~aster_forge.runtime.RuntimeLeaseConfigError`.
"""

NEVER_EXPIRES = datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)

"""The expiry a TTL saturates to when ``now + ttl`` is not representable.

It is the latest aware ``datetime`` Python has, and every backend stores it, so a
huge TTL means "never expires" instead of an ``OverflowError`` in the store.
"""


def saturating_expiry(now: datetime, ttl: timedelta) -> datetime:
    """Return ``now + ttl``, saturated to :data:`NEVER_EXPIRES` instead of overflowing."""
    try:
        expiry = now + ttl
    except OverflowError:
        return NEVER_EXPIRES
    return min(expiry, NEVER_EXPIRES)


def validate_lease_identifier(what: str, value: object) -> str:
    """Return ``value`` if it is a non-empty ``str`` of at most
    :data:`MAX_RUNTIME_LEASE_ID_LENGTH` characters without control characters, else raise
    :class:`RuntimeLeaseConfigError` naming ``what``."""
    return check_stored_identifier(
        what, value, limit=MAX_RUNTIME_LEASE_ID_LENGTH, error=RuntimeLeaseConfigError
    )


def validate_lease_ttl(what: str, value: object) -> timedelta:
    """Return ``value`` if it is a positive ``timedelta``, else raise RuntimeLeaseConfigError."""
    return check_stored_duration(what, value, allow_zero=False, error=RuntimeLeaseConfigError)


@dataclass(frozen=True, slots=True)
class RuntimeLeaseConfig:
    """Which lease a supervisor contends for, as whom, and how often it talks to the store.

    Attributes:
        lease_id: The lease (one per singleton worker group), e.g. ``"product.background_tasks"``.
        owner_id: This process's identity; use :func:`new_runtime_lease_owner_id`.
        ttl: How long an acquisition or renewal keeps the lease without another renewal.
        renew_interval: How often the holder renews; must be shorter than ``ttl``.
        standby_retry_interval: How often a standby instance retries the acquisition.

    Raises:
        RuntimeLeaseConfigError: On an invalid id, a non-positive duration, or
            ``renew_interval >= ttl``.

    Example:
        >>> config = RuntimeLeaseConfig("demo.workers", "host:1:abc", ttl=timedelta(seconds=30))
        >>> config.stop_margin
        datetime.timedelta(seconds=10)
    """

    lease_id: str
    owner_id: str
    ttl: timedelta = timedelta(seconds=30)
    renew_interval: timedelta = timedelta(seconds=10)
    standby_retry_interval: timedelta = timedelta(seconds=5)

    def __post_init__(self) -> None:
        validate_lease_identifier("lease_id", self.lease_id)
        validate_lease_identifier("owner_id", self.owner_id)
        validate_lease_ttl("ttl", self.ttl)
        validate_lease_ttl("renew_interval", self.renew_interval)
        validate_lease_ttl("standby_retry_interval", self.standby_retry_interval)
        if self.renew_interval >= self.ttl:
            raise RuntimeLeaseConfigError(
                f"renew_interval ({self.renew_interval}) must be shorter than ttl ({self.ttl})"
            )

    @property
    def stop_margin(self) -> timedelta:
        """How long before the lease would expire the supervisor stops the group.

        Half of ``ttl - renew_interval``: the holder gets that long to confirm a late
        renewal and the group gets the other half to stop before another instance
        can acquire the lease.
        """
        return (self.ttl - self.renew_interval) / 2


def new_runtime_lease_owner_id() -> str:
    """Return an owner id unique to this call: ``"<host>:<pid>:<random>"``.

    Call it once per process start and keep the result; two processes (or two
    calls) never share an id, so a restarted process never inherits a lease.
    """
    host = (socket.gethostname() or "unknown-host")[:96]
    host = (
        "".join(ch for ch in host if not is_control_character(ch) and ch != ":") or "unknown-host"
    )
    return f"{host}:{os.getpid()}:{uuid.uuid4().hex}"


@dataclass(frozen=True, slots=True)
class RuntimeLease:
    """A lease a store granted (acquired or renewed).

    Attributes:
        lease_id: The lease.
        owner_id: The holder.
        expires_at: When the lease expires, on the store's clock (the database server's
            clock where there is one); :data:`NEVER_EXPIRES` when the TTL saturated.
    """

    NEVER_EXPIRES: ClassVar[datetime] = NEVER_EXPIRES
    """The expiry a saturated TTL produces (9999-12-31 23:59:59.999999 UTC)."""

    lease_id: str
    owner_id: str
    expires_at: datetime

    @property
    def never_expires(self) -> bool:
        """Whether the TTL saturated, i.e. the lease only ends by release."""
        return self.expires_at >= NEVER_EXPIRES


@dataclass(frozen=True, slots=True)
class RuntimeLeaseView:
    """One stored runtime lease row, as diagnostics and the admin API show it.

    Attributes:
        lease_id: The lease (a singleton worker group).
        owner_id: The process that holds (or last held) it.
        expires_at: When it expires unless renewed.
        expired: Whether ``expires_at`` is past at :attr:`RuntimeLeases.now`; an
            expired row is free for any instance to take.
        acquired_at: When the current owner acquired it, if the store knows.
        updated_at: When it was last acquired or renewed, if the store knows.
    """

    lease_id: str
    owner_id: str
    expires_at: datetime
    expired: bool
    acquired_at: datetime | None = None
    updated_at: datetime | None = None

    @property
    def never_expires(self) -> bool:
        """Whether the TTL saturated (the lease only ends by release)."""
        return self.expires_at >= NEVER_EXPIRES

    def to_json_dict(self) -> dict[str, Any]:
        """Return the admin API's JSON object for this lease."""
        return {
            "lease_id": self.lease_id,
            "owner_id": self.owner_id,
            "expires_at": self.expires_at.isoformat(),
            "expired": self.expired,
            "never_expires": self.never_expires,
            "acquired_at": None if self.acquired_at is None else self.acquired_at.isoformat(),
            "updated_at": None if self.updated_at is None else self.updated_at.isoformat(),
        }


@dataclass(frozen=True, slots=True)
class RuntimeLeases:
    """A consistent read of every stored lease, with the clock value expiry was judged at.

    Attributes:
        now: The store's "now" (the database server's clock where it has one).
        leases: The leases, expired ones included, ordered by ``lease_id``.
    """

    now: datetime
    leases: tuple[RuntimeLeaseView, ...]


logger = logging.getLogger("aster_forge.runtime.lease")

_SYSTEM_CLOCK = SystemClock()


class _HoldEnd(enum.Enum):
    SHUTDOWN = "shutdown"
    LOST = "lost"
    UNCONFIRMED = "unconfirmed"


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
            await asyncio.shield(_release(store, config))
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
        if result is _HoldEnd.UNCONFIRMED:
            return result
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
) -> RuntimeLease | _HoldEnd | None:
    """Await ``call()``; ``UNCONFIRMED`` when ``seconds`` of clock time or shutdown come first."""

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
        return _HoldEnd.UNCONFIRMED
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
