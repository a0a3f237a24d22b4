"""A framework-agnostic conformance suite for :class:`~aster_forge.runtime.RuntimeLeaseStore`."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable
from datetime import UTC, datetime, timedelta
from typing import ClassVar

from ..runtime import RuntimeLease, RuntimeLeaseStore
from ..runtime._internal import RuntimeLeases, RuntimeLeaseView
from ..runtime.errors import RuntimeLeaseConfigError
from ._conformance import StoreConformance

__all__ = ["RuntimeLeaseStoreConformance"]

TRICKY_IDS = (
    "lease 'single' \"double\" `back`; DROP TABLE runtime_leases; --",
    "租约/リース/аренда ✓ 🚀",
    "back\\slash %_ wildcard",
    "🚀" * 255,
)


class RuntimeLeaseStoreConformance(StoreConformance[RuntimeLeaseStore]):
    """Checks every :class:`~aster_forge.runtime.RuntimeLeaseStore` must pass.

    Each ``check_*`` coroutine raises ``AssertionError`` on a violation. Parametrize
    a test over :attr:`CHECKS` and call :meth:`run`; every check uses fresh lease ids,
    so one store (and one table) can serve them all.

    Args:
        make_store: Returns a store instance; called several times where a check
            simulates several processes (the instances must share state, e.g. one
            database).
        advance: Moves the stores' time forward: ``ManualClock.advance`` for stores
            on an injected clock, ``asyncio.sleep`` for stores on a server clock.
        short_ttl: The TTL used by expiry checks (keep it small on a server clock).
        expiry_slack: Extra time advanced past ``short_ttl`` before expecting expiry.
        contenders: How many concurrent acquirers the race check uses.

    Example:
        >>> from aster_forge.testing import InMemoryRuntimeLeaseStore, ManualClock
        >>> clock = ManualClock()
        >>> store = InMemoryRuntimeLeaseStore(clock)
        >>> suite = RuntimeLeaseStoreConformance(lambda: store, advance=clock.advance)
        >>> "check_release_makes_lease_immediately_acquirable" in suite.CHECKS
        True
    """

    CHECKS: ClassVar[tuple[str, ...]] = (
        "check_acquire_free_lease",
        "check_held_lease_is_exclusive",
        "check_same_owner_reacquire_extends",
        "check_renew_by_holder_extends",
        "check_renew_by_other_owner_fails",
        "check_release_makes_lease_immediately_acquirable",
        "check_release_by_other_owner_is_refused",
        "check_expired_lease_is_acquirable_and_old_holder_lost_it",
        "check_ttl_overflow_saturates",
        "check_ids_are_exact_and_tricky_values_round_trip",
        "check_invalid_input_is_rejected",
        "check_concurrent_acquire_has_one_winner",
        "check_list_runtime_leases_reports_every_row",
    )

    @staticmethod
    def _id(prefix: str = "lease") -> str:
        return f"conformance-{prefix}-{uuid.uuid4().hex}"

    async def check_acquire_free_lease(self) -> None:
        """A free lease is granted with an aware expiry in the future of the grant."""
        store = self._make_store()
        lease_id, owner = self._id(), self._id("owner")
        lease = await store.try_acquire(lease_id, owner, timedelta(seconds=60))
        assert isinstance(lease, RuntimeLease), "acquiring a free lease must succeed"
        assert (lease.lease_id, lease.owner_id) == (lease_id, owner)
        assert lease.expires_at.tzinfo is not None, "expires_at must be timezone-aware"
        assert lease.expires_at.utcoffset() == timedelta(0), "expires_at must be UTC"

    async def check_held_lease_is_exclusive(self) -> None:
        """While held and unexpired, nobody else acquires the lease."""
        first, second = self._make_store(), self._make_store()
        lease_id = self._id()
        assert await first.try_acquire(lease_id, "owner-a", timedelta(seconds=60)) is not None
        assert await second.try_acquire(lease_id, "owner-b", timedelta(seconds=60)) is None
        assert await first.try_acquire(lease_id, "owner-c", timedelta(seconds=60)) is None

    async def check_same_owner_reacquire_extends(self) -> None:
        """The holder may acquire again (an ambiguous retry); the expiry moves forward."""
        store = self._make_store()
        lease_id = self._id()
        first = await store.try_acquire(lease_id, "owner-a", timedelta(seconds=10))
        again = await store.try_acquire(lease_id, "owner-a", timedelta(seconds=600))
        assert first is not None and again is not None, "the holder must re-acquire"
        assert again.expires_at > first.expires_at

    async def check_renew_by_holder_extends(self) -> None:
        """Renewal by the holder returns the lease with a later expiry."""
        store = self._make_store()
        lease_id = self._id()
        first = await store.try_acquire(lease_id, "owner-a", timedelta(seconds=10))
        renewed = await store.renew(lease_id, "owner-a", timedelta(seconds=600))
        assert first is not None and renewed is not None, "the holder must renew"
        assert renewed.owner_id == "owner-a" and renewed.expires_at > first.expires_at

    async def check_renew_by_other_owner_fails(self) -> None:
        """Renewal by anyone else, or of an unknown lease, returns ``None``."""
        store = self._make_store()
        lease_id = self._id()
        assert await store.try_acquire(lease_id, "owner-a", timedelta(seconds=60)) is not None
        assert await store.renew(lease_id, "owner-b", timedelta(seconds=60)) is None
        assert await store.renew(self._id(), "owner-a", timedelta(seconds=60)) is None
        assert await store.try_acquire(lease_id, "owner-b", timedelta(seconds=60)) is None

    async def check_release_makes_lease_immediately_acquirable(self) -> None:
        """After release another owner acquires at once, without waiting for the TTL."""
        first, second = self._make_store(), self._make_store()
        lease_id = self._id()
        assert await first.try_acquire(lease_id, "owner-a", timedelta(hours=1)) is not None
        assert await first.release(lease_id, "owner-a") is True
        assert await second.try_acquire(lease_id, "owner-b", timedelta(hours=1)) is not None
        assert await first.renew(lease_id, "owner-a", timedelta(hours=1)) is None
        assert await first.release(lease_id, "owner-a") is False

    async def check_release_by_other_owner_is_refused(self) -> None:
        """Release by a non-holder returns ``False`` and leaves the lease held."""
        store = self._make_store()
        lease_id = self._id()
        assert await store.try_acquire(lease_id, "owner-a", timedelta(hours=1)) is not None
        assert await store.release(lease_id, "owner-b") is False
        assert await store.release(self._id(), "owner-a") is False
        assert await store.try_acquire(lease_id, "owner-b", timedelta(hours=1)) is None
        assert await store.renew(lease_id, "owner-a", timedelta(hours=1)) is not None

    async def check_expired_lease_is_acquirable_and_old_holder_lost_it(self) -> None:
        """After the TTL passes another owner acquires; the old holder can no longer renew."""
        first, second = self._make_store(), self._make_store()
        lease_id = self._id()
        assert await first.try_acquire(lease_id, "owner-a", self.short_ttl) is not None
        await self._expire()
        assert await first.renew(lease_id, "owner-a", self.short_ttl) is None, (
            "an expired lease must not be renewed"
        )
        taken = await second.try_acquire(lease_id, "owner-b", timedelta(hours=1))
        assert taken is not None, "an expired lease must be acquirable"
        assert await first.renew(lease_id, "owner-a", timedelta(hours=1)) is None
        assert await first.try_acquire(lease_id, "owner-a", timedelta(hours=1)) is None

    async def check_ttl_overflow_saturates(self) -> None:
        """A TTL whose expiry overflows saturates to "never expires" and never raises."""
        store = self._make_store()
        lease_id = self._id()
        lease = await store.try_acquire(lease_id, "owner-a", timedelta.max)
        assert lease is not None, "an overflowing TTL must still grant the lease"
        assert lease.expires_at >= datetime(9999, 12, 31, tzinfo=UTC), lease.expires_at
        assert lease.never_expires
        renewed = await store.renew(lease_id, "owner-a", timedelta(days=999_999_999))
        assert renewed is not None and renewed.never_expires
        await self._expire()
        assert await store.try_acquire(lease_id, "owner-b", self.short_ttl) is None
        assert await store.release(lease_id, "owner-a") is True
        assert await store.try_acquire(lease_id, "owner-b", self.short_ttl) is not None

    async def check_ids_are_exact_and_tricky_values_round_trip(self) -> None:
        """Quotes, SQL, unicode and 255-character ids are stored verbatim; case matters."""
        store = self._make_store()
        suffix = uuid.uuid4().hex[:8]
        for raw in TRICKY_IDS:
            lease_id = raw if len(raw) >= 200 else f"{raw} {suffix}"
            lease = await store.try_acquire(lease_id, raw, timedelta(hours=1))
            assert lease is not None and lease.lease_id == lease_id and lease.owner_id == raw
            assert await store.try_acquire(lease_id, "other-owner", timedelta(hours=1)) is None
            assert await store.release(lease_id, raw) is True
        upper, lower = f"CASE-{suffix}", f"case-{suffix}"
        assert await store.try_acquire(upper, "Owner", timedelta(hours=1)) is not None
        assert await store.try_acquire(lower, "owner", timedelta(hours=1)) is not None, (
            "lease ids must be case-sensitive"
        )
        assert await store.try_acquire(upper, "owner", timedelta(hours=1)) is None, (
            "owner ids must be case-sensitive"
        )

    async def check_invalid_input_is_rejected(self) -> None:
        """Empty, blank, padded, over-long, control-character ids and bad TTLs raise."""
        store = self._make_store()
        bad_ids = ["", "   ", " padded", "x" * 10_240, "nul\x00byte", "line\nbreak", "del\x7f"]
        for bad in bad_ids:
            what = repr(bad[:20])
            one = timedelta(seconds=1)
            await _expect_config_error(store.try_acquire(bad, "owner", one), what)
            await _expect_config_error(store.try_acquire("lease", bad, one), what)
            await _expect_config_error(store.renew(bad, "owner", one), what)
            await _expect_config_error(store.release("lease", bad), what)
        for ttl in (timedelta(0), timedelta(seconds=-1)):
            await _expect_config_error(store.try_acquire(self._id(), "o", ttl), str(ttl))
            await _expect_config_error(store.renew(self._id(), "o", ttl), str(ttl))

    async def check_concurrent_acquire_has_one_winner(self) -> None:
        """Many instances racing for one free lease: exactly one wins."""
        lease_id = self._id()
        stores = [self._make_store() for _ in range(self.contenders)]
        results = await asyncio.gather(
            *(
                store.try_acquire(lease_id, f"owner-{index}", timedelta(hours=1))
                for index, store in enumerate(stores)
            )
        )
        winners = [lease for lease in results if lease is not None]
        assert len(winners) == 1, f"expected one winner, got {len(winners)}"

    async def check_list_runtime_leases_reports_every_row(self) -> None:
        """Listing shows held and expired rows in ``lease_id`` order, never released ones."""
        store = self._make_store()
        prefix = self._id("list")
        a_id, b_id, c_id = f"{prefix}-a", f"{prefix}-b", f"{prefix}-c"
        b_lease = await store.try_acquire(b_id, "owner-b", timedelta(hours=1))
        a_lease = await store.try_acquire(a_id, "owner-a", self.short_ttl)
        assert await store.try_acquire(c_id, "owner-c", timedelta(hours=1)) is not None
        assert await store.release(c_id, "owner-c") is True
        assert a_lease is not None and b_lease is not None

        first = await _listing(store, prefix)
        assert [v.lease_id for v in first] == [a_id, b_id], "rows in lease_id order, released gone"
        a, b = first
        assert (a.owner_id, a.expires_at, a.expired) == ("owner-a", a_lease.expires_at, False)
        assert (b.owner_id, b.expires_at, b.expired) == ("owner-b", b_lease.expires_at, False)

        await self._expire()
        renewed = await store.renew(b_id, "owner-b", timedelta(hours=1))
        assert renewed is not None, "the holder must renew"
        second = await _listing(store, prefix)
        assert [v.lease_id for v in second] == [a_id, b_id], "an expired row is still listed"
        a2, b2 = second
        assert a2.expired and a2.owner_id == "owner-a", "the expired row keeps its last owner"
        assert not b2.expired and b2.expires_at == renewed.expires_at
        if b.acquired_at is not None and b.updated_at is not None:
            assert b2.acquired_at == b.acquired_at, "renewal keeps the acquisition time"
            assert b2.updated_at is not None and b2.updated_at > b.updated_at, (
                "renewal moves updated_at"
            )

        taken = await store.try_acquire(a_id, "owner-x", timedelta(hours=1))
        assert taken is not None, "an expired lease must be acquirable"
        (a3, _) = await _listing(store, prefix)
        assert (a3.owner_id, a3.expires_at, a3.expired) == ("owner-x", taken.expires_at, False)
        if a.acquired_at is not None:
            assert a3.acquired_at is not None and a3.acquired_at > a.acquired_at, (
                "a new owner gets a new acquisition time"
            )


async def _listing(store: RuntimeLeaseStore, prefix: str) -> list[RuntimeLeaseView]:
    """List the store, check the invariants of the whole listing, return our rows."""
    listing = await store.list_runtime_leases()
    assert isinstance(listing, RuntimeLeases)
    assert listing.now.utcoffset() == timedelta(0), "now must be aware UTC"
    ids = [view.lease_id for view in listing.leases]
    assert ids == sorted(ids), "leases must be ordered by lease_id"
    assert len(set(ids)) == len(ids), "each lease is listed once"
    for view in listing.leases:
        assert view.expired == (view.expires_at <= listing.now), view
        stamps = [view.expires_at, view.acquired_at, view.updated_at]
        assert all(t is None or t.utcoffset() == timedelta(0) for t in stamps), view
        if view.acquired_at is not None and view.updated_at is not None:
            assert view.acquired_at <= view.updated_at <= listing.now, view
    return [view for view in listing.leases if view.lease_id.startswith(prefix)]


async def _expect_config_error(call: Awaitable[object], what: str) -> None:
    try:
        await call
    except RuntimeLeaseConfigError:
        return
    raise AssertionError(f"invalid input {what} was not rejected with RuntimeLeaseConfigError")
