"""An in-memory :class:`~aster_forge.runtime.RuntimeLeaseStore` for tests and single processes."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from ..runtime import RuntimeLease
from ..runtime._internal import (
    Clock,
    RuntimeLeases,
    RuntimeLeaseView,
    SystemClock,
    saturating_expiry,
    validate_lease_identifier,
    validate_lease_ttl,
)

__all__ = ["InMemoryRuntimeLeaseStore"]


@dataclass(slots=True)
class _Row:
    owner_id: str
    expires_at: datetime
    acquired_at: datetime
    updated_at: datetime


class InMemoryRuntimeLeaseStore:
    """A :class:`~aster_forge.runtime.RuntimeLeaseStore` kept in a dict, on an injected clock.

    It has the same semantics as :class:`aster_forge.db.RuntimeLeaseDbStore` (and passes
    the same conformance suite) but coordinates only coroutines of one process.

    Args:
        clock: The time source for expiry; a ``ManualClock`` in tests.

    Example:
        >>> store = InMemoryRuntimeLeaseStore()
        >>> store.holder("demo") is None
        True
    """

    def __init__(self, clock: Clock | None = None) -> None:
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._rows: dict[str, _Row] = {}

    def holder(self, lease_id: str) -> str | None:
        """Return the owner id currently holding ``lease_id`` unexpired, or ``None``."""
        row = self._rows.get(lease_id)
        if row is None or row.expires_at <= self._clock.now():
            return None
        return row.owner_id

    async def try_acquire(
        self, lease_id: str, owner_id: str, ttl: timedelta
    ) -> RuntimeLease | None:
        """Take the lease if free, expired, or already ours (see the protocol)."""
        self._validate(lease_id, owner_id, ttl)
        now = self._clock.now()
        row = self._rows.get(lease_id)
        if row is not None and row.owner_id != owner_id and row.expires_at > now:
            return None
        expires_at = saturating_expiry(now, ttl)
        # Like the database store: re-acquiring our own lease keeps its acquisition time.
        acquired_at = row.acquired_at if row is not None and row.owner_id == owner_id else now
        self._rows[lease_id] = _Row(owner_id, expires_at, acquired_at, now)
        return RuntimeLease(lease_id, owner_id, expires_at)

    async def renew(self, lease_id: str, owner_id: str, ttl: timedelta) -> RuntimeLease | None:
        """Extend our unexpired lease (see the protocol)."""
        self._validate(lease_id, owner_id, ttl)
        now = self._clock.now()
        row = self._rows.get(lease_id)
        if row is None or row.owner_id != owner_id or row.expires_at <= now:
            return None
        row.expires_at = saturating_expiry(now, ttl)
        row.updated_at = now
        return RuntimeLease(lease_id, owner_id, row.expires_at)

    async def release(self, lease_id: str, owner_id: str) -> bool:
        """Drop our lease so it is immediately acquirable (see the protocol)."""
        validate_lease_identifier("lease_id", lease_id)
        validate_lease_identifier("owner_id", owner_id)
        row = self._rows.get(lease_id)
        if row is None or row.owner_id != owner_id:
            return False
        del self._rows[lease_id]
        return True

    async def list_runtime_leases(self) -> RuntimeLeases:
        """Return every stored lease, expired ones included (see the protocol)."""
        now = self._clock.now()
        return RuntimeLeases(
            now=now,
            leases=tuple(
                RuntimeLeaseView(
                    lease_id=lease_id,
                    owner_id=row.owner_id,
                    expires_at=row.expires_at,
                    expired=row.expires_at <= now,
                    acquired_at=row.acquired_at,
                    updated_at=row.updated_at,
                )
                for lease_id, row in sorted(self._rows.items())
            ),
        )

    @staticmethod
    def _validate(lease_id: str, owner_id: str, ttl: timedelta) -> None:
        validate_lease_identifier("lease_id", lease_id)
        validate_lease_identifier("owner_id", owner_id)
        validate_lease_ttl("ttl", ttl)

    def __repr__(self) -> str:
        return f"<InMemoryRuntimeLeaseStore leases={len(self._rows)}>"
