"""Store and bridge protocols of :mod:`aster_forge.runtime`.

Products (or :mod:`aster_forge.db`, :mod:`aster_forge.metrics`) implement these;
:mod:`aster_forge.testing` ships in-memory implementations and conformance suites.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ._health import HealthComponentReport, HealthStatus
    from ._lease import RuntimeLease, RuntimeLeases

# --- health: HealthMetricsRecorder ---


@runtime_checkable
class HealthMetricsRecorder(Protocol):
    """A metrics backend that health reports are bridged to.

    :meth:`SystemHealthReport.record_metrics` calls :meth:`record_health_report` once and
    :meth:`record_health_component` for each component. ``aster_forge.metrics`` ships a
    prometheus_client implementation; products may adapt their own backend. Keep labels
    low-cardinality: scope and component names, never messages.
    """

    def record_health_report(
        self, scope: str, status: HealthStatus, duration_seconds: float
    ) -> None:
        """Record the aggregate status and wall time of one run of ``scope``."""
        ...

    def record_health_component(
        self, scope: str, component: HealthComponentReport, duration_seconds: float
    ) -> None:
        """Record one component's status and check duration for ``scope``."""
        ...


# --- lease: RuntimeLeaseStore ---


@runtime_checkable
class RuntimeLeaseStore(Protocol):
    """Coordinates which process holds a runtime lease (one singleton worker group).

    Every operation is conditional on ``owner_id`` and atomic across processes: at
    most one owner holds a lease id at any instant. Expiry is computed on the
    database server's clock where the backend has one (PostgreSQL, MariaDB) and on
    the store's injected clock otherwise. A TTL whose expiry is not representable
    saturates to "never expires" (:data:`~aster_forge.runtime.NEVER_EXPIRES`) and
    never raises. Invalid ids or TTLs raise
    :class:`~aster_forge.runtime.errors.RuntimeLeaseConfigError` before any I/O.

    Implementations: :class:`aster_forge.db.RuntimeLeaseDbStore`,
    :class:`aster_forge.testing.InMemoryRuntimeLeaseStore`; check your own with
    :class:`aster_forge.testing.RuntimeLeaseStoreConformance`.
    """

    async def try_acquire(
        self, lease_id: str, owner_id: str, ttl: timedelta
    ) -> RuntimeLease | None:
        """Take the lease if it is free, expired, or already held by ``owner_id``.

        Returns:
            The granted lease (expiry ``now + ttl``), or ``None`` when another owner
            holds an unexpired lease.
        """
        ...

    async def renew(self, lease_id: str, owner_id: str, ttl: timedelta) -> RuntimeLease | None:
        """Extend the lease to ``now + ttl`` if ``owner_id`` still holds it unexpired.

        Returns:
            The renewed lease, or ``None`` when the lease expired, was released, or
            belongs to someone else (the caller lost it).
        """
        ...

    async def release(self, lease_id: str, owner_id: str) -> bool:
        """Give the lease up so another owner can acquire it immediately.

        Returns:
            ``True`` when ``owner_id`` held the lease and released it, else ``False``.
        """
        ...

    async def list_runtime_leases(self) -> RuntimeLeases:
        """Return every stored lease for diagnostics (read-only, any owner).

        Rows are ordered by ``lease_id``; expired rows are included with
        ``expired=True`` (judged at the returned ``now``, the same clock the
        store's expiry uses). Released leases are absent.
        """
        ...
