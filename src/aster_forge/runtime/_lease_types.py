"""Runtime lease value types: configuration, owner ids, the acquired lease, listings."""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

from .._validation import check_stored_duration, check_stored_identifier, is_control_character
from .errors import RuntimeLeaseConfigError

__all__ = [
    "MAX_RUNTIME_LEASE_ID_LENGTH",
    "NEVER_EXPIRES",
    "RuntimeLease",
    "RuntimeLeaseConfig",
    "RuntimeLeaseView",
    "RuntimeLeases",
    "new_runtime_lease_owner_id",
    "saturating_expiry",
    "validate_lease_identifier",
    "validate_lease_ttl",
]

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
    """Return ``now + ttl``, saturated to :data:`NEVER_EXPIRES` instead of overflowing.

    Args:
        now: An aware datetime.
        ttl: A non-negative duration.

    Returns:
        The expiry, never later than :data:`NEVER_EXPIRES`.
    """
    try:
        expiry = now + ttl
    except OverflowError:
        return NEVER_EXPIRES
    return min(expiry, NEVER_EXPIRES)


def validate_lease_identifier(what: str, value: object) -> str:
    """Check a lease id, owner id or other stored identifier.

    Args:
        what: The argument's name, used in the error message.
        value: The candidate value.

    Returns:
        ``value`` unchanged when valid.

    Raises:
        RuntimeLeaseConfigError: When it is not a non-empty ``str`` of at most
            :data:`MAX_RUNTIME_LEASE_ID_LENGTH` characters without control characters.
    """
    return check_stored_identifier(
        what, value, limit=MAX_RUNTIME_LEASE_ID_LENGTH, error=RuntimeLeaseConfigError
    )


def validate_lease_ttl(what: str, value: object) -> timedelta:
    """Check that a duration is a positive :class:`~datetime.timedelta`.

    Raises:
        RuntimeLeaseConfigError: When it is not a positive ``timedelta``.
    """
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
